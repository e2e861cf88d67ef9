"""Parquet item tables (an id column and a list<float> column), and the one rule by
which every Parquet vector column becomes a matrix (:func:`vector_matrix`): item
tables, query files and the row shards Dask workers read all go through it.

Tables are read in record batches into one preallocated float32 array, which is a
temporary memory map when the table exceeds the memory ceiling, so a table larger than
memory is never held whole.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from auditor.errors import AmbiguousTableError, EmbeddingTableError, InputError, ModelLoadError, setting
from auditor.loading.ids import ID_COLUMN_NAMES, ids_to_numpy, refuse_empty_ids
from auditor.loading.messages import arrow_reason, looks_like_names
from auditor.loading.parquet_bounds import TextDecoder, check_pages, check_values, text_columns
from auditor.loading.pickle_scan import shown
from auditor.loading.validation import first_rows
from auditor.memory import MIN_BLOCK_ROWS, check_memory_ceiling, memory_budget, spill_note, spill_table

PARQUET_BATCH_ROWS = 1 << 16
"""Rows per record batch when a vector column is streamed."""


def is_vector_type(type_: pa.DataType, integers: bool = False) -> bool:
    """A list, large-list or fixed-size-list of floats (or of integers with ``integers``)."""
    types = pa.types
    if not (types.is_list(type_) or types.is_large_list(type_) or types.is_fixed_size_list(type_)):
        return False
    return bool(types.is_floating(type_.value_type) or (integers and types.is_integer(type_.value_type)))


def vector_matrix(
    vectors: pa.Array,
    what: str,
    *,
    first_row: int = 0,
    width: int | None = None,
    error: type[InputError] = EmbeddingTableError,
) -> np.ndarray:
    """A list column (one batch of it) as a float32 (rows, width) matrix.

    The rule: no vector may be null; every vector is as long as the column's first
    (``width``, when an earlier batch of the column set it); a null inside a vector
    reads as NaN, which the finiteness checks downstream report by row. ``first_row``
    is the column row of ``vectors[0]``, so messages name rows of the file. Raises
    ``error`` naming ``what``.
    """
    if vectors.null_count:
        nulls = np.flatnonzero(vectors.is_null().to_numpy(zero_copy_only=False)) + first_row
        raise error(f"{what} has empty vectors (rows {first_rows(nulls)})")
    n = len(vectors)
    if pa.types.is_fixed_size_list(vectors.type):
        width = int(vectors.type.list_size)
    elif n:
        lengths = pc.list_value_length(vectors).to_numpy(zero_copy_only=False)
        reference = "earlier rows have" if width is not None else f"row {first_row} has"
        width = int(lengths[0]) if width is None else width
        bad = np.flatnonzero(lengths != width)
        if bad.size:
            raise error(
                f"{what}: vectors have different lengths ({reference} {width}, "
                f"row {int(bad[0]) + first_row} has {int(lengths[bad[0]])})"
            )
    values = vectors.flatten().to_numpy(zero_copy_only=False)
    return np.asarray(values, dtype=np.float32).reshape(n, width or 0)


def read_parquet_table(
    path: Path,
    vector_col: str | None = None,
    *,
    max_memory: int | None = None,
    warnings: list[str] | None = None,
) -> tuple[np.ndarray, np.ndarray | None, str]:
    """(table, ids, vector column) from a Parquet file of an id column and a float-list column.

    Read in record batches into one preallocated float32 array: in RAM when the table
    fits the memory ceiling (``max_memory``, else half the available memory), otherwise a
    temporary disk-backed memory map (:func:`~auditor.memory.spill_table`; a note is
    appended to ``warnings``). Raises InputError when ``max_memory`` cannot hold one row block.
    """
    try:
        pf = pq.ParquetFile(path, pre_buffer=False)  # stream, do not buffer column chunks ahead
    except (OSError, pa.ArrowException) as exc:
        raise ModelLoadError(f"cannot read {path} as Parquet: {arrow_reason(exc)}") from exc
    schema = pf.schema_arrow
    vector_col = _choose_vector_column(schema, path, vector_col)
    id_col = _id_column(schema, path)
    read = [vector_col] + ([id_col] if id_col else [])
    if warnings is not None:
        warnings.extend(unread_columns(schema, read, path))
    n = int(pf.metadata.num_rows)
    vtype = schema.field(vector_col).type
    dim: int | None = int(vtype.list_size) if pa.types.is_fixed_size_list(vtype) else None
    batch_rows = _batch_rows(pf, path, vector_col, dim, n, max_memory)
    # Nothing is decoded before the pages and the values they declare are checked.
    check_values(pf, path, vector_col, ModelLoadError)
    check_pages(pf, path, read, max_memory, ModelLoadError)
    text = text_columns(schema, read)
    if text:  # text ids stay dictionaries until their decoded size is checked
        pf = pq.ParquetFile(path, pre_buffer=False, read_dictionary=text, metadata=pf.metadata)
    budget = memory_budget(max_memory)
    out: np.ndarray | None = None
    ids: list[pa.Array] = []
    row = 0
    what = f"{path} column {vector_col!r}"
    for batch in pf.iter_batches(batch_size=batch_rows, columns=[vector_col] + ([id_col] if id_col else [])):
        block = vector_matrix(batch.column(vector_col), what, first_row=row, width=dim)
        dim = block.shape[1] if block.shape[0] else dim
        if out is None:
            if dim and budget is not None and n * dim * 4 > budget:
                out = spill_table(n, dim, path)
                if warnings is not None:
                    warnings.append(spill_note(n, dim, path, max_memory, str(out.filename)))
            else:
                out = np.empty((n, dim or 0), dtype=np.float32)
        out[row : row + batch.num_rows] = block
        if id_col:
            ids.append(batch.column(id_col))
        row += batch.num_rows
    if out is None:
        out = np.empty((0, dim or 0), dtype=np.float32)
    if isinstance(out, np.memmap):
        out.flush()
    id_arr = _row_ids(path, schema.field(id_col), ids, max_memory) if id_col else None
    return out, id_arr, vector_col


def unread_columns(schema: pa.Schema, read: list[str], path: Path) -> list[str]:
    """The warning for numeric columns beside the vectors and ids (an item bias, a count):
    popaudit serves the vectors alone, so a per-item term the model adds to every score is
    left out, said ([] when there are none)."""
    names = [f.name for f in schema if f.name not in read and (pa.types.is_floating(f.type) or pa.types.is_integer(f.type))]
    if not names:
        return []
    listed = ", ".join(f"`{shown(n)}`" for n in names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return [f"{path} has numeric columns beside the item vectors that popaudit does not read ({listed}): a per-item "
            "term the model adds to every score, such as an item bias, is not served with the vectors, so every figure "
            "is of the vectors alone (to audit u·i + b_i, save the model as a state dict with its item_bias tensor)"]


def _batch_rows(pf: pq.ParquetFile, path: Path, vector_col: str, dim: int | None, n: int,
                max_memory: int | None) -> int:
    """Rows per record batch: a batch (Arrow's decoded copy and numpy's view of it) takes at
    most 1/8 of the memory ceiling, which must hold one row block (InputError otherwise)."""
    if max_memory is None:
        return PARQUET_BATCH_ROWS
    width = dim if dim is not None else _vector_width(pf, vector_col)
    if not width:
        return PARQUET_BATCH_ROWS
    check_memory_ceiling(max_memory, width, f"the item table in {path}", n)
    return int(min(PARQUET_BATCH_ROWS, max(MIN_BLOCK_ROWS, max_memory // (8 * width * 4))))


def _row_ids(path: Path, field: pa.Field, ids: list[pa.Array], max_memory: int | None) -> np.ndarray:
    """The id column's batches as one array of ids (text decoded under the memory
    ceiling); an empty id is an IdMappingError naming its rows."""
    decoder = TextDecoder(path, max_memory, ModelLoadError)
    chunked = decoder.plain(pa.chunked_array(ids), field.name) if ids else pa.chunked_array([], field.type)
    chunked = refuse_empty_ids(chunked, f"{path} id column {field.name!r}")
    return ids_to_numpy(chunked, f"{path} column {field.name!r}")


def _choose_vector_column(schema: pa.Schema, path: Path, wanted: str | None) -> str:
    """The embedding column: ``wanted`` (the item_key setting), else the one float-list column."""
    vec_cols = [f.name for f in schema if is_vector_type(f.type)]
    if wanted is not None:
        if wanted not in schema.names:
            raise ModelLoadError(
                f"{setting('item_key')} {wanted!r} is not a column of {path}; "
                f"float-list columns: {vec_cols or '(none)'}"
            )
        if wanted not in vec_cols:
            raise ModelLoadError(
                f"column {wanted!r} of {path} has type {schema.field(wanted).type}, not a list of floats"
            )
        return wanted
    if len(vec_cols) == 1:
        return str(vec_cols[0])
    if not vec_cols:
        if looks_like_names(schema.names):
            found = "columns: " + ", ".join(f"{f.name} ({f.type})" for f in schema)
        else:  # perhaps no item table at all: describe it without quoting it
            found = f"its {len(schema)} column(s) hold " + (", ".join(sorted({str(f.type) for f in schema})) or "nothing")
        raise ModelLoadError(
            f"{path} has no list-of-float column to read as embeddings; {found}. An item table needs "
            "an id column and a list<float> column"
        )
    raise AmbiguousTableError(
        f"several list-of-float columns in {path} could be the item table: "
        + ", ".join(vec_cols)
        + f"; pass {setting('item_key')} with the column name"
    )


def _vector_width(pf: pq.ParquetFile, column: str) -> int | None:
    """Values per row of a list column, from the footer (the first row group with rows):
    sizes the row blocks before a page is read."""
    meta = pf.metadata
    leaf = next((j for j in range(meta.num_columns) if meta.schema.column(j).path.split(".")[0] == column), None)
    for r in range(meta.num_row_groups):
        group = meta.row_group(r)
        if leaf is not None and group.num_rows:
            return max(1, int(group.column(leaf).num_values) // int(group.num_rows))
    return None


def _id_column(schema: pa.Schema, path: Path) -> str | None:
    """The id column: the one integer/string column, or the one named like an item id."""

    def ok(t: pa.DataType) -> bool:
        if pa.types.is_dictionary(t):
            t = t.value_type
        return bool(pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t))

    cands = [str(f.name) for f in schema if ok(f.type)]
    if len(cands) <= 1:
        return cands[0] if cands else None
    lowered = {c.lower(): c for c in cands}
    for name in ID_COLUMN_NAMES:
        if name in lowered:
            return lowered[name]
    raise ModelLoadError(
        f"several columns of {path} could hold the item ids ({', '.join(cands)}); name one of them "
        f"'item_id' or pass {setting('item_ids')}"
    )


def parquet_shards(
    path: Path, column: str, rows_per_shard: int = PARQUET_BATCH_ROWS, error: type[InputError] = EmbeddingTableError
) -> Iterator[np.ndarray]:
    """Float32 row shards of a list-of-number column of a Parquet file, read in record
    batches (:func:`~auditor.loading.parquet_table.vector_matrix`'s rule across them),
    so a column larger than memory can be searched in shards."""
    what = f"{path} column {column!r}"
    width: int | None = None
    row = 0
    for batch in pq.ParquetFile(path).iter_batches(batch_size=rows_per_shard, columns=[column]):
        shard = vector_matrix(batch.column(0), what, first_row=row, width=width, error=error)
        width = shard.shape[1] if shard.shape[0] else width
        row += batch.num_rows
        yield shard


def stored_list_dtype(path: Path, column: str | None) -> str | None:
    """The dtype of the values of the vector ``column`` as the file stores them (``float16``,
    ``float64``...; they are read as float32), None when the schema does not tell."""
    try:
        kind = pq.read_schema(path).field(column).type
        return str(np.dtype(kind.value_type.to_pandas_dtype()).name)
    except (AttributeError, KeyError, TypeError, ValueError, OSError, pa.ArrowException):
        return None

