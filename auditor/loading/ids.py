"""Raw ids of table rows: reading id files, typing id columns, refusing duplicates.

Ids are kept as int64 where they are integers (floats only when integral) and as text
otherwise, so an id file and an interaction log compare equal whatever format each is in.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from auditor.errors import IdMappingError
from auditor.io import require_regular_file
from auditor.loading.parquet_bounds import read_table as bounded_read_table
from auditor.loading.id_text import blank_as_null, decimal_as_number, infer_block, null_words
from auditor.loading.logs import maybe_int
from auditor.loading.messages import arrow_reason
from auditor.loading.npy import load_npy
from auditor.loading.validation import first_rows

ID_COLUMN_NAMES = ("item_id", "itemid", "item", "id", "movieid", "product_id", "productid", "iid")
"""Names that mark a column (or a text file's first line) as holding ids."""


def _numpy(arr: pa.Array) -> np.ndarray:
    return np.asarray(arr.to_numpy(zero_copy_only=False))


def ids_to_numpy(arr: pa.Array | pa.ChunkedArray, what: str) -> np.ndarray:
    """int64 for integer ids (floats and decimals only when integral), else an object array of str."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    arr = decimal_as_number(arr)  # NUMBER(18,0) ids are integers
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        # One rule for text ids from any file: all canonical integers ("12", not "012") are integers.
        arr = maybe_int(arr.cast(pa.string()))
        if not pa.types.is_integer(arr.type):
            return _numpy(arr)
    t = arr.type
    if pa.types.is_integer(t):
        if t == pa.uint64() and (pc.max(arr).as_py() or 0) > np.iinfo(np.int64).max:
            # Beyond int64 no id can be a row number: keep them exact, as text ids.
            return _numpy(arr.cast(pa.string()))
        return _numpy(arr.cast(pa.int64()))
    if pa.types.is_floating(t):
        try:
            return _numpy(arr.cast(pa.int64(), safe=True))
        except pa.ArrowException as exc:  # lossy or unsupported cast
            # Readers make NaN an empty id (blank_as_null); one reaching here was not left out.
            why = "NaN (an empty id)" if pc.any(pc.is_nan(arr)).as_py() else "non-integer numbers"
            raise IdMappingError(f"{what} holds {why}; ids must be integers or strings") from exc
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        try:
            return _numpy(arr.cast(pa.string()))
        except pa.ArrowInvalid as exc:  # bytes that are not UTF-8 (e.g. a Latin-1 file)
            # Reached only for a log whose columns were found (a text file in another encoding).
            raise IdMappingError(
                f"{what} holds ids that are not valid UTF-8 text; "
                "re-save the file as UTF-8"
            ) from exc
    raise IdMappingError(f"{what} has type {t}; ids must be integers or strings")


def check_unique_ids(ids: np.ndarray, source: str, role: str = "item") -> None:
    """Raise IdMappingError naming the first duplicated id (by row) and the rows holding it."""
    if ids.size < 2:
        return
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    repeat = np.flatnonzero(sorted_ids[1:] == sorted_ids[:-1]) + 1
    if repeat.size == 0:
        return
    first_row = int(order[repeat].min())
    dup = ids[first_row]
    dup = dup.item() if isinstance(dup, np.generic) else dup  # 7, not np.int64(7)
    rows = np.flatnonzero(ids == dup)
    # Integer ids are quoted; text is not (the file may be no id file at all: messages.py).
    shown = f" {dup!r}" if isinstance(dup, int) else ""
    raise IdMappingError(
        f"duplicate {role} id{shown} in {source} (rows {first_rows(rows)}); "
        "each table row needs its own id"
    )


def refuse_empty_ids(column: pa.Array | pa.ChunkedArray, where: str) -> pa.Array | pa.ChunkedArray:
    """``column`` of a table's row ids, or IdMappingError naming the rows (0-based, as
    table rows) of its empty ids: null, blank text or NaN (:func:`blank_as_null`)."""
    column = blank_as_null(column)
    if column.null_count:
        nulls = np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))
        many = nulls.size != 1
        nan = "NaN: " if pa.types.is_floating(column.type) else ""
        raise IdMappingError(
            f"{where} has {nulls.size} empty id{'s' * many} ({nan}row{'s' * many} {first_rows(nulls)}); "
            "each table row needs its id"
        )
    return column


def read_id_file(path: Path, what: str = "item ids") -> np.ndarray:
    """Raw ids, one per row in row order: .txt/.csv (one per line), .npy, or Parquet (first column)."""
    path = require_regular_file(path)
    suffix = path.suffix.lower()
    try:
        if suffix == ".npy":
            arr = load_npy(path, f".npy array of {what}", IdMappingError)
            if arr.ndim != 1:
                raise IdMappingError(f"{what} in {path} must be a 1-D array, got shape {list(arr.shape)}")
            column = pa.array(arr)
        elif suffix in (".parquet", ".pq"):
            table = bounded_read_table(path, None, IdMappingError)
            if table.num_columns == 0:
                raise IdMappingError(f"{what} file {path} has no columns")
            column = table.column(0)
        else:
            column = _read_text_ids(path)
    except (OSError, ValueError, pa.ArrowException) as exc:
        if isinstance(exc, IdMappingError):
            raise
        raise IdMappingError(f"cannot read {what} from {path}: {arrow_reason(exc)}") from exc
    column = refuse_empty_ids(column, f"{what} file {path}")
    return ids_to_numpy(column, f"{what} file {path}")


def _read_text_ids(path: Path) -> pa.Array:
    """One id per line; a first line naming an id column (id, item_id, ...) is a header.

    Read as bytes and typed as a log's ids are (:func:`infer_block`): "001" and "5.0"
    stay text, as they do in a Parquet or ``.npy`` id file.
    """
    with open(path, "rb") as fh:
        first = fh.readline().decode("utf-8", errors="replace").strip()
    first_field = first.split(",")[0].strip().strip('"').lower() if path.suffix.lower() == ".csv" else first.lower()
    header = first_field in ID_COLUMN_NAMES
    delimiter = "," if path.suffix.lower() == ".csv" else "\x1f"  # .txt: whole line is the id
    read = pacsv.ReadOptions(autogenerate_column_names=True, skip_rows=int(header))
    parse = pacsv.ParseOptions(delimiter=delimiter)
    # Only an empty line is an empty id: "NA" and "null" are ids (id_text.null_words).
    as_bytes = pacsv.ConvertOptions(column_types={"f0": pa.binary()}, null_values=null_words("txt"), strings_can_be_null=True)
    column = pacsv.read_csv(path, read_options=read, parse_options=parse, convert_options=as_bytes).column(0)
    # Integers beyond int64 (hashed uint64 ids) stay text here: ids_to_numpy makes them uint64.
    return infer_block(column.combine_chunks())
