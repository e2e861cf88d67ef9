"""The files a model's reader reads beside the model file: an ONNX graph's external data.

``torch.onnx.export(..., external_data=True)`` (always so above 2 GB) keeps the tables in
a data file beside a small graph, and a retrained model re-exported under the same names
changes only that file. Every file a run reads is an input: no output may overwrite it
(:func:`auditor.output_guard.check_not_inputs`) and a batch row's provenance covers it (``--resume``
audits the row again when it changed). Listed from the graph alone (``onnx`` parses it
without its external data, and nothing is imported without an ``.onnx`` model), by the
rule the reader follows: a relative location naming a regular file inside the model's
folder.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

_EXTERNAL = 1  # TensorProto.EXTERNAL


def external_location(model: Path, location: str) -> Path | None:
    """The file an external-data ``location`` of ``model`` names, or None when the
    reader refuses it (absolute, leaving the model's folder, not a regular file)."""
    folder = model.resolve().parent
    target = (folder / location).resolve()
    if not location or Path(location).is_absolute() or folder not in target.parents or not target.is_file():
        return None
    return target


def side_files(model: Path | None) -> list[Path]:
    """The files beside ``model`` its reader reads (resolved, in the graph's order, each
    once); none for a model of another format, or one that cannot be parsed (its audit
    then fails, saying why)."""
    if model is None or model.suffix.lower() != ".onnx":
        return []
    try:
        st = os.stat(model)
    except (OSError, ValueError):
        return []
    return list(_onnx_external(str(Path(model).resolve()), st.st_size, st.st_mtime_ns, st.st_ctime_ns))


def side_inputs(model: Path | None, owner: str) -> dict[str, Path]:
    """:func:`side_files` by what names them (``the external data of MODEL``), for
    :func:`auditor.output_guard.check_not_inputs` (``owner``: how messages name the model)."""
    files = side_files(model)
    return {f"the external data{'' if i == 0 else f' #{i + 1}'} of {owner}": path for i, path in enumerate(files)}


@functools.lru_cache(maxsize=256)
def _onnx_external(model: str, _size: int, _mtime_ns: int, _ctime_ns: int) -> tuple[Path, ...]:
    """External data files of the ONNX graph ``model`` (cached per file state: a batch asks
    for each row's, before and after its audit)."""
    try:
        import onnx  # type: ignore[import-not-found, unused-ignore]

        graph = onnx.load(model, load_external_data=False).graph
    except Exception:  # no onnx package, or not a graph: the reader says so, worded
        return ()
    found: dict[Path, None] = {}
    constants = (a.t for n in graph.node if n.op_type == "Constant" for a in n.attribute
                 if a.name == "value" and a.type == 4)  # TENSOR attributes, which the reader reads too
    for tensor in (*graph.initializer, *constants):
        if tensor.data_location == _EXTERNAL:
            location = next((e.value for e in tensor.external_data if e.key == "location"), "")
            target = external_location(Path(model), location)
            if target is not None:
                found.setdefault(target)
    return tuple(found)


__all__ = ["external_location", "side_files", "side_inputs"]
