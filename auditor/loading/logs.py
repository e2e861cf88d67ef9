"""Opening an interaction log and streaming its id columns as record batches.

A :class:`LogSpec` names one log and how to read it (format, id columns); every log
reader takes one. :func:`open_log` detects the format and id columns from a sample (see
:mod:`auditor.loading.sniff`); :meth:`Log.batches` then streams (item ids, user ids)
per record batch through pyarrow's Parquet and CSV readers, so the log is never held
whole. Text ids are typed block by block by one rule (:mod:`auditor.loading.id_text`):
int64 when every id is spelled as an integer, else text ("007", "5.0" and "5E0" stay
text, as in Parquet); a block whose ids drift to another type raises :class:`TypeDrift`
and the reader starts over with every id as a string (:func:`read_ids`). Integers beyond
int64 (hashed uint64 ids) stay text while read and become uint64 (:func:`maybe_int`).
"""

from __future__ import annotations

import csv
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from auditor.config import INTERACTION_FORMATS
from auditor.errors import InteractionsError, setting
from auditor.io import require_regular_file
from auditor.loading.id_text import (
    BlockTyper, DriftedBlock, blank_as_null, decimal_as_number, first_unwhole, integer_ids, null_words,
)
from auditor.loading.messages import LONG_LINE, arrow_reason, columns_found
from auditor.loading.parquet_bounds import TextDecoder, check_pages, text_columns
from auditor.values import LogSpec
from auditor.loading.sniff import (
    MOVIELENS_COLUMNS,
    choose_columns,
    csv_reason,
    first_line_is_data,
    is_parquet,
    open_stream,
    sample_lines,
    sniff_delimiter,
    typed_header,
)

BATCH_ROWS = 1 << 20
CSV_BLOCK_BYTES = 1 << 22
"""The CSV reader's block: a line longer than this is refused (:data:`LONG_LINE`)."""
# Parquet files whose row groups hold at most this many rows and uncompressed bytes of
# the id columns are read whole row group by row group, READ_AHEAD of them decoded ahead.
SCAN_ROW_GROUP_ROWS = 1 << 22
SCAN_ROW_GROUP_BYTES = 1 << 26
READ_AHEAD = 2

T = TypeVar("T")


class TypeDrift(Exception):
    """A later block holds ids of another type than the first (re-read them as strings)."""


@dataclass
class Log:
    """How to stream one log: its kind, the columns chosen and a batch generator factory."""

    path: Path
    format: str
    kind: str  # parquet | delimited | dat
    columns: list[str]
    """Column names as the user sees them (``:type`` suffixes stripped)."""
    raw_columns: list[str]
    item_col: str
    user_col: str | None
    delimiter: str = ","
    header: bool = True
    total_rows: int | None = None
    max_memory: int | None = None

    def batches(self, as_strings: bool = False) -> Iterator[tuple[pa.Array, pa.Array | None]]:
        """(item ids, user ids or None) arrays per record batch."""
        if self.kind == "parquet":
            for items, users, _ in self._parquet(None):
                yield items, users
        elif self.kind == "dat":
            yield from self._dat(as_strings)
        else:
            for items, users, _ in self._delimited(as_strings, None):
                yield items, users

    def value_batches(self, value_col: str, as_strings: bool = False) -> Iterator[tuple[pa.Array, pa.Array | None, pa.Array]]:
        """(item ids, user ids or None, values of ``value_col``) per record batch: the ids as
        :meth:`batches` reads them, the values as Parquet stores them and as text in a
        delimited file (their reader parses and checks them: a rank or score column of
        served lists). Not for ``::``-separated files."""
        if self.kind == "dat":
            raise InteractionsError(f"{self.path} is a '::'-separated log; only Parquet and CSV/TSV have extra columns")
        stream = self._parquet(value_col) if self.kind == "parquet" else self._delimited(as_strings, value_col)
        for items, users, values in stream:
            assert values is not None
            yield items, users, values

    def columns_found(self) -> str:
        """The log's columns in words for an error (a Parquet schema's names always)."""
        return columns_found(self.columns, self.kind == "parquet")

    def _raw(self, name: str | None) -> str | None:
        return None if name is None else self.raw_columns[self.columns.index(name)]

    def _parquet(self, value_col: str | None) -> Iterator[tuple[pa.Array, pa.Array | None, pa.Array | None]]:
        cols = [c for c in (self.item_col, self.user_col, value_col) if c is not None]
        try:
            # pre_buffer=False: otherwise whole column chunks are buffered ahead (~10x the memory).
            # Text ids stay dictionaries until their decoded size is checked (parquet_bounds).
            probe = pq.ParquetFile(self.path, pre_buffer=False)
            check_pages(probe, self.path, cols, self.max_memory, InteractionsError)
            text = text_columns(probe.schema_arrow, cols)
            pf = pq.ParquetFile(self.path, pre_buffer=False, read_dictionary=text, metadata=probe.metadata)
            meta = pf.metadata
            largest_rows = max((meta.row_group(r).num_rows for r in range(meta.num_row_groups)), default=0)
            # Both bounds: encoded bytes can understate the decoded size (dictionary strings).
            if largest_rows <= SCAN_ROW_GROUP_ROWS and _largest_row_group_bytes(pf, cols) <= SCAN_ROW_GROUP_BYTES:
                batches = _row_group_batches(self.path, pf, cols, text)
            else:  # big row groups: iter_batches streams within them
                batches = pf.iter_batches(batch_size=BATCH_ROWS, columns=cols)
            decoder = TextDecoder(self.path, self.max_memory, InteractionsError)
            seen = 0  # data rows before this batch
            for batch in batches:
                items = self._whole(decoder.plain(batch.column(self.item_col), self.item_col), "item", seen)
                users = self._whole(decoder.plain(batch.column(self.user_col), self.user_col), "user", seen) if self.user_col else None
                seen += batch.num_rows
                yield items, users, decoder.plain(batch.column(value_col), value_col) if value_col else None
        except (OSError, pa.ArrowException) as exc:
            raise InteractionsError(f"cannot read {self.path} as Parquet: {arrow_reason(exc)}") from exc

    def _whole(self, ids: pa.Array, role: str, seen: int) -> pa.Array:
        """Parquet ids with blank ones null; decimals as integers (id_text.decimal_as_number); a
        float or decimal id no integer equals (3.5, inf) is refused naming its row."""
        ids = decimal_as_number(ids)
        bad = first_unwhole(ids)
        if bad is not None:
            name = self.item_col if role == "item" else self.user_col
            raise InteractionsError(f"{role} column {name!r} of {self.path}: data row {seen + bad[0] + 1} {bad[1]}; "
                                    "ids must be integers or strings")
        return blank_as_null(ids)

    def _delimited(
        self, as_strings: bool, value_col: str | None
    ) -> Iterator[tuple[pa.Array, pa.Array | None, pa.Array | None]]:
        item_raw, user_raw, value_raw = self._raw(self.item_col), self._raw(self.user_col), self._raw(value_col)
        wanted = [c for c in (item_raw, user_raw) if c is not None]
        read = pacsv.ReadOptions(
            block_size=CSV_BLOCK_BYTES,
            column_names=None if self.header else self.raw_columns,
        )
        # Ids are read as bytes and typed block by block (id_text): inference would read "001" as 1.
        types = {c: pa.string() if as_strings else pa.binary() for c in wanted}
        if value_raw is not None:  # as text: its reader parses it and names a bad cell's row
            types[value_raw] = pa.string()
        convert = pacsv.ConvertOptions(
            include_columns=wanted + ([value_raw] if value_raw is not None else []),
            column_types=types or None,
            null_values=null_words(self.format),  # "NA" is an id in CSV/TSV, as in Parquet
            strings_can_be_null=True,
        )
        parse = pacsv.ParseOptions(delimiter=self.delimiter)
        try:
            reader = pacsv.open_csv(open_stream(self.path), read_options=read, parse_options=parse, convert_options=convert)
            item_typer, user_typer = BlockTyper(), BlockTyper()
            for batch in reader:
                items = blank_as_null(batch.column(item_raw))  # "3, " is "3," (a blank user id)
                users = blank_as_null(batch.column(user_raw)) if user_raw else None
                if not as_strings:
                    try:
                        items, users = item_typer(items), (user_typer(users) if users is not None else None)
                    except DriftedBlock as exc:
                        raise TypeDrift from exc
                _check_field_length(self.path, items)
                if users is not None:
                    _check_field_length(self.path, users)
                values = _missing_as_null(batch.column(value_raw)) if value_raw is not None else None
                if values is not None:
                    _check_field_length(self.path, values)
                yield items, users, values
        except pa.ArrowInvalid as exc:
            if not as_strings and "conversion error" in str(exc):
                raise TypeDrift from exc
            raise InteractionsError(f"cannot parse {self.path}: {csv_reason(self.path, read, parse, exc)}") from exc

    def _dat(self, as_strings: bool) -> Iterator[tuple[pa.Array, pa.Array | None]]:
        """``::``-separated lines, split with pyarrow (no per-line Python)."""
        read = pacsv.ReadOptions(block_size=CSV_BLOCK_BYTES, column_names=["line"])
        parse = pacsv.ParseOptions(delimiter="\x1f", quote_char=False, escape_char=False)
        convert = pacsv.ConvertOptions(column_types={"line": pa.string()})
        item_at = self.columns.index(self.item_col)
        user_at = self.columns.index(self.user_col) if self.user_col else None
        needed = max(item_at, user_at or 0) + 1
        row = 0
        try:
            reader = pacsv.open_csv(open_stream(self.path), read_options=read, parse_options=parse, convert_options=convert)
            for batch in reader:
                _check_field_length(self.path, batch.column("line"))
                parts = pc.split_pattern(batch.column("line"), "::")
                short = np.flatnonzero(pc.list_value_length(parts).to_numpy(zero_copy_only=False) < needed)
                if short.size:
                    raise InteractionsError(
                        f"line {row + int(short[0]) + 1} of {self.path} has fewer than {needed} "
                        "'::'-separated fields"
                    )
                items = blank_as_null(pc.utf8_trim_whitespace(pc.list_element(parts, item_at)))
                users = None if user_at is None else blank_as_null(pc.utf8_trim_whitespace(pc.list_element(parts, user_at)))
                if not as_strings:  # plain integers, else all read as text ("001" is not 1)
                    items, users = _plain_ints(items), (_plain_ints(users) if users is not None else None)
                row += batch.num_rows
                yield items, users
        except pa.ArrowInvalid as exc:
            raise InteractionsError(f"cannot parse {self.path}: {arrow_reason(exc)}") from exc


def read_ids(log: Log, read: Callable[[bool], T]) -> T:
    """``read(as_strings)`` with ids as inferred, again with every id as a string when they drift."""
    for as_strings in (False, True):
        try:
            return read(as_strings)
        except TypeDrift:
            continue
    raise InteractionsError(f"cannot read the id columns of {log.path}")  # pragma: no cover - strings never drift


def _row_group_batches(
    path: Path, pf: pq.ParquetFile, columns: list[str], text: list[str]
) -> Iterator[pa.RecordBatch]:
    """Record batches of whole row groups, the next ``READ_AHEAD`` decoded on background threads.

    Decoding overlaps counting (about 1.5x faster than ``iter_batches`` on two cores).
    Memory: ``READ_AHEAD + 1`` row groups, so only for row groups of bounded size.
    Each thread reads through its own ``ParquetFile`` (the footer is parsed once).
    """
    n_groups = pf.metadata.num_row_groups
    local = threading.local()

    def read(index: int) -> pa.Table:
        if not hasattr(local, "file"):
            local.file = pq.ParquetFile(path, metadata=pf.metadata, pre_buffer=False, read_dictionary=text)
        return local.file.read_row_group(index, columns=columns, use_threads=True)

    with ThreadPoolExecutor(max_workers=READ_AHEAD, thread_name_prefix="popaudit-parquet") as pool:
        ahead = deque(pool.submit(read, i) for i in range(min(READ_AHEAD, n_groups)))
        following = len(ahead)
        try:
            while ahead:
                table = ahead.popleft().result()
                if following < n_groups:
                    ahead.append(pool.submit(read, following))
                    following += 1
                yield from table.to_batches(max_chunksize=BATCH_ROWS)
        finally:
            for future in ahead:  # stopped early: drop the reads not yet started
                future.cancel()


def _largest_row_group_bytes(pf: pq.ParquetFile, columns: list[str]) -> int:
    """Uncompressed bytes of ``columns`` in the file's largest row group."""
    schema = pf.metadata.schema
    leaves = [j for j in range(len(schema)) if schema.column(j).path in columns]
    meta = pf.metadata
    return max(
        (sum(meta.row_group(r).column(j).total_uncompressed_size for j in leaves) for r in range(meta.num_row_groups)),
        default=0,
    )


def maybe_int(arr: pa.Array) -> pa.Array:
    """String ids that are all spelled as integers (:func:`auditor.loading.id_text.integer_ids`:
    "12", " -3 "; not "012", "+5", "5.0") as int64 (as uint64 when some are beyond int64:
    hashed 64-bit ids), else unchanged: the one rule every reader applies to text ids."""
    if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)) or len(arr) == 0:
        return arr
    ints = integer_ids(arr)
    return arr if ints is None else ints


def _check_field_length(path: Path, arr: pa.Array) -> None:
    """Refuse text longer than the CSV block (as pyarrow does a line spanning three blocks).

    pyarrow accepts a line straddling one block boundary, so a 5 MiB line would be read
    while a 9 MiB one is refused; a field longer than the block is such a line.
    """
    if not (pa.types.is_string(arr.type) or pa.types.is_binary(arr.type)) or len(arr) == 0:
        return
    longest = pc.max(pc.binary_length(arr)).as_py()
    if longest is not None and longest > CSV_BLOCK_BYTES:
        raise InteractionsError(f"cannot parse {path}: {LONG_LINE}")


_MISSING_VALUE_WORDS = pa.array(pacsv.ConvertOptions().null_values, pa.string())


def _missing_as_null(values: pa.Array) -> pa.Array:
    """A value column's (rank, score) missing words (pyarrow's: ``NA``, ``nan``, ``null``...)
    as null, its reader's "empty" (only the id columns keep such words: an item coded NA)."""
    missing = pc.is_in(values, value_set=_MISSING_VALUE_WORDS)
    return pc.if_else(missing, pa.scalar(None, values.type), values) if pc.any(missing).as_py() else values


def _plain_ints(text: pa.Array) -> pa.Array:
    """``::``-file ids as int64; TypeDrift when some are not spelled as integers (id_text)."""
    if text.null_count == len(text):
        return pa.nulls(len(text), pa.int64())
    ints = integer_ids(text, wide=False)
    if ints is None:
        raise TypeDrift
    return ints


def open_log(spec: LogSpec, what: str = "interaction log") -> Log:
    """Detect the format and columns of an interaction log (nothing is read beyond a sample);
    ``what``: how a missing file is named (``held-out log``)."""
    path = require_regular_file(spec.path, what)
    fmt, user_col, item_col = spec.fmt, spec.user_col, spec.item_col
    if fmt not in INTERACTION_FORMATS:
        raise InteractionsError(f"unknown interactions format {fmt!r}; use one of {', '.join(INTERACTION_FORMATS)}")
    if fmt == "parquet" or (fmt == "auto" and is_parquet(path)):
        try:
            pf = pq.ParquetFile(path)
        except (OSError, pa.ArrowException) as exc:
            raise InteractionsError(f"cannot read {path} as Parquet: {arrow_reason(exc)}") from exc
        names = pf.schema_arrow.names
        log = Log(path, "parquet", "parquet", list(names), list(names), "", None, total_rows=pf.metadata.num_rows,
                  max_memory=spec.max_memory)
        log = _with_columns(log, user_col, item_col)
        _check_id_types(log, pf.schema_arrow)
        return log
    lines = sample_lines(path, fmt)
    first = lines[0]
    if fmt in ("auto", "movielens") and "::" in first:
        cols = list(MOVIELENS_COLUMNS)
        return _with_columns(Log(path, "movielens", "dat", cols, cols, "", None, header=False), user_col, item_col)
    if fmt == "recbole" or (fmt == "auto" and (path.suffix.lower() == ".inter" or typed_header(first))):
        raw = first.split("\t")
        cols = [c.split(":", 1)[0].strip() for c in raw]
        log = Log(path, "recbole", "delimited", cols, [c.strip() for c in raw], "", None, delimiter="\t")
        return _with_columns(log, user_col, item_col)
    if fmt == "tsv":
        delimiter = "\t"
    elif fmt == "movielens" or (fmt == "auto" and path.name.lower() == "u.data"):
        delimiter = "\t" if "\t" in first else sniff_delimiter(lines)
    else:
        delimiter = sniff_delimiter(lines)
    fields = first.split(delimiter)
    label = "tsv" if delimiter == "\t" else "csv"
    if fmt == "movielens" or path.name.lower() == "u.data":
        label = "movielens"
    if first_line_is_data(lines, delimiter):
        # No header (u.data, user_4,item_39 and the like): user, item, rating, timestamp, then extras.
        if len(fields) == 1:
            cols = ["item_id"]
        else:
            cols = list(MOVIELENS_COLUMNS[: len(fields)]) + [f"column_{i + 1}" for i in range(4, len(fields))]
        log = Log(path, label, "delimited", cols, cols, "", None, delimiter=delimiter, header=False)
    else:
        raw = next(csv.reader([first], delimiter=delimiter))
        log = Log(path, label, "delimited", [c.strip() for c in raw], raw, "", None, delimiter=delimiter)
    return _with_columns(log, user_col, item_col)


def _with_columns(log: Log, user_col: str | None, item_col: str | None) -> Log:
    """``log`` with its item and user id columns chosen among ``log.columns``."""
    log.item_col, log.user_col = choose_columns(log.columns, log.path, user_col, item_col, log.kind == "parquet")
    return log


def _check_id_types(log: Log, schema: pa.Schema) -> None:
    """The chosen Parquet id columns must hold integers or strings (floats and decimals: integral ones)."""
    for what, name in (("item", log.item_col), ("user", log.user_col)):
        if name is None:
            continue
        t = schema.field(name).type
        value = t.value_type if pa.types.is_dictionary(t) else t
        if not (
            pa.types.is_integer(value) or pa.types.is_floating(value) or pa.types.is_decimal(value)
            or pa.types.is_string(value)
            or pa.types.is_large_string(value) or pa.types.is_binary(value) or pa.types.is_large_binary(value)
        ):
            raise InteractionsError(
                f"{what} column {name!r} of {log.path} has type {t}; ids must be integers or strings "
                f"(pass {setting(what + '_col')} NAME to use another column)"
            )
