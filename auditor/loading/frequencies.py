"""Item counts computed elsewhere (Spark, SQL): a Parquet or CSV/TSV table of item id,
interaction count and optionally distinct users per item, read into the same
:class:`~auditor.loading.counting.IdCounts` that counting a log produces.

So everything that needs only counts (frequency–norm, exposure popularity, head and
tail sets) aligns to table rows exactly as from the log the counts came from. What
needs the log itself (history queries, probe batches, seen-item filtering) is not
available from such a file; the audit says so.

Columns are found by name (``item_id``/``token_id``/..., ``count``/``frequency``/...,
``users``/``n_users``/...) unless named (two columns of one role are refused naming both); a headerless file of two or three
columns (its first line data: :func:`~auditor.loading.sniff.first_line_is_data`) is read as item id, count[, users]. Refused, naming the file, column and data
row (counting from 1 after the header): a duplicated item id, a count or user count that
is empty, negative, not a whole number or beyond int64, and more users than interactions.
Rows whose item id is empty are left out and counted (as a log's empty ids are).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from auditor.errors import InteractionsError, setting
from auditor.io import require_regular_file
from auditor.loading.parquet_bounds import read_table as bounded_read_table
from auditor.loading.counting import IdCounts
from auditor.loading.counts_only import counts_only
from auditor.loading.ids import ids_to_numpy
from auditor.loading.id_text import blank_as_null, decimal_as_number, null_words
from auditor.loading.logs import maybe_int
from auditor.loading.messages import arrow_reason, columns_found, detected_column
from auditor.loading.sniff import (
    ITEM_COLUMN_NAMES, csv_reason, first_line_is_data, is_parquet, open_stream, sample_lines, sniff_delimiter,
)
from auditor.loading.validation import first_rows

FORMAT = "frequencies"
"""``IdCounts.format`` of counts read from such a file."""
# Normalised (lower-case, no _ - or space) names of each role (unranked: two columns of one role are refused, messages.detected_column).
ITEM_NAMES = (*ITEM_COLUMN_NAMES, "tokenid", "token", "wordid", "word", "key", "id")
COUNT_NAMES = (
    "count", "counts", "frequency", "freq", "frequencies", "interactions", "ninteractions",
    "numinteractions", "interactioncount", "cnt", "n", "tokencount", "occurrences", "clicks", "plays", "views",
)
USER_COUNT_NAMES = ("users", "nusers", "numusers", "distinctusers", "uniqueusers", "usercount", "userscount")
HEADERLESS = ("item_id", "count", "users")
"""Column names of a headerless file (two or three numeric columns)."""
_INT64_MAX = float(np.iinfo(np.int64).max)
_UNREAD = "cannot read {path} as a frequencies file (Parquet or CSV/TSV)"


def read_frequencies(
    path: Path, *, item_col: str | None = None, count_col: str | None = None, user_count_col: str | None = None
) -> IdCounts:
    """The counts in ``path`` as :class:`IdCounts` (ids sorted, one row per distinct id).

    ``n_interactions`` is the sum of the counts (rows with an empty item id excluded and
    counted in ``n_null_items``); ``n_users`` is None: per-item distinct users do not give
    the distinct users of the whole log.
    """
    path = require_regular_file(path, "frequencies file")
    table, columns = _read(path, item_col)
    item = _required(columns, item_col, ITEM_NAMES, path, "item id", "item_col")
    count = _required(columns, count_col, COUNT_NAMES, path, "count", "count_col")
    users = _column(columns, user_count_col, USER_COUNT_NAMES, path, "distinct-users", "user_count_col")
    if item == count or users in (item, count):
        raise InteractionsError(f"the item id, count and distinct-users columns of {path} must be different columns")
    if table.num_rows == 0:
        raise InteractionsError(f"no item counts in {path}: it has a header but no rows")

    # Text ids are typed as a log's are (id_text: "5.0" and "007" stay text); NaN is an empty id.
    ids = maybe_int(blank_as_null(_plain(table.column(item))))
    counts = _whole_numbers(_plain(table.column(count)), path, count, "count")
    user_counts = None if users is None else _whole_numbers(_plain(table.column(users)), path, users, "distinct-users count")
    if user_counts is not None:
        more = np.flatnonzero(user_counts > counts)
        if more.size:
            raise InteractionsError(
                f"distinct-users column {users!r} of {path} exceeds the count column {count!r} in data row{'s' * (more.size > 1)} "
                f"{first_rows(more + 1)}: an item cannot have more distinct users than interactions"
            )

    valid = np.asarray(pc.is_valid(ids).to_numpy(zero_copy_only=False), dtype=bool)
    n_null_items = int(counts[~valid].sum())
    data_rows = np.flatnonzero(valid) + 1
    raw = ids_to_numpy(ids.filter(pa.array(valid)), f"item id column {item!r} of {path}")
    counts, user_counts = counts[valid], None if user_counts is None else user_counts[valid]
    if raw.size == 0:
        raise InteractionsError(f"no item counts in {path}: every item id is empty")
    order = np.argsort(raw, kind="stable")
    raw, counts = raw[order], counts[order]
    _refuse_duplicates(raw, data_rows[order], path, item)
    if float(counts.sum(dtype=np.float64)) >= _INT64_MAX:
        raise InteractionsError(f"the counts in column {count!r} of {path} add up beyond int64")
    total = int(counts.sum())
    if total == 0:
        raise InteractionsError(f"no interactions in {path}: every count in column {count!r} is 0")
    return IdCounts(
        ids=raw,
        counts=counts,
        user_counts=None if user_counts is None else user_counts[order],
        n_interactions=total,
        n_users=None,
        source=path,
        user_col=None,
        item_col=item,
        n_null_items=n_null_items,
        first_null_item_row=None if valid.all() else int(np.argmin(valid)) + 1,
        format=FORMAT,
    )


def _read(path: Path, item_col: str | None) -> tuple[pa.Table, list[str]]:
    """The whole table (a counts table is O(items)) and its column names; a CSV's item id
    column read as text (typed by :func:`maybe_int`, as a log's ids are, not by inference)."""
    try:
        if is_parquet(path):
            table = bounded_read_table(path, None, InteractionsError)
            return table, list(table.column_names)
        try:
            lines = sample_lines(path)
        except InteractionsError as exc:  # worded for a log: say what a counts file should be
            text = str(exc).replace("no interactions in", "no item counts in")
            if "text interaction log" in text:
                text = text.replace("text interaction log", "text frequencies file").split("; pass the training")[0]
                text += "; pass a Parquet or CSV/TSV table of item id and count"
            raise InteractionsError(text) from exc
        delimiter = "\t" if "\t" in lines[0] else sniff_delimiter(lines)
        fields = lines[0].split(delimiter)
        header = not first_line_is_data(lines, delimiter)
        names = [f.strip().strip('"') for f in fields] if header else list(HEADERLESS[: len(fields)])
        if not header and len(fields) not in (2, 3):
            raise InteractionsError(
                f"{path} has no header and {len(fields)} columns; a frequencies file without a header "
                "holds item id, count and optionally distinct users"
            )
        read = pacsv.ReadOptions(column_names=names, skip_rows=1 if header else 0)
        text_column = _required(names, item_col, ITEM_NAMES, path, "item id", "item_col")
        convert = pacsv.ConvertOptions(
            column_types={text_column: pa.string()}, null_values=null_words("csv"), strings_can_be_null=True
        )
        parse = pacsv.ParseOptions(delimiter=delimiter)
        try:
            return pacsv.read_csv(open_stream(path), read_options=read, parse_options=parse, convert_options=convert), names
        except pa.ArrowInvalid as exc:  # a ragged line named by its data row, as a log's is
            raise InteractionsError(f"{_UNREAD.format(path=path)}: {csv_reason(path, read, parse, exc)}") from exc
    except (OSError, pa.ArrowException) as exc:
        raise InteractionsError(f"{_UNREAD.format(path=path)}: {arrow_reason(exc)}") from exc


def _column(columns: list[str], given: str | None, names: tuple[str, ...], path: Path, what: str, option: str) -> str | None:
    """The column named ``given`` (exact, then case-insensitive), else the one column with
    a common name (two are refused: :func:`~auditor.loading.messages.detected_column`), else None."""
    if given is not None:
        found = [c for c in columns if c == given] or [c for c in columns if c.lower() == given.lower()]
        if len(found) == 1:
            return found[0]
        if found:
            raise InteractionsError(f"{what} column {given!r} appears {len(found)} times in {path}")
        raise InteractionsError(f"{what} column {given!r} ({setting(option)}) is not in {path}; {columns_found(columns)}")
    return detected_column(columns, names, path, what, option, InteractionsError)


def _required(columns: list[str], given: str | None, names: tuple[str, ...], path: Path, what: str, option: str) -> str:
    found = _column(columns, given, names, path, what, option)
    if found is None:
        raise InteractionsError(
            f"cannot find the {what} column of frequencies file {path}; {columns_found(columns)}. "
            f"Pass {setting(option)} NAME"
        )
    return found


def _plain(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """A column as one plain array: dictionaries decoded, decimals (``COUNT(*)`` unloaded as
    ``NUMBER(18,0)``) as integers where whole (:func:`~auditor.loading.id_text.decimal_as_number`)."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    return decimal_as_number(arr.dictionary_decode() if pa.types.is_dictionary(arr.type) else arr)


def _whole_numbers(arr: pa.Array, path: Path, column: str, what: str) -> np.ndarray:
    """int64 counts, or InteractionsError naming the first data row that is not a
    non-negative whole number below 2**63 (the value is not quoted: messages.py)."""
    empty = np.asarray(arr.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    problems = [(empty, "is empty")]
    if pa.types.is_integer(arr.type):
        values = np.asarray(arr.fill_null(0).to_numpy(zero_copy_only=False))
        if arr.type == pa.uint64():
            problems.append((values > np.iinfo(np.int64).max, "is beyond int64"))
        elif pa.types.is_signed_integer(arr.type):
            problems.append((values < 0, "is negative"))
    elif pa.types.is_floating(arr.type):
        values = np.asarray(arr.fill_null(0).to_numpy(zero_copy_only=False))
        problems += [
            (~np.isfinite(values) | (np.floor(values) != values), "is not a whole number"),
            (values < 0, "is negative"),
            (values >= _INT64_MAX, "is beyond int64"),
        ]
    elif pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):  # a CSV cell is not a number
        digits = pc.fill_null(pc.match_substring_regex(arr, r"^\s*\+?[0-9]+\s*$"), True)
        problems.append((~np.asarray(digits.to_numpy(zero_copy_only=False), dtype=bool), "is not a whole number"))
        try:
            values = np.asarray(pc.utf8_trim_whitespace(arr).cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False))
        except pa.ArrowException:  # digits beyond int64 (or a non-number, reported below)
            values = np.zeros(len(arr), dtype=np.int64)
            as_float = pc.utf8_trim_whitespace(pc.if_else(digits, arr, pa.scalar("0", arr.type))).cast(pa.float64())
            problems.append((np.asarray(as_float.fill_null(0).to_numpy(zero_copy_only=False)) >= _INT64_MAX, "is beyond int64"))
    else:
        raise InteractionsError(f"{what} column {column!r} of {path} has type {arr.type}, not a number; "
                                "counts must be whole numbers (cast the column to BIGINT)")
    for bad, why in problems:
        rows = np.flatnonzero(bad)
        if rows.size:
            raise InteractionsError(
                f"{what} column {column!r} of {path}: data row {rows[0] + 1} {why}"
                + (f" (rows {first_rows(rows + 1)})" if rows.size > 1 else "")
                + "; counts must be whole numbers >= 0"
            )
    return values.astype(np.int64)


def _refuse_duplicates(ids: np.ndarray, rows: np.ndarray, path: Path, column: str) -> None:
    """``ids`` sorted; ``rows`` their data rows. Each item must have one count."""
    if ids.size < 2:
        return
    repeat = np.flatnonzero(ids[1:] == ids[:-1])
    if repeat.size == 0:
        return
    dup = ids[repeat[0]]
    at = np.sort(rows[ids == dup])
    shown = f" {dup.item()!r}" if isinstance(dup, np.integer) else ""
    raise InteractionsError(
        f"duplicate item id{shown} in column {column!r} of {path} (data rows {first_rows(at)}); "
        "each item needs one count: add them up first"
    )


def needs_the_log(what: str) -> str:
    """The ``not_measured`` reason of a section that needs the log itself, not its counts."""
    return f"{what} needs the training log itself; {counts_only()}"
