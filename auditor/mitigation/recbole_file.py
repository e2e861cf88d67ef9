"""Rescaled RecBole checkpoints, and rescaled served vectors of RecBole's graph models.

A RecBole checkpoint pickles RecBole's ``Config`` beside the state dict, which popaudit
never rebuilds (that would run code from the file). :func:`write_recbole` therefore
edits the torch zip archive as bytes: the output is a byte copy of the input in which
only the item table's storage member is rewritten (same length: rows rescaled in the
table's dtype, RecBole's padding row 0 kept as stored) and that member's CRC-32 fixed
where the archive records it (central directory, local header or data descriptor).
Every other byte, ``data.pkl`` and the pickled config included, stays as it was, so
RecBole loads the output as it loads its own checkpoints (``torch.load(...,
weights_only=False)``, then ``load_state_dict``).

Only models that serve the dot products of their stored tables are written this way
(:mod:`auditor.loading.recbole_models`): for a propagating model the stored table is
the training mechanism, not what is served, and a rescaled stored table is not
norm-aware serving; its cached ``restore_item_e`` would keep serving the old vectors.
Those go through :func:`write_served_table`: the rescaled served item vectors as a plain
``.npy`` or Parquet table for an inner-product index.
"""

from __future__ import annotations

import shutil
import struct
import zipfile
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from auditor.errors import ModelLoadError, setting
from auditor.loading.checkpoints import interpret
from auditor.loading.recbole import as_recbole
from auditor.loading.recbole_models import CACHED, PROPAGATED, TABLES, serving_of
from auditor.loading.torch_archive import TorchFile, read_torch_file
from auditor.loading.zip_members import CRC_CHUNK, data_offset
from auditor.mitigation.rescale import Written, numpy_io, rescale_blocks
from auditor.mitigation.torch_file import dtype_name, torch_io, tree_problems
from auditor.progress import SILENT, Progress

_DESCRIPTOR = b"PK\x07\x08"
_CENTRAL = b"PK\x01\x02"


def write_recbole(
    source: Path, target: Path, key: str, alpha: float, *, max_memory: int | None = None, progress: Progress = SILENT
) -> Written:
    """Copy the RecBole checkpoint ``source`` to ``target`` with state-dict table ``key``
    (as ``check`` names it) rescaled row by row, padding row 0 kept; see the module docstring.

    ModelLoadError when the file is not a RecBole zip checkpoint, when its model does not
    serve its stored tables, when it caches served vectors (``restore_item_e``), or when
    another tensor shares the table's storage.
    """
    source, target = Path(source), Path(target)
    found = read_torch_file(source, max_memory)
    root = found.root if isinstance(found.root, Mapping) else {}
    state = root.get("state_dict")
    tensor = state.get(key) if isinstance(state, Mapping) else None
    if found.kind != "zip" or not isinstance(tensor, torch.Tensor):
        raise ModelLoadError(f"{source} is not a RecBole checkpoint (a torch zip archive with state_dict[{key!r}])")
    _check_model(found, source)
    storage = found.storage_of(tensor)
    rows, dim = (int(tensor.shape[0]), int(tensor.shape[1])) if tensor.ndim == 2 else (0, 0)
    if storage is None or rows < 2 or not tensor.is_floating_point() or tuple(tensor.stride()) != (dim, 1):
        raise ModelLoadError(
            f"{source}: state_dict[{key!r}] is not a row-major 2-D float table with RecBole's padding row and "
            "its own zip member; popaudit rewrites only such a member"
        )
    _check_unshared(found, tensor, key, source)
    infos = _members(source)
    info = infos.get(storage.key)
    if info is None or info.compress_type != zipfile.ZIP_STORED:
        raise ModelLoadError(f"{source}: the storage of {key!r} is not a stored (uncompressed) zip member")
    shutil.copyfile(source, target)
    with open(target, "r+b") as fh:
        size = fh.seek(0, 2)
        start = data_offset(fh, size, info) + int(tensor.storage_offset()) * tensor.element_size()
        padding = tensor[0].clone()
        source_rows, _ = torch_io(tensor[1:], tensor[1:])
        row_bytes = dim * tensor.element_size()

        def write(first: int, stop: int, values: np.ndarray) -> np.ndarray:
            stored = torch.from_numpy(values).to(tensor.dtype)
            fh.seek(start + (first + 1) * row_bytes)  # after the padding row
            fh.write(stored.contiguous().view(torch.uint8).numpy().tobytes())
            return stored.to(torch.float64).numpy()

        norms = rescale_blocks(rows - 1, dim, alpha, source_rows, write, max_memory=max_memory, progress=progress)
        assert torch.equal(padding, tensor[0]), "the source table is read, never written"
        _fix_crc(fh, size, info, source)
    notes = [
        f"RecBole checkpoint: only the zip member of {key!r} ({info.filename}) was rewritten, its CRC-32 updated; "
        "every other byte, the pickled config included, is the input's. The padding row 0 is kept as stored"
    ]
    return Written(norms, dtype_name(tensor.dtype), "rows", notes)


def _check_model(found: TorchFile, source: Path) -> None:
    """Refuse models whose served vectors are not the stored tables, and stale caches."""
    raw = as_recbole(interpret(found.root, source))
    if raw.format != "recbole" or raw.config is None:
        raise ModelLoadError(f"{source} is not a RecBole checkpoint: it holds no pickled RecBole Config")
    serving = serving_of(raw.config)
    model = f"{source} is a RecBole {serving.model or 'model'} checkpoint: the model scores with {serving.how}"
    if serving.kind in (PROPAGATED, CACHED):
        raise ModelLoadError(
            f"{model}, so a rescaled stored table is not norm-aware serving. Write the rescaled served item vectors "
            f"as a plain table for the index instead: give {setting('output')} a .npy or .parquet name"
        )
    if serving.scoring == "cosine":
        raise ModelLoadError(f"{model}: its serving ignores item norms already, so rescaling them changes nothing")
    if serving.kind != TABLES:
        raise ModelLoadError(f"{model}, not with dot products of its tables: a rescaled table would not change what it serves")
    other = found.root.get("other_parameter") if isinstance(found.root, Mapping) else None
    if isinstance(other, Mapping) and isinstance(other.get("restore_item_e"), torch.Tensor):
        raise ModelLoadError(
            f"{source} caches served item vectors (other_parameter restore_item_e) that RecBole would keep serving "
            "instead of the rescaled table; popaudit does not write such a checkpoint"
        )


def _check_unshared(found: TorchFile, tensor: torch.Tensor, key: str, source: Path) -> None:
    """No other tensor of the file may view the table's bytes (it would change with them)."""
    if tree_problems(found.root, tensor)[1]:
        raise ModelLoadError(f"{source}: another tensor shares the storage of {key!r}; popaudit does not rewrite it")


def _members(path: Path) -> dict[str, zipfile.ZipInfo]:
    with zipfile.ZipFile(path) as zf:
        return {i.filename: i for i in zf.infolist()}


def _fix_crc(fh: Any, size: int, info: zipfile.ZipInfo, source: Path) -> None:
    """Write the member's new CRC-32 wherever the archive records the old one."""
    start = data_offset(fh, size, info)
    fh.seek(start)
    crc, left = 0, info.file_size
    while left:
        chunk = fh.read(min(CRC_CHUNK, left))
        crc, left = zlib.crc32(chunk, crc), left - len(chunk)
    places = [_central_crc(fh, size, info, source)]
    fh.seek(info.header_offset + 14)
    if struct.unpack("<I", fh.read(4))[0] == info.CRC:
        places.append(info.header_offset + 14)
    if info.flag_bits & 0x08:  # a data descriptor after the data: optional signature, then the CRC
        fh.seek(start + info.compress_size)
        head = fh.read(8)
        at = start + info.compress_size + (4 if head[:4] == _DESCRIPTOR else 0)
        fh.seek(at)
        if struct.unpack("<I", fh.read(4))[0] != info.CRC:
            raise ModelLoadError(f"{source}: the data descriptor of zip member {info.filename!r} is not where it should be")
        places.append(at)
    for at in places:
        fh.seek(at)
        fh.write(struct.pack("<I", crc))


def _central_crc(fh: Any, size: int, info: zipfile.ZipInfo, source: Path) -> int:
    """Where the central directory records the CRC-32 of ``info``'s member."""
    with zipfile.ZipFile(fh) as zf:
        at, count = zf.start_dir, len(zf.infolist())
    name = info.filename.encode("utf-8" if info.flag_bits & 0x800 else "cp437")
    for _ in range(count):
        fh.seek(at)
        head = fh.read(46)
        if len(head) != 46 or head[:4] != _CENTRAL:
            break
        lengths = struct.unpack("<HHH", head[28:34])
        if fh.read(lengths[0]) == name:
            return at + 16
        at += 46 + sum(lengths)
    raise ModelLoadError(f"{source}: zip member {info.filename!r} has no central directory entry popaudit can find")


def write_served_table(
    items: np.ndarray,
    target: Path,
    alpha: float,
    fmt: str = "npy",
    *,
    item_ids: np.ndarray | None = None,
    max_memory: int | None = None,
    progress: Progress = SILENT,
) -> Written:
    """The served item vectors rescaled, as a plain table for an inner-product index:
    ``fmt`` ``npy`` (rows in the model's item order) or ``parquet`` (``item_id`` when ids
    are given, then ``embedding``, a fixed-size list of float32)."""
    if fmt not in ("npy", "parquet"):
        raise ValueError(f"served tables are written as npy or parquet, not {fmt!r}")
    vectors = np.ascontiguousarray(items, dtype=np.float32)
    n_rows, dim = vectors.shape
    out = np.empty_like(vectors)
    norms = rescale_blocks(n_rows, dim, alpha, *numpy_io(vectors, out), max_memory=max_memory, progress=progress)
    note = "the model's served item vectors (not its stored table), rescaled: serve them by dot product"
    if fmt == "parquet":
        column = pa.FixedSizeListArray.from_arrays(pa.array(out.reshape(-1), type=pa.float32()), dim)
        columns = {"item_id": pa.array(item_ids)} if item_ids is not None else {}
        pq.write_table(pa.table({**columns, "embedding": column}), target)
    else:
        with open(target, "wb") as fh:  # a file object: np.save would add .npy to a temporary name
            np.save(fh, out)
    return Written(norms, "float32", "rows", [note])
