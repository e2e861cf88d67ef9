"""ONNX models: embedding tables among the graph's initializers, read with the ``onnx``
package (the optional extra ``popaudit[onnx]``); the graph itself is never run.

An embedding table is a 2-D floating-point initializer that a ``Gather`` (axis 0) looks rows
up in; when its name says nothing of its role, the graph input that feeds the ids does
(``item_id`` → the item table). Without such a ``Gather``, every 2-D floating-point
initializer is a candidate, chosen by name as in a state dict. Weights kept in external
data files (what ``torch.onnx.export`` writes beside the model) are read only from regular
files inside the model's folder, their offsets and lengths checked against the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from auditor.config import LoadOptions
from auditor.errors import ModelLoadError, NoItemTableError, setting
from auditor.loading.discovery import choose_tables, table_role, table_to_numpy, tensor_infos
from auditor.loading.item_bias import one_per_item, set_item_bias
from auditor.loading.onnx_graph import bias_role, constant_tensors, id_source, looked_up_by, tower_of
from auditor.loading.pickle_scan import reason, shown
from auditor.loading.side_files import external_location
from auditor.model import ModelBundle

EXTRA = 'pip install "popaudit[onnx]"'
# TensorProto data types popaudit reads as floats, and their little-endian numpy dtypes.
_FLOATS = {1: "<f4", 10: "<f2", 11: "<f8", 16: "<u2"}  # FLOAT, FLOAT16, DOUBLE, BFLOAT16 (bits)
_EXTERNAL = 1  # TensorProto.EXTERNAL


def _onnx() -> Any:
    try:
        import onnx  # type: ignore[import-not-found, unused-ignore]
    except ImportError as exc:
        raise ModelLoadError(f"reading ONNX models needs the onnx package: {EXTRA}") from exc
    return onnx


def read_onnx(path: Path, options: LoadOptions) -> ModelBundle:
    """The item (and user) embedding tables among an ONNX model's initializers."""
    onnx = _onnx()
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf's DecodeError and the C++ parser's errors share no base class
        raise ModelLoadError(f"cannot read {path} as ONNX: {reason(exc)} (truncated or corrupt?)") from exc
    graph = model.graph
    inits = constant_tensors(graph)
    floats = {name: t for name, t in inits.items() if t.data_type in _FLOATS}
    if not any(len(t.dims) == 2 for t in floats.values()):
        found = "; ".join(f"{shown(n)} {list(t.dims)}" for n, t in list(inits.items())[:10]) or "none"
        raise ModelLoadError(
            f"no item embedding table in {path}: the ONNX graph has no 2-D floating-point initializer "
            f"(initializers: {found})"
        )
    gathered = _gathered(graph, floats)
    tables = {key: floats[name] for key, name in gathered.items()} or {
        name: t for name, t in floats.items() if len(t.dims) == 2
    }
    tensors = {key: _tensor(t, path, onnx) for key, t in tables.items()}
    ungathered = _ungathered(graph, floats, set(gathered.values())) if gathered else {}
    if options.item_key and options.item_key not in tensors and options.item_key in ungathered:
        raise ModelLoadError(_no_gathered_item(f"{setting('item_key')} {options.item_key!r} names an initializer "
                                               f"of {path} that no Gather looks rows up in", tables, ungathered))  # fmt: skip
    try:
        choice = choose_tables(tensor_infos(tensors), path, options.item_key, options.user_key)
    except NoItemTableError as exc:
        if not ungathered:
            raise
        raise NoItemTableError(_no_gathered_item(f"no item embedding table in {path}",
                                                 tables, ungathered)) from exc  # fmt: skip
    notes = list(choice.warnings)
    item = table_to_numpy(tensors[choice.item.key], choice.item, "item table", notes)
    user = table_to_numpy(tensors[choice.user.key], choice.user, "user table", notes) if choice.user else None
    used = {tables[choice.item.key].name} | ({tables[choice.user.key].name} if choice.user else set())
    others = {n: _tensor(t, path, onnx) for n, t in floats.items() if n not in used and len(t.dims) >= 1}
    state = {choice.item.key: tensors[choice.item.key], **others}
    if choice.user:
        state[choice.user.key] = tensors[choice.user.key]
    config = {"producer": f"{model.producer_name} {model.producer_version}".strip()}
    graph_ops = _towers(graph, tables[choice.item.key].name, tables[choice.user.key].name if choice.user else None,
                        config) if gathered else None
    bundle = ModelBundle(
        source=path,
        format="onnx",
        item_table=item,
        item_key=choice.item.key,
        user_table=user,
        user_key=choice.user.key if choice.user else None,
        state_dict=state,
        config=config,
        graph_ops=graph_ops,
        warnings=notes,
    )
    if graph_ops is not None:
        _read_bias(bundle, graph, tables[choice.item.key].name)
    return bundle


def _read_bias(bundle: ModelBundle, graph: Any, item: str) -> None:
    """The item bias of a graph: the one per-item initializer looked up by the item table's
    ids and added to the score (:func:`~auditor.loading.onnx_graph.bias_role`), served with
    the table; one the graph does something else with is named among the item side's nodes,
    so the table stands in, said (:mod:`auditor.loading.stand_in`)."""
    ids = looked_up_by(graph, item)
    found = {k: t for k, t in bundle.state_dict.items() if k not in (bundle.item_key, bundle.user_key)
             and one_per_item(t, bundle.n_items) and looked_up_by(graph, k) & ids}  # fmt: skip
    roles = {k: bias_role(graph, k, item) for k in found}
    added = [k for k, role in roles.items() if role is None]
    if len(added) == 1:
        set_item_bias(bundle, added[0], found[added[0]].to(torch.float64).reshape(-1).numpy())
    beyond = [role or f"`{k}` looked up by the item ids and added to the score beside another bias"
              for k, role in roles.items() if role is not None or len(added) > 1]
    if beyond and bundle.graph_ops is not None:
        bundle.graph_ops = {**bundle.graph_ops, "item": (*bundle.graph_ops.get("item", ()), *beyond)}


def _towers(graph: Any, item: str, user: str | None, config: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    """What the graph computes from each table's rows before the score (``graph_ops``);
    an L2-normalised item side ranks as cosine does, recorded as the config's ``scoring``."""
    items = tower_of(graph, item)
    users = tower_of(graph, user) if user is not None else None
    if items.normalised:
        both = " and the user vectors" if users is not None and users.normalised else ""
        config["scoring"] = "cosine"
        config["scoring_evidence"] = f"its graph L2-normalises the item vectors{both} before the score"
        if not both:  # with an item bias the user's norm then ranks too (u·i/|i| + b_i)
            config["scoring_sides"] = "item"
    elif users is not None and users.normalised:  # ranks as dot, but beside an item bias as u·i/|u| + b_i
        config["scoring_sides"] = "user"
    return {"item": items.ops, "user": users.ops if users is not None else ()}


def _ungathered(graph: Any, floats: dict[str, Any], gathered: set[str]) -> dict[str, str]:
    """Name -> "name [dims] (read by MatMul)" of the 2-D float initializers no Gather looks rows
    up in, beside gathered tables: an item table a graph multiplies whole (``U[u] @ V.T``)."""
    readers = {name: sorted({n.op_type for n in graph.node if name in n.input}) for name in floats}
    return {name: f"{shown(name)} {list(t.dims)} (read by {', '.join(readers[name]) or 'no node'})"
            for name, t in floats.items() if len(t.dims) == 2 and name not in gathered}  # fmt: skip


def _no_gathered_item(lead: str, tables: dict[str, Any], ungathered: dict[str, str]) -> str:
    """Why no item table is read although 2-D initializers are there: popaudit reads the
    initializers a ``Gather`` looks rows up in (``tables``), and the others are read otherwise."""
    gathered = "; ".join(f"{shown(k)} {list(t.dims)}" for k, t in tables.items())
    return (
        f"{lead}: popaudit reads item tables as the 2-D initializers a Gather looks rows up in (here {gathered}, "
        f"none of them the item table), and no Gather reads {'; '.join(list(ungathered.values())[:5])}: an item "
        "table the graph multiplies whole (a full-catalogue score such as U[u] @ V.T, stored transposed) is not "
        "read as one. Export a graph that looks item rows up (an item_id input), or save "
        "the item table itself (.npy, .pt) and audit that"
    )


def _gathered(graph: Any, floats: dict[str, Any]) -> dict[str, str]:
    """Key -> initializer name of 2-D float initializers a Gather (axis 0) reads rows of.

    A name that says neither item nor user is prefixed with the graph input of the ids.
    """
    inputs = {i.name for i in graph.input}
    producers = {o: n for n in graph.node for o in n.output}
    out: dict[str, str] = {}
    for node in graph.node:
        if node.op_type != "Gather" or len(node.input) < 2 or node.input[0] not in floats:
            continue
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        name = node.input[0]
        if axis != 0 or len(floats[name].dims) != 2:
            continue
        ids = id_source(producers, node.input[1])  # through Cast, Reshape, ...
        key = name if table_role(name) is not None or ids not in inputs else f"{ids}/{name}"
        out.setdefault(key, name)
    return out


def _tensor(proto: Any, path: Path, onnx: Any) -> torch.Tensor:
    """A float initializer as a float32 tensor (external data read from checked files)."""
    dims = tuple(int(d) for d in proto.dims)
    dtype = np.dtype(_FLOATS[proto.data_type])
    if proto.data_location == _EXTERNAL:
        array = _external(proto, dims, dtype, path)
    else:
        try:
            array = np.asarray(onnx.numpy_helper.to_array(proto))
        except Exception as exc:  # a size that does not match the data, an unknown type
            raise ModelLoadError(f"cannot read {path}: initializer {shown(proto.name)} is malformed ({reason(exc)})") from exc
        if proto.data_type == 16 and array.dtype != np.float32:  # bfloat16 through ml_dtypes
            array = array.astype(np.float32)
    if proto.data_type == 16 and array.dtype == np.uint16:  # raw bfloat16 bits: the high half of a float32
        array = (array.astype(np.uint32) << 16).view(np.float32)
    return torch.from_numpy(np.require(array, np.float32, ["C", "W"]).reshape(dims))


def _external(proto: Any, dims: tuple[int, ...], dtype: np.dtype[Any], path: Path) -> np.ndarray:
    info = {e.key: e.value for e in proto.external_data}
    name = shown(proto.name)
    location = info.get("location", "")
    target = external_location(path, location)
    if target is None:
        raise ModelLoadError(
            f"cannot read {path}: initializer {name} keeps its data in {shown(location)!s}, "
            "which is not a regular file inside the model's folder"
        )
    try:
        offset, size = int(info.get("offset", "0")), target.stat().st_size
        count = int(np.prod(dims, dtype=np.int64))
        length = int(info.get("length", str(count * dtype.itemsize)))
    except ValueError as exc:
        raise ModelLoadError(f"cannot read {path}: initializer {name} has a malformed external-data entry") from exc
    if length != count * dtype.itemsize or offset < 0 or offset + length > size:
        raise ModelLoadError(
            f"cannot read {path}: initializer {name} {list(dims)} needs {count * dtype.itemsize} bytes at offset "
            f"{offset} of {target.name} ({size} bytes; the entry says {length}): truncated or corrupt"
        )
    return np.fromfile(target, dtype=dtype, count=count, offset=offset)


__all__ = ["EXTRA", "read_onnx"]
