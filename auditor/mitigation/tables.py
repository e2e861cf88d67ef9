"""Rescaled copies of ``.npy``, Parquet and safetensors item tables, in their own format.

Each writer reads the source in row blocks (or Parquet row groups) and writes the target
as it goes, so a table larger than memory is never held whole:

* ``.npy``: the same dtype, shape and memory order, written through a memory map;
* Parquet: every column but the vector column passes through unchanged, with the schema
  (its metadata included), the row groups and each column's compression codec;
* safetensors: a byte copy of the file whose item-tensor bytes are then overwritten in
  place: the header (dtypes, shapes, offsets, ``__metadata__``) and every other tensor
  stay byte for byte.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from auditor.errors import ModelLoadError
from auditor.loading.messages import arrow_reason
from auditor.loading.npy import load_npy
from auditor.loading.discovery import TensorInfo
from auditor.mitigation.rescale import RowNorms, Written, numpy_io, rescale_blocks
from auditor.progress import SILENT, Progress

SAFETENSORS_DTYPES = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
    "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
}  # fmt: skip
"""safetensors dtype codes of floating tensors, as names of torch dtypes (torch is
imported where a safetensors file is written: writing .npy or Parquet needs none)."""


def write_npy(
    source: Path, target: Path, alpha: float, *, max_memory: int | None = None, progress: Progress = SILENT
) -> Written:
    """Rescale the ``.npy`` table ``source`` into ``target``."""
    table = load_npy(source, "numeric .npy table", ModelLoadError, mmap=True)
    if table.ndim != 2 or table.dtype.kind != "f":
        raise ModelLoadError(
            f"{source} holds a {table.dtype} array of shape {list(table.shape)}; popaudit mitigate rescales "
            "a 2-D floating-point table and writes it in its own dtype (convert an integer table to float first)"
        )
    out = np.lib.format.open_memmap(
        target, mode="w+", dtype=table.dtype, shape=table.shape, fortran_order=bool(np.isfortran(table))
    )
    try:
        read, write = numpy_io(table, out)
        n_rows, dim = table.shape
        norms = rescale_blocks(n_rows, dim, alpha, read, write, max_memory=max_memory, progress=progress)
        out.flush()
    finally:
        del out
    return Written(norms, str(table.dtype))


# ---------------------------------------------------------------- Parquet


def _codecs(metadata: pq.FileMetaData) -> dict[str, str]:
    """Each column's compression codec (by column path), as the writer spells it."""
    if metadata.num_row_groups == 0:
        return {}
    group = metadata.row_group(0)
    names = {"uncompressed": "none", "lz4_raw": "lz4"}
    codecs = {}
    for j in range(group.num_columns):
        codec = str(group.column(j).compression).lower()
        codecs[str(group.column(j).path_in_schema)] = names.get(codec, codec)
    return codecs


def _vector_array(original: pa.Array, values: np.ndarray) -> pa.Array:
    """A list array of ``original``'s type (list, large list or fixed-size list) holding ``values``."""
    kind = original.type
    flat = pa.array(values.reshape(-1), type=kind.value_type)
    n, dim = values.shape
    if pa.types.is_fixed_size_list(kind):
        return pa.FixedSizeListArray.from_arrays(flat, type=kind)
    if pa.types.is_large_list(kind):
        return pa.LargeListArray.from_arrays(pa.array(np.arange(0, n * dim + 1, dim, dtype=np.int64)), flat, type=kind)
    return pa.ListArray.from_arrays(pa.array(np.arange(0, n * dim + 1, dim, dtype=np.int32)), flat, type=kind)


def write_parquet(
    source: Path,
    target: Path,
    column: str,
    alpha: float,
    dim: int,
    *,
    max_memory: int | None = None,
    progress: Progress = SILENT,
) -> Written:
    """Rescale vector column ``column`` of ``source`` into ``target``, one row group at a
    time (values in the column's own float type; every other column passed through)."""
    try:
        pf = pq.ParquetFile(source, pre_buffer=False)
    except (OSError, pa.ArrowException) as exc:
        raise ModelLoadError(f"cannot read {source} as Parquet: {arrow_reason(exc)}") from exc
    schema = pf.schema_arrow
    index = schema.get_field_index(column)
    dtype = np.dtype(schema.field(index).type.value_type.to_pandas_dtype())
    try:
        writer = pq.ParquetWriter(
            target, schema, compression=_codecs(pf.metadata) or "snappy", version=pf.metadata.format_version
        )
    except (pa.ArrowException, ValueError):  # a codec this pyarrow cannot write: its defaults
        writer = pq.ParquetWriter(target, schema)
    before: list[np.ndarray] = []
    after: list[np.ndarray] = []
    try:
        with progress.track("Rescaling the item table", total=pf.metadata.num_rows) as advance:
            for group in range(pf.metadata.num_row_groups):
                table = pf.read_row_group(group)
                vectors = table.column(index).combine_chunks()
                values = np.asarray(vectors.flatten().to_numpy(zero_copy_only=False), dtype=dtype)
                rows = values.reshape(table.num_rows, dim)
                out = np.empty_like(rows)
                norms = rescale_blocks(table.num_rows, dim, alpha, *numpy_io(rows, out), max_memory=max_memory)
                table = table.set_column(index, schema.field(index), _vector_array(vectors, out))
                writer.write_table(table.replace_schema_metadata(schema.metadata), row_group_size=max(1, table.num_rows))
                before.append(norms.before)
                after.append(norms.after)
                advance(table.num_rows)
    finally:
        writer.close()
    return Written(RowNorms(np.concatenate(before), np.concatenate(after)), str(dtype))


# ---------------------------------------------------------------- safetensors


def _safetensors_entry(source: Path, key: str) -> tuple[int, dict[str, Any]]:
    """(byte offset of the data buffer, header entry of ``key``) of a safetensors file."""
    with open(source, "rb") as fh:
        size = int.from_bytes(fh.read(8), "little")
        try:
            header = json.loads(fh.read(size))
            entry = header[key]
        except (ValueError, KeyError, TypeError) as exc:
            raise ModelLoadError(f"cannot read the header entry of {key!r} in {source}") from exc
    return 8 + size, entry


def write_safetensors(
    source: Path,
    target: Path,
    key: str,
    alpha: float,
    *,
    max_memory: int | None = None,
    progress: Progress = SILENT,
) -> Written:
    """Copy ``source`` to ``target`` byte for byte, then rescale tensor ``key``'s bytes in place."""
    import torch

    from auditor.mitigation.torch_file import dtype_name, rescale_tensor

    base, entry = _safetensors_entry(source, key)
    name = SAFETENSORS_DTYPES.get(entry.get("dtype"))  # type: ignore[arg-type]
    dtype: torch.dtype | None = None if name is None else getattr(torch, name)
    shape = [int(s) for s in entry.get("shape", [])]
    if dtype is None or len(shape) != 2:
        raise ModelLoadError(
            f"tensor {key!r} of {source} is {entry.get('dtype')} {shape}; popaudit mitigate rescales a 2-D "
            "floating-point table"
        )
    transposed = TensorInfo(key, (shape[0], shape[1]), True).onehot_linear  # as check reads it
    begin, end = (int(x) for x in entry["data_offsets"])
    row_bytes = shape[1] * dtype.itemsize
    shutil.copyfile(source, target)
    with open(source, "rb") as src, open(target, "r+b") as dst:
        if transposed:  # a linear layer over one-hot ids: its columns are the items; small enough to hold
            src.seek(base + begin)
            tensor = torch.frombuffer(bytearray(src.read(end - begin)), dtype=dtype).reshape(shape)
            out = torch.empty_like(tensor)
            norms = rescale_tensor(tensor, out, alpha, True, max_memory=max_memory, progress=progress)
            dst.seek(base + begin)
            dst.write(out.contiguous().view(torch.uint8).numpy().tobytes())
            return Written(norms, dtype_name(dtype), "columns")

        def read(start: int, stop: int) -> np.ndarray:
            src.seek(base + begin + start * row_bytes)
            raw = bytearray(src.read((stop - start) * row_bytes))
            return torch.frombuffer(raw, dtype=dtype).reshape(stop - start, shape[1]).to(torch.float64).numpy()

        def write(start: int, stop: int, rows: np.ndarray) -> np.ndarray:
            stored = torch.from_numpy(rows).to(dtype)
            dst.seek(base + begin + start * row_bytes)
            dst.write(stored.contiguous().view(torch.uint8).numpy().tobytes())
            return stored.to(torch.float64).numpy()

        norms = rescale_blocks(shape[0], shape[1], alpha, read, write, max_memory=max_memory, progress=progress)
    return Written(norms, dtype_name(dtype))


__all__ = ["SAFETENSORS_DTYPES", "write_npy", "write_parquet", "write_safetensors"]
