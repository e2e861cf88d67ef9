"""The time of each interaction of a log, for a time split and the transformer user
tower's recent items (what each does with a time column it cannot use:
:func:`auditor.train.data.read_interactions`).

The log is opened as :mod:`auditor.loading.logs` opens it (same format detection, id
columns, delimiter and header); its time column is streamed beside the id columns and
kept for the rows :func:`auditor.loading.pairs.read_pairs` keeps (both ids present), so
the times line up with the pairs one for one. Numbers (Unix time, any unit) are taken
as they are; text or Parquet timestamps become nanoseconds since the epoch.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from auditor.errors import InteractionsError
from auditor.loading.id_text import blank_as_null, null_words
from auditor.loading.logs import BATCH_ROWS, CSV_BLOCK_BYTES, Log
from auditor.loading.messages import arrow_reason, detected_column
from auditor.loading.sniff import open_stream

TIME_COLUMN_NAMES = (
    "timestamp", "time", "ts", "datetime", "date", "eventtime", "eventtimestamp", "createdat", "unixtime",
    "unixtimestamp",
)
"""Normalised names (lower case, no ``_ - `` or space) taken for the time column (two such columns are refused)."""


def find_time_column(log: Log, given: str | None = None) -> str | None:
    """``given`` (exact, then case-insensitive), else the one column of ``log.columns``
    with a common time column name (two are refused, as for every role:
    :func:`~auditor.loading.messages.detected_column`); None when there is none."""
    columns = [c for c in log.columns if c not in (log.item_col, log.user_col)]
    if given is not None:
        found = [c for c in columns if c == given] or [c for c in columns if c.lower() == given.lower()]
        if len(found) != 1:
            why = "is not" if not found else f"appears {len(found)} times"
            raise InteractionsError(f"time column {given!r} {why} in {log.path}; {log.columns_found()}")
        return found[0]
    return detected_column(columns, TIME_COLUMN_NAMES, log.path, "time", "time_col", InteractionsError)


class TimeColumnError(InteractionsError):
    """The time column gives no usable time at data row ``row`` (from 1, after any header;
    None when no row is to blame): what uses the times decides what to advise."""

    def __init__(self, path: object, column: str, row: int | None, why: str) -> None:
        self.column, self.row, self.why = column, row, why
        at = f" at data row {row}" if row is not None else ""
        super().__init__(f"the time column {column!r} of {path} has no usable time{at} ({why})")


class _Unusable(Exception):
    """Times that :func:`_numbers` cannot turn into numbers, and why (no values quoted)."""


def read_times(log: Log, column: str) -> np.ndarray:
    """float64 time of every row with both ids present, in log order. TimeColumnError names
    the first such row whose time is blank, not a number or date, or not finite."""
    parts: list[np.ndarray] = []
    seen = 0  # data rows before this batch
    try:
        for items, users, times in _batches(log, column):
            valid = pc.and_(pc.is_valid(items), pc.is_valid(users))
            kept = times.filter(valid)
            try:
                parts.append(_numbers(kept))
            except _Unusable as exc:  # an error path: find the row, for the message
                rows = np.flatnonzero(np.asarray(valid.to_numpy(zero_copy_only=False)))
                raise TimeColumnError(log.path, column, seen + 1 + int(rows[_first_unusable(kept)]), str(exc)) from exc
            seen += len(times)
    except pa.ArrowInvalid as exc:
        raise TimeColumnError(log.path, column, None, arrow_reason(exc)) from exc
    except OSError as exc:
        raise InteractionsError(f"cannot read {log.path}: {exc}") from exc
    return np.concatenate(parts) if parts else np.empty(0, np.float64)


def _first_unusable(times: pa.Array) -> int:
    """The position of the first time that makes ``times`` unusable (some prefix is): a
    bisection over prefixes, since a mix of numbers and dates fails only as a whole."""
    lo, hi = 0, len(times) - 1  # the answer lies in [lo, hi]
    while lo < hi:
        mid = (lo + hi) // 2
        try:
            _numbers(times.slice(0, mid + 1))
            lo = mid + 1
        except _Unusable:
            hi = mid
    return lo


def _numbers(times: pa.Array) -> np.ndarray:
    """Times as float64: numbers as they are, timestamps and dates in ns since the epoch;
    _Unusable when one is blank, not a number or date, or not finite."""
    if times.null_count:
        raise _Unusable("it is blank")
    t = times.type
    if pa.types.is_dictionary(t):
        times, t = times.dictionary_decode(), t.value_type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        try:
            times = times.cast(pa.float64())
        except pa.ArrowInvalid:
            try:
                times = times.cast(pa.timestamp("ns"))  # ISO 8601 text
            except pa.ArrowInvalid:
                raise _Unusable("neither a number nor an ISO 8601 date and time") from None
        t = times.type
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        times = times.cast(pa.timestamp("ns")).cast(pa.int64())
    elif not (pa.types.is_integer(t) or pa.types.is_floating(t)):
        raise _Unusable(f"the column holds {t}, not numbers or dates")
    out = np.asarray(times.to_numpy(zero_copy_only=False), dtype=np.float64)
    if not np.isfinite(out).all():
        raise _Unusable("not a finite number")
    return out


def _batches(log: Log, column: str) -> Iterator[tuple[pa.Array, pa.Array, pa.Array]]:
    """(item ids, user ids, times) per record batch, as the log's own reader splits it."""
    assert log.user_col is not None
    if log.kind == "parquet":
        pf = pq.ParquetFile(log.path, pre_buffer=False)
        for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=[log.item_col, log.user_col, column]):
            yield _present(batch.column(log.item_col)), _present(batch.column(log.user_col)), batch.column(column)
    elif log.kind == "dat":
        yield from _dat(log, column)
    else:
        raw = {name: log.raw_columns[log.columns.index(name)] for name in (log.item_col, log.user_col, column)}
        wanted = list(dict.fromkeys(raw.values()))
        read = pacsv.ReadOptions(block_size=CSV_BLOCK_BYTES, column_names=None if log.header else log.raw_columns)
        convert = pacsv.ConvertOptions(
            include_columns=wanted,
            # ids as text: only whether they are present matters here (as read_pairs sees it)
            column_types={raw[log.item_col]: pa.string(), raw[log.user_col]: pa.string(), raw[column]: pa.string()},
            null_values=null_words(log.format),
            strings_can_be_null=True,
        )
        parse = pacsv.ParseOptions(delimiter=log.delimiter)
        reader = pacsv.open_csv(open_stream(log.path), read_options=read, parse_options=parse, convert_options=convert)
        for batch in reader:
            # blank ids as the log's reader sees them, so the times line up with its pairs
            items, users = blank_as_null(batch.column(raw[log.item_col])), blank_as_null(batch.column(raw[log.user_col]))
            yield items, users, batch.column(raw[column])


def _present(ids: pa.Array) -> pa.Array:
    """Parquet ids with blank ones null (:func:`~auditor.loading.id_text.blank_as_null`), as the log's reader has them."""
    return blank_as_null(ids.dictionary_decode() if pa.types.is_dictionary(ids.type) else ids)


def _dat(log: Log, column: str) -> Iterator[tuple[pa.Array, pa.Array, pa.Array]]:
    """``::``-separated lines (MovieLens ratings.dat): fields by position."""
    read = pacsv.ReadOptions(block_size=CSV_BLOCK_BYTES, column_names=["line"])
    parse = pacsv.ParseOptions(delimiter="\x1f", quote_char=False, escape_char=False)
    convert = pacsv.ConvertOptions(column_types={"line": pa.string()})
    at = [log.columns.index(name) for name in (log.item_col, log.user_col, column)]  # type: ignore[arg-type]
    reader = pacsv.open_csv(open_stream(log.path), read_options=read, parse_options=parse, convert_options=convert)
    for batch in reader:
        parts = pc.split_pattern(batch.column("line"), "::")
        short = pc.less(pc.list_value_length(parts), max(at) + 1)
        if pc.any(short).as_py():
            raise InteractionsError(f"{log.path} has lines with fewer than {max(at) + 1} '::'-separated fields")
        item, user, times = (pc.utf8_trim_whitespace(pc.list_element(parts, i)) for i in at)
        yield blank_as_null(item), blank_as_null(user), times

