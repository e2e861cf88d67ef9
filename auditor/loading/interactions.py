"""Interaction logs: format detection, column detection, streaming frequency counts,
alignment of counts with table rows, and (user, item-row) pairs.

Counting streams record batches (Parquet ``iter_batches``, ``pyarrow.csv.open_csv``).
Non-negative integer ids are counted with ``np.bincount`` into an array indexed by id
(while the ids are dense enough, see ``_dense_limit``); other ids with per-batch
``value_counts`` merged rarely. Memory is O(distinct items), independent of the log's
length. Distinct users per item (``need_users``) is exact and needs O(distinct
(user, item) pairs) memory; distinct users overall O(distinct users).
"""

from __future__ import annotations

import codecs
import csv
import re
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from auditor.config import INTERACTION_FORMATS
from auditor.errors import AuditError, IdMappingError, InputError, InteractionsError
from auditor.loading.tables import ids_to_numpy
from auditor.model import InteractionPairs, ItemStats
from auditor.progress import SILENT, Progress

# Normalised (lower-case, no _ - or space) column names, most specific first.
ITEM_COLUMN_NAMES = (
    "itemid", "item", "movieid", "movie", "productid", "product", "trackid", "track", "songid",
    "videoid", "articleid", "iid", "asin", "parentasin", "businessid", "poiid", "docid", "itemidx",
)
USER_COLUMN_NAMES = (
    "userid", "user", "uid", "customerid", "customer", "memberid", "accountid", "visitorid",
    "reviewerid", "sessionid", "queryid", "useridx",
)
MOVIELENS_COLUMNS = ("user_id", "item_id", "rating", "timestamp")
PARQUET_MAGIC = b"PAR1"
BATCH_ROWS = 1 << 20
CSV_BLOCK_BYTES = 1 << 22
# Parquet files whose row groups hold at most this many rows and uncompressed bytes of
# the id columns are read whole row group by row group, READ_AHEAD of them decoded ahead.
SCAN_ROW_GROUP_ROWS = 1 << 22
SCAN_ROW_GROUP_BYTES = 1 << 26
READ_AHEAD = 2
# Merge pending per-batch partial results once they hold this many rows (or as many as the merged).
MERGE_ROWS = 1 << 22
# Dense (id-indexed array) counting: ids must stay below DENSE_MAX_ID and below
# PER_ROW x rows read + SLACK (see _dense_limit); int64 counts, boolean "user seen" flags.
DENSE_MAX_ID = 1 << 31
DENSE_COUNTS_PER_ROW = 4
DENSE_COUNTS_SLACK = 1 << 20
DENSE_SEEN_PER_ROW = 8
DENSE_SEEN_SLACK = 1 << 24
_SAMPLE_BYTES = 1 << 16
_NUMBER = re.compile(r"^[+-]?\d+(\.\d+)?([eE][+-]?\d+)?$")


@dataclass
class IdCounts:
    """Interactions per distinct raw item id of one log (computed once, aligned many times)."""

    ids: np.ndarray
    """Distinct raw item ids, sorted: int64 for integer columns, else object (str)."""
    counts: np.ndarray
    """int64 interactions per id."""
    user_counts: np.ndarray | None
    """int64 distinct users per id (None without a user column or need_users=False)."""
    n_interactions: int
    """Rows counted (rows with an empty item id excluded)."""
    n_users: int | None
    """Distinct users among the counted rows (None without a user column)."""
    source: Path
    user_col: str | None
    """The user column used (None when the log has none)."""
    item_col: str
    """The item column used (``:type`` suffixes of RecBole headers stripped)."""
    n_null_items: int = 0
    """Rows skipped because their item id was empty."""
    format: str = ""
    n_null_users: int = 0
    """Counted rows (item id present) whose user id is empty: in ``n_interactions``, not in ``n_users``."""


# ---------------------------------------------------------------- reading logs


class _TypeDrift(Exception):
    """A later block holds ids of another type than the first (re-read them as strings)."""


@dataclass
class _Log:
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

    def batches(self, as_strings: bool = False) -> Iterator[tuple[pa.Array, pa.Array | None]]:
        """(item ids, user ids or None) arrays per record batch."""
        if self.kind == "parquet":
            yield from self._parquet()
        elif self.kind == "dat":
            yield from self._dat(as_strings)
        else:
            yield from self._delimited(as_strings)

    def _raw(self, name: str | None) -> str | None:
        return None if name is None else self.raw_columns[self.columns.index(name)]

    def _parquet(self) -> Iterator[tuple[pa.Array, pa.Array | None]]:
        cols = [c for c in (self.item_col, self.user_col) if c is not None]
        try:
            # pre_buffer=False: otherwise whole column chunks are buffered ahead (~10x the memory)
            pf = pq.ParquetFile(self.path, pre_buffer=False)
            meta = pf.metadata
            largest_rows = max((meta.row_group(r).num_rows for r in range(meta.num_row_groups)), default=0)
            # Both bounds: encoded bytes can understate the decoded size (dictionary strings).
            if largest_rows <= SCAN_ROW_GROUP_ROWS and _largest_row_group_bytes(pf, cols) <= SCAN_ROW_GROUP_BYTES:
                batches = _row_group_batches(self.path, pf, cols)
            else:  # big row groups: iter_batches streams within them
                batches = pf.iter_batches(batch_size=BATCH_ROWS, columns=cols)
            for batch in batches:
                yield _plain(batch.column(self.item_col)), (
                    _plain(batch.column(self.user_col)) if self.user_col else None
                )
        except (OSError, pa.ArrowException) as exc:
            raise InteractionsError(f"cannot read {self.path} as Parquet: {exc}") from exc

    def _delimited(self, as_strings: bool) -> Iterator[tuple[pa.Array, pa.Array | None]]:
        item_raw, user_raw = self._raw(self.item_col), self._raw(self.user_col)
        wanted = [c for c in (item_raw, user_raw) if c is not None]
        read = pacsv.ReadOptions(
            block_size=CSV_BLOCK_BYTES,
            column_names=None if self.header else self.raw_columns,
        )
        convert = pacsv.ConvertOptions(
            include_columns=wanted,
            column_types={c: pa.string() for c in wanted} if as_strings else None,
            strings_can_be_null=True,
        )
        parse = pacsv.ParseOptions(delimiter=self.delimiter)
        try:
            reader = pacsv.open_csv(_stream(self.path), read_options=read, parse_options=parse, convert_options=convert)
            for batch in reader:
                items, users = batch.column(item_raw), batch.column(user_raw) if user_raw else None
                # Inferred bools, dates or times are ids written that way: read them as text.
                if not as_strings and not (_id_like(items.type) and (users is None or _id_like(users.type))):
                    raise _TypeDrift
                yield items, users
        except pa.ArrowInvalid as exc:
            if not as_strings and "conversion error" in str(exc):
                raise _TypeDrift from exc
            raise InteractionsError(f"cannot parse {self.path}: {exc}") from exc

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
            reader = pacsv.open_csv(_stream(self.path), read_options=read, parse_options=parse, convert_options=convert)
            for batch in reader:
                parts = pc.split_pattern(batch.column("line"), "::")
                short = np.flatnonzero(pc.list_value_length(parts).to_numpy(zero_copy_only=False) < needed)
                if short.size:
                    raise InteractionsError(
                        f"line {row + int(short[0]) + 1} of {self.path} has fewer than {needed} "
                        "'::'-separated fields"
                    )
                items = pc.utf8_trim_whitespace(pc.list_element(parts, item_at))
                users = None if user_at is None else pc.utf8_trim_whitespace(pc.list_element(parts, user_at))
                if not as_strings:
                    try:
                        items = items.cast(pa.int64())
                        users = users.cast(pa.int64()) if users is not None else None
                    except pa.ArrowInvalid as exc:
                        raise _TypeDrift from exc
                row += batch.num_rows
                yield items, users
        except pa.ArrowInvalid as exc:
            raise InteractionsError(f"cannot parse {self.path}: {exc}") from exc


def _row_group_batches(path: Path, pf: pq.ParquetFile, columns: list[str]) -> Iterator[pa.RecordBatch]:
    """Record batches of whole row groups, the next ``READ_AHEAD`` decoded on background threads.

    Decoding overlaps counting (about 1.5x faster than ``iter_batches`` on two cores).
    Memory: ``READ_AHEAD + 1`` row groups, so only for row groups of bounded size.
    Each thread reads through its own ``ParquetFile`` (the footer is parsed once).
    """
    n_groups = pf.metadata.num_row_groups
    local = threading.local()

    def read(index: int) -> pa.Table:
        if not hasattr(local, "file"):
            local.file = pq.ParquetFile(path, metadata=pf.metadata, pre_buffer=False)
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


def _maybe_int(arr: pa.Array) -> pa.Array:
    """String ids that are all canonical integers ("12", not "012") as int64, else unchanged.

    Used after a re-read as strings (another column drifted): the round trip keeps
    distinct ids distinct.
    """
    if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)) or len(arr) == 0:
        return arr
    try:
        as_int = arr.cast(pa.int64())
    except pa.ArrowException:  # not integers, or no cast kernel
        return arr
    same = pc.equal(as_int.cast(arr.type), arr)
    return as_int if pc.all(same).as_py() else arr


def _id_like(t: pa.DataType) -> bool:
    """Types the CSV reader infers for id columns (null: an all-empty block; binary: not UTF-8)."""
    return (
        pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_string(t)
        or pa.types.is_binary(t) or pa.types.is_null(t)  # binary: not UTF-8, ids_to_numpy says so
    )


def _stream(path: Path) -> pa.NativeFile:
    return pa.input_stream(str(path), compression="detect")


def _plain(arr: pa.Array) -> pa.Array:
    return arr.dictionary_decode() if pa.types.is_dictionary(arr.type) else arr


def _norm(name: str) -> str:
    return re.sub(r"[\s_\-]+", "", name).lower()


def _find_column(columns: list[str], given: str | None, names: tuple[str, ...], path: Path, what: str) -> str | None:
    """``given`` (exact, then case-insensitive), else the first common name present."""
    if given is not None:
        if given in columns:
            return given
        lowered = [c for c in columns if c.lower() == given.lower()]
        if len(lowered) == 1:
            return lowered[0]
        raise InteractionsError(
            f"{what} column {given!r} is not in {path}; columns found: {', '.join(columns)}"
        )
    normalised = {}
    for c in columns:
        normalised.setdefault(_norm(c), c)
    for name in names:
        if name in normalised:
            return normalised[name]
    return None


# Leading bytes of files that are often passed by mistake, and what they are.
_BINARY_MAGIC = (
    (PARQUET_MAGIC, "a Parquet file"),
    (b"\x93NUMPY", "a NumPy .npy array"),
    (b"PK\x03\x04", "a zip archive (.npz, .pt, .xlsx, ...)"),
    (b"\x1f\x8b", "gzip-compressed data without a .gz name"),
    (b"\x80\x02", "a Python pickle"),
    (b"\x80\x03", "a Python pickle"),
    (b"\x80\x04", "a Python pickle"),
    (b"\x80\x05", "a Python pickle"),
    (b"\xff\xfe", "UTF-16 text"),
    (b"\xfe\xff", "UTF-16 text"),
)
_TEXT_CHECK_BYTES = 1024
# Share of printable ASCII bytes above which non-UTF-8 bytes are taken for a legacy text encoding.
_TEXT_SHARE = 0.9


def _check_text(path: Path, data: bytes, fmt: str) -> None:
    """Raise InteractionsError when the first KB of a log read as text is not UTF-8 text.

    Otherwise binary files (Parquet, .npy, pickles) reach the CSV reader and their bytes
    come back as "columns found".
    """
    head = data[:_TEXT_CHECK_BYTES]
    what = next((name for magic, name in _BINARY_MAGIC if head.startswith(magic)), None)
    if what is None and b"\x00" in head:
        what = "binary data, with NUL bytes"
    if what is None:
        try:  # final=False: a character cut at the 1 KB boundary is not an error
            codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
        except UnicodeDecodeError as exc:
            # Mostly printable ASCII: text in a legacy encoding (Latin-1), which the reader
            # handles (ids that are not UTF-8 get their own error); otherwise binary.
            raw = np.frombuffer(head, dtype=np.uint8)
            texty = ((raw >= 0x20) & (raw < 0x7F)) | (raw == 9) | (raw == 10) | (raw == 13)
            if texty.mean() < _TEXT_SHARE:
                what = f"binary data, invalid UTF-8 at byte {exc.start}"
    if what is None:
        return
    if what == "a Parquet file":
        hint = (
            f"it was read as {fmt} because that format was given; pass --interactions-format parquet "
            "(--data-format parquet for retrain)"
            if fmt != "auto" else "name it .parquet or pass --interactions-format parquet"
        )
    elif what.startswith("gzip"):
        hint = "name it with a .gz suffix so it is decompressed"
    elif what.startswith("UTF-16"):
        hint = "re-save it as UTF-8 text"
    else:
        hint = "pass the training interaction log (Parquet, CSV/TSV, MovieLens or RecBole .inter)"
    raise InteractionsError(f"{path} is not a text interaction log (it looks like {what}); {hint}")


def _sample_lines(path: Path, fmt: str = "auto") -> list[str]:
    try:
        with _stream(path) as fh:
            data = fh.read(_SAMPLE_BYTES)
    except (OSError, pa.ArrowException) as exc:
        raise InteractionsError(f"cannot read {path}: {exc}") from exc
    _check_text(path, data, fmt)
    text = data.decode("utf-8-sig", errors="replace")
    lines = text.splitlines()
    if len(data) == _SAMPLE_BYTES and lines:
        lines = lines[:-1]  # the last line may be cut
    return [ln for ln in lines if ln.strip()]


def _sniff_delimiter(lines: list[str], allowed: str = ",\t;|") -> str:
    sample = "\n".join(lines[:20])
    try:
        return csv.Sniffer().sniff(sample, delimiters=allowed).delimiter
    except csv.Error:
        counts = {d: lines[0].count(d) for d in allowed} if lines else {}
        best = max(counts, key=lambda d: counts[d]) if counts else ","
        return best if counts.get(best) else ","


def _is_parquet(path: Path) -> bool:
    if path.suffix.lower() in (".parquet", ".pq"):
        return True
    with open(path, "rb") as fh:
        return fh.read(4) == PARQUET_MAGIC


def open_log(path: Path, fmt: str = "auto", user_col: str | None = None, item_col: str | None = None) -> _Log:
    """Detect the format and columns of an interaction log (nothing is read beyond a sample)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"file not found: {path}")
    if fmt not in INTERACTION_FORMATS:
        raise InteractionsError(f"unknown interactions format {fmt!r}; use one of {', '.join(INTERACTION_FORMATS)}")
    if fmt == "parquet" or (fmt == "auto" and _is_parquet(path)):
        try:
            pf = pq.ParquetFile(path)
        except (OSError, pa.ArrowException) as exc:
            raise InteractionsError(f"cannot read {path} as Parquet: {exc}") from exc
        names = pf.schema_arrow.names
        log = _Log(path, "parquet", "parquet", list(names), list(names), "", None, total_rows=pf.metadata.num_rows)
        log = _choose_columns(log, user_col, item_col)
        _check_id_types(log, pf.schema_arrow)
        return log
    lines = _sample_lines(path, fmt)
    if not lines:
        raise InteractionsError(f"no interactions in {path}: the file is empty")
    first = lines[0]
    if fmt in ("auto", "movielens") and "::" in first:
        cols = list(MOVIELENS_COLUMNS)
        return _choose_columns(_Log(path, "movielens", "dat", cols, cols, "", None, header=False), user_col, item_col)
    if fmt == "recbole" or (fmt == "auto" and (path.suffix.lower() == ".inter" or _typed_header(first))):
        raw = first.split("\t")
        cols = [c.split(":", 1)[0].strip() for c in raw]
        log = _Log(path, "recbole", "delimited", cols, [c.strip() for c in raw], "", None, delimiter="\t")
        return _choose_columns(log, user_col, item_col)
    if fmt == "tsv":
        delimiter = "\t"
    elif fmt == "movielens" or (fmt == "auto" and path.name.lower() == "u.data"):
        delimiter = "\t" if "\t" in first else _sniff_delimiter(lines)
    else:
        delimiter = _sniff_delimiter(lines)
    fields = first.split(delimiter)
    label = "tsv" if delimiter == "\t" else "csv"
    if fmt == "movielens" or path.name.lower() == "u.data":
        label = "movielens"
    if all(_NUMBER.match(f.strip()) for f in fields):
        # No header (u.data and the like): user, item, rating, timestamp, then extras.
        if len(fields) == 1:
            cols = ["item_id"]
        else:
            cols = list(MOVIELENS_COLUMNS[: len(fields)]) + [f"column_{i + 1}" for i in range(4, len(fields))]
        log = _Log(path, label, "delimited", cols, cols, "", None, delimiter=delimiter, header=False)
    else:
        raw = next(csv.reader([first], delimiter=delimiter))
        log = _Log(path, label, "delimited", [c.strip() for c in raw], raw, "", None, delimiter=delimiter)
    return _choose_columns(log, user_col, item_col)


def _check_id_types(log: _Log, schema: pa.Schema) -> None:
    """The chosen Parquet id columns must hold integers or strings (floats: integral ones)."""
    for what, name in (("item", log.item_col), ("user", log.user_col)):
        if name is None:
            continue
        t = schema.field(name).type
        value = t.value_type if pa.types.is_dictionary(t) else t
        if not (
            pa.types.is_integer(value) or pa.types.is_floating(value) or pa.types.is_string(value)
            or pa.types.is_large_string(value) or pa.types.is_binary(value) or pa.types.is_large_binary(value)
        ):
            raise InteractionsError(
                f"{what} column {name!r} of {log.path} has type {t}; ids must be integers or strings "
                f"(pass --{what}-col NAME to use another column)"
            )


def _typed_header(line: str) -> bool:
    """RecBole headers look like ``user_id:token<TAB>item_id:token``."""
    fields = line.split("\t")
    return len(fields) >= 2 and all(re.fullmatch(r"[^:]+:[a-z_]+", f.strip()) for f in fields)


def _choose_columns(log: _Log, user_col: str | None, item_col: str | None) -> _Log:
    item = _find_column(log.columns, item_col, ITEM_COLUMN_NAMES, log.path, "item")
    if item is None:
        raise InteractionsError(
            f"cannot find an item id column in {log.path}; columns found: {', '.join(log.columns)}. "
            "Pass --item-col NAME"
        )
    user = _find_column(log.columns, user_col, USER_COLUMN_NAMES, log.path, "user")
    if user == item:
        raise InteractionsError(f"user and item columns of {log.path} are both {item!r}")
    log.item_col, log.user_col = item, user
    return log


# ---------------------------------------------------------------- counting


def count_item_ids(
    path: Path,
    *,
    fmt: str = "auto",
    user_col: str | None = None,
    item_col: str | None = None,
    need_users: bool = True,
    progress: Progress = SILENT,
) -> IdCounts:
    """Interactions (and distinct users) per raw item id, streaming the log once.

    Non-negative integer ids that are dense enough (see ``_dense_limit``) are counted with
    ``np.bincount`` into an array indexed by id; other ids (negative, very sparse, strings,
    floats) with per-batch ``value_counts`` merged rarely. ``n_users`` is always computed
    when the log has a user column, whatever ``need_users`` says.

    Memory: O(distinct items) for counts (at most ~32 bytes per row read plus 8 MiB on
    the dense path), O(distinct users) for ``n_users`` (a byte per user id on the dense
    path), and about 16 bytes per distinct (user, item) pair at peak for ``user_counts``
    when ``need_users``.
    """
    log = open_log(Path(path), fmt, user_col, item_col)
    for as_strings in (False, True):
        try:
            return _count(log, need_users and log.user_col is not None, as_strings, progress)
        except _TypeDrift:
            continue
    raise InteractionsError(f"cannot read the id columns of {path}")  # pragma: no cover - strings never drift


def _dense_limit(rows_seen: int, per_row: int, slack: int) -> int:
    """Largest id (exclusive) that an id-indexed array may cover after ``rows_seen`` rows.

    The array then costs at most ``per_row`` entries per row read plus ``slack``: about
    what a hash table of the distinct ids could cost, so sparse huge ids (hashes,
    timestamps) go to the hash path instead of allocating a giant array.
    """
    return min(DENSE_MAX_ID, per_row * rows_seen + slack)


def _dense_values(ids: pa.Array, allocated: int, limit: int) -> np.ndarray | None:
    """``ids`` (no nulls) as intp for indexing, or None when they are not integers in [0, limit)."""
    if not pa.types.is_integer(ids.type):
        return None
    values = ids.to_numpy(zero_copy_only=False)
    if values.size == 0:
        return np.empty(0, dtype=np.intp)
    if values.min() < 0:
        return None
    top = int(values.max())
    if top >= allocated and top >= limit:
        return None
    return values.astype(np.intp, copy=False)


def _grown(array: np.ndarray, needed: int, limit: int) -> np.ndarray:
    """``array`` zero-extended to at least ``needed`` entries, doubling (up to ``limit``) to amortise."""
    if needed <= array.size:
        return array
    out = np.zeros(max(needed, min(2 * array.size, limit)), dtype=array.dtype)
    out[: array.size] = array
    return out


class _Merger:
    """Per-batch partial results (pyarrow tables), merged rarely.

    A merge runs once the pending rows reach ``MERGE_ROWS`` and the merged rows: memory
    stays within about twice the distinct keys (plus ``MERGE_ROWS``) and the total merge
    work within a few passes over the partial rows.
    """

    def __init__(self, merge: Callable[[pa.Table], pa.Table]) -> None:
        self.merge = merge
        self.merged: pa.Table | None = None
        self.pending: list[pa.Table] = []
        self.pending_rows = 0

    def add(self, part: pa.Table) -> None:
        self.pending.append(part)
        self.pending_rows += part.num_rows
        if self.pending_rows >= max(MERGE_ROWS, self.merged.num_rows if self.merged is not None else 0):
            self.flush()

    def flush(self) -> pa.Table | None:
        parts = ([self.merged] if self.merged is not None else []) + self.pending
        if parts:
            self.merged = self.merge(pa.concat_tables(parts).combine_chunks())
        self.pending, self.pending_rows = [], 0
        return self.merged


def _sum_counts(t: pa.Table) -> pa.Table:
    return t.group_by("id").aggregate([("n", "sum")]).rename_columns(["id", "n"])


def _distinct(t: pa.Table) -> pa.Table:
    return t.group_by(t.column_names).aggregate([])


class _ItemCounter:
    """Interactions per item id.

    Dense path: ``np.bincount`` into an int64 array indexed by id (non-negative integer
    ids under ``_dense_limit(rows, DENSE_COUNTS_PER_ROW, DENSE_COUNTS_SLACK)``). Hash
    path: per-batch ``pc.value_counts`` merged rarely. The first batch that does not fit
    moves the dense counts to the hash path for good.
    """

    def __init__(self) -> None:
        self.dense: np.ndarray | None = np.zeros(0, dtype=np.int64)
        self.hashed = _Merger(_sum_counts)
        self.rows = 0

    def add(self, ids: pa.Array) -> None:
        """Count ``ids`` (no nulls)."""
        self.rows += len(ids)
        if self.dense is not None:
            limit = _dense_limit(self.rows, DENSE_COUNTS_PER_ROW, DENSE_COUNTS_SLACK)
            values = _dense_values(ids, self.dense.size, limit)
            if values is not None:
                if values.size:
                    per_id = np.bincount(values)
                    self.dense = _grown(self.dense, per_id.size, limit)
                    self.dense[: per_id.size] += per_id
                return
            self._to_hashed(ids.type)
        vc = pc.value_counts(ids)
        self.hashed.add(pa.table({"id": vc.field("values"), "n": vc.field("counts")}))

    def _to_hashed(self, id_type: pa.DataType) -> None:
        assert self.dense is not None
        present = np.flatnonzero(self.dense)
        if present.size:  # the ids came from this column, so they fit its type
            self.hashed.add(pa.table({"id": pa.array(present).cast(id_type), "n": self.dense[present]}))
        self.dense = None

    def result(self) -> pa.Table:
        """Table (id, n) of the ids seen, one row per id (in id order on the dense path)."""
        if self.dense is not None:
            present = np.flatnonzero(self.dense)
            return pa.table({"id": present.astype(np.int64), "n": self.dense[present]})
        merged = self.hashed.flush()
        return merged if merged is not None else pa.table({"id": pa.array([], pa.int64()), "n": pa.array([], pa.int64())})


class _DistinctIds:
    """A set of ids: a boolean array indexed by id on the dense path, else hashed.

    Dense path as for ``_ItemCounter`` with a byte per id, so the bound is looser
    (``DENSE_SEEN_PER_ROW`` ids per row read, plus ``DENSE_SEEN_SLACK``).
    """

    def __init__(self) -> None:
        self.seen: np.ndarray | None = np.zeros(0, dtype=bool)
        self.hashed = _Merger(_distinct)
        self.rows = 0

    def add(self, ids: pa.Array) -> None:
        """Add ``ids`` (nulls are dropped)."""
        if ids.null_count:
            ids = ids.drop_null()
        self.rows += len(ids)
        if self.seen is not None:
            limit = _dense_limit(self.rows, DENSE_SEEN_PER_ROW, DENSE_SEEN_SLACK)
            values = _dense_values(ids, self.seen.size, limit)
            if values is not None:
                if values.size:
                    self.seen = _grown(self.seen, int(values.max()) + 1, limit)
                    self.seen[values] = True
                return
            present = np.flatnonzero(self.seen)
            if present.size:
                self.hashed.add(pa.table({"u": pa.array(present).cast(ids.type)}))
            self.seen = None
        self.hashed.add(pa.table({"u": pc.unique(ids)}))

    def count(self) -> int:
        """Distinct ids added."""
        if self.seen is not None:
            return int(np.count_nonzero(self.seen))
        merged = self.hashed.flush()
        return merged.num_rows if merged is not None else 0


_USER_BITS = 31
_USER_MASK = (1 << _USER_BITS) - 1
_ITEM_LIMIT = 1 << 32  # item << 31 | user stays below 2**63
_DEDUP_CHUNK = 1 << 20  # keys deduplicated per chunk by _sorted_unique


def _sorted_unique(keys: np.ndarray) -> np.ndarray:
    """Sort ``keys`` (an array owning its data) and drop repeats, both in place.

    Returns ``keys`` shrunk to its distinct values. Repeats are dropped chunk by chunk
    so the extra memory is one chunk, not a mask and a copy of the whole array.
    ``np.unique`` is avoided on purpose: in numpy >= 2.3 it hashes, ~40x slower here
    than numpy's vectorised sort for int64.
    """
    keys.sort()
    if keys.size < 2:
        return keys
    write = 0
    previous = None
    for start in range(0, keys.size, _DEDUP_CHUNK):
        chunk = keys[start : start + _DEDUP_CHUNK]
        keep = np.empty(chunk.size, dtype=bool)
        keep[0] = previous is None or chunk[0] != previous
        np.not_equal(chunk[1:], chunk[:-1], out=keep[1:])
        previous = chunk[-1]  # a copy: the writes below may reach this chunk
        kept = chunk[keep]
        keys[write : write + kept.size] = kept  # write <= start, so unread keys stay intact
        write += kept.size
    keys.resize(write, refcheck=False)  # shrinks in place (realloc)
    return keys


class _SortedKeys:
    """A set of int64 keys kept as one sorted numpy array, merged by sorting.

    Each batch is sorted and deduplicated on arrival; the pending sorted runs are merged
    into the set once they reach ``MERGE_ROWS`` and the set's size (so each key is
    re-sorted only a few times). A merge extends the set's array in place (realloc),
    copies the pending runs in, sorts and deduplicates in place: about 8 bytes per
    distinct key plus the pending runs, far less than a hash set.
    """

    def __init__(self) -> None:
        self.merged = np.empty(0, dtype=np.int64)
        self.pending: list[np.ndarray] = []
        self.pending_rows = 0

    def add(self, keys: np.ndarray) -> None:
        """Add ``keys`` (an int64 array the set may sort and resize: it takes it over)."""
        part = _sorted_unique(keys)
        self.pending.append(part)
        self.pending_rows += part.size
        if self.pending_rows >= max(MERGE_ROWS, self.merged.size):
            self.flush()

    def flush(self) -> np.ndarray:
        """Merge the pending runs; returns the set (sorted, distinct)."""
        if self.pending:
            keys, at = self.merged, self.merged.size
            self.merged = np.empty(0, dtype=np.int64)
            keys.resize(at + self.pending_rows, refcheck=False)  # large arrays grow by mremap, no copy
            while self.pending:
                part = self.pending.pop(0)
                keys[at : at + part.size] = part
                at += part.size
                del part  # free each run once copied
            self.pending_rows = 0
            self.merged = _sorted_unique(keys)
        return self.merged


class _PairSet:
    """Distinct (user, item) pairs, for exact distinct users per item.

    Non-negative integer ids that fit (item < 2**32, user < 2**31) are packed into one
    int64, item-major (item << 31 | user), and deduplicated by sorting: the sorted keys
    then hold each item's distinct users contiguously. Other ids (strings, negative or
    larger numbers) use a two-column pyarrow group-by; a log that stops fitting
    switches once.
    """

    def __init__(self) -> None:
        self.packed: _SortedKeys | None = _SortedKeys()
        self.table = _Merger(_distinct)

    def add(self, users: pa.Array, items: pa.Array) -> None:
        """Add the pairs of one batch (no nulls in either)."""
        if self.packed is not None:
            keys = _pack(users, items)
            if keys is not None:
                if keys.size:
                    self.packed.add(keys)
                return
            self._unpack_all(users.type, items.type)
        self.table.add(_distinct(pa.table({"u": users, "i": items})))

    def _unpack_all(self, user_type: pa.DataType, item_type: pa.DataType) -> None:
        assert self.packed is not None
        keys = self.packed.flush()
        self.packed = None
        if keys.size:  # the ids came from these columns, so they fit their types
            self.table.add(
                pa.table({"u": pa.array(keys & _USER_MASK).cast(user_type), "i": pa.array(keys >> _USER_BITS).cast(item_type)})
            )

    def users_per_item(self) -> pa.Table:
        """Table (i, n): distinct users per item id (called once, at the end: it spends the set)."""
        if self.packed is not None:
            items = self.packed.flush()
            items >>= _USER_BITS  # in place (the set is spent): sorted, one run per item
            if items.size == 0:
                return pa.table({"i": pa.array([], pa.int64()), "n": pa.array([], pa.int64())})
            starts = np.flatnonzero(np.concatenate(([True], items[1:] != items[:-1])))
            n = np.diff(np.append(starts, items.size))
            return pa.table({"i": items[starts], "n": n.astype(np.int64)})
        merged = self.table.flush()
        if merged is None:
            return pa.table({"i": pa.array([], pa.int64()), "n": pa.array([], pa.int64())})
        return merged.group_by("i").aggregate([("u", "count")]).rename_columns(["i", "n"])


def _pack(users: pa.Array, items: pa.Array) -> np.ndarray | None:
    """item << 31 | user as int64, or None when the ids are not small non-negative integers."""
    if not (pa.types.is_integer(users.type) and pa.types.is_integer(items.type)):
        return None
    u = users.to_numpy(zero_copy_only=False)
    i = items.to_numpy(zero_copy_only=False)
    if u.size == 0:
        return np.empty(0, dtype=np.int64)
    if u.min() < 0 or i.min() < 0 or u.max() > _USER_MASK or i.max() >= _ITEM_LIMIT:
        return None
    keys = i.astype(np.int64)  # always a fresh array: the caller sorts it in place
    keys <<= _USER_BITS
    keys |= u.astype(np.int64, copy=False)
    return keys


def _count(log: _Log, need_users: bool, as_strings: bool, progress: Progress) -> IdCounts:
    items_c = _ItemCounter()
    users_c = _DistinctIds()
    pairs = _PairSet()
    n_rows = n_null = n_null_users = 0
    with progress.track("Counting interactions", total=log.total_rows) as advance:
        for items, users in log.batches(as_strings):
            batch_rows = len(items)
            n_rows += batch_rows
            if items.null_count:
                n_null += items.null_count
                keep = pc.is_valid(items)
                items = items.filter(keep)
                users = users.filter(keep) if users is not None else None
            items_c.add(items)
            if users is not None:
                n_null_users += users.null_count
                users_c.add(users)
                if need_users:
                    if users.null_count:
                        keep_users = pc.is_valid(users)
                        pairs.add(users.filter(keep_users), items.filter(keep_users))
                    else:
                        pairs.add(users, items)
            advance(batch_rows)
    n_interactions = n_rows - n_null
    if n_interactions == 0:
        detail = f" ({n_null} rows, every item id empty)" if n_null else ""
        raise InteractionsError(f"no interactions in {log.path}{detail}")
    merged = items_c.result()
    if need_users:
        per_item = pairs.users_per_item()
        user_counts = np.zeros(merged.num_rows, dtype=np.int64)
        if per_item.num_rows:
            keys, value_set = per_item.column("i"), merged.column("id")
            if pa.types.is_integer(value_set.type):  # packed pairs come back as int64
                keys, value_set = keys.cast(pa.int64()), value_set.cast(pa.int64())
            pos = pc.index_in(keys, value_set=value_set).to_numpy(zero_copy_only=False)
            user_counts[pos.astype(np.int64)] = per_item.column("n").to_numpy()
        merged = merged.append_column("u", pa.array(user_counts))
    if as_strings:
        merged = merged.set_column(0, "id", _maybe_int(merged.column("id").combine_chunks()))
    if as_strings or items_c.dense is None:  # the dense path yields ids in order already
        merged = merged.sort_by("id")
    ids = ids_to_numpy(merged.column("id"), f"item column {log.item_col!r} of {log.path}")
    counts = merged.column("n").to_numpy().astype(np.int64, copy=False)
    return IdCounts(
        ids=ids,
        counts=counts,
        user_counts=merged.column("u").to_numpy().astype(np.int64, copy=False) if need_users else None,
        n_interactions=n_interactions,
        n_users=users_c.count() if log.user_col is not None else None,
        source=log.path,
        user_col=log.user_col,
        item_col=log.item_col,
        n_null_items=n_null,
        format=log.format,
        n_null_users=n_null_users,
    )


# ---------------------------------------------------------------- aligning with rows


class _RowLookup:
    """Raw item id -> table row (hash lookup), -1 when absent.

    Integer and string ids compare as strings; the id set is cast to text at most once,
    not once per batch of a streamed log.
    """

    def __init__(self, item_ids: np.ndarray) -> None:
        self.keys = pa.array(item_ids)
        self._text: pa.Array | None = None

    def __call__(self, values: pa.Array) -> np.ndarray:
        keys = self.keys
        if pa.types.is_integer(values.type) != pa.types.is_integer(keys.type):
            if self._text is None:
                self._text = keys.cast(pa.string())
            values, keys = values.cast(pa.string()), self._text
        return pc.fill_null(pc.index_in(values, value_set=keys), -1).to_numpy(zero_copy_only=False).astype(np.int64)


def lookup_rows(values: np.ndarray, item_ids: np.ndarray) -> np.ndarray:
    """Row of each raw id in ``item_ids`` (hash lookup), -1 when absent."""
    if len(values) == 0:
        return np.empty(0, dtype=np.int64)
    return _RowLookup(item_ids)(pa.array(values))


# Canonical integers, as _maybe_int keeps them ("12", "-3"; not "012", "+5", "1.0").
_CANONICAL_INT = r"^(0|-?[1-9][0-9]*)$"


def _first_non_integer(ids: pa.Array) -> object | None:
    """The first id that is not an integer: a string not in canonical integer form, a
    fractional float, else (other types) the first non-null id; None when there is none."""
    if pa.types.is_string(ids.type) or pa.types.is_large_string(ids.type):
        bad = pc.invert(pc.match_substring_regex(ids, _CANONICAL_INT))
    elif pa.types.is_floating(ids.type):
        bad = pc.not_equal(pc.trunc(ids), ids)  # NaN != NaN, so NaN counts as bad too
    else:
        bad = pc.is_valid(ids)
    at = pc.index(pc.fill_null(bad, False), True).as_py()
    return None if at < 0 else ids[at].as_py()


def _row_of(log: _Log, value: object) -> int | None:
    """1-based data row (header excluded) of the first occurrence of item id ``value``.

    Error path only: streams the log again, as text, one vectorised search per batch.
    """
    row = 0
    try:
        for items, _ in log.batches(as_strings=True):
            if not pa.types.is_string(items.type):
                items = items.cast(pa.string())
            at = pc.index(items, pa.scalar(str(value), items.type)).as_py()
            if at >= 0:
                return row + at + 1
            row += len(items)
    except (AuditError, _TypeDrift, pa.ArrowException, OSError):
        return None
    return None


def _not_integers(log: _Log | None, source: object, example: object | None) -> IdMappingError:
    """The error for item ids that cannot be row indices, showing an offending id and its row."""
    where = ""
    if example is not None:
        row = _row_of(log, example) if log is not None else None
        where = f" (e.g. {example!r}" + (
            f" in data row {row}, counting from 1 after any header)" if row is not None else ")"
        )
    return IdMappingError(
        f"item ids in {source} are not integers{where}, so they cannot be table row "
        "indices; pass --item-ids FILE with the raw id of each table row"
    )


def _reopen(counts: IdCounts) -> _Log | None:
    """The log behind ``counts`` opened again (error path), or None when that fails."""
    try:
        return open_log(counts.source, counts.format or "auto", counts.user_col, counts.item_col)
    except AuditError:
        return None


def _rows_without_ids(counts: IdCounts, n_items: int) -> np.ndarray:
    ids = counts.ids
    if ids.dtype.kind not in "iu":
        if ids.dtype == object:  # str ids (sorted): find one that is not an integer's spelling
            example = _first_non_integer(pa.array(ids, pa.string()))
        else:
            example = ids[0] if len(ids) else None
        raise _not_integers(_reopen(counts), counts.source, example)
    ids = ids.astype(np.int64, copy=False)
    return np.where((ids >= 0) & (ids < n_items), ids, -1)


def align_counts(counts: IdCounts, item_ids: np.ndarray | None, n_items: int) -> ItemStats:
    """Frequencies (and distinct users) per table row.

    ``item_ids`` None: row index = id. Ids without a row are counted in ``n_unmapped``
    (interactions) and ``n_unmapped_ids`` (distinct ids), not raised.
    """
    if item_ids is None:
        rows = _rows_without_ids(counts, n_items)
    else:
        if len(item_ids) != n_items:
            raise IdMappingError(f"{len(item_ids)} item ids for a table of {n_items} rows")
        rows = lookup_rows(counts.ids, item_ids)
    found = rows >= 0
    frequencies = np.zeros(n_items, dtype=np.int64)
    frequencies[rows[found]] = counts.counts[found]  # ids are distinct, so rows are too
    user_counts = None
    if counts.user_counts is not None:
        user_counts = np.zeros(n_items, dtype=np.int64)
        user_counts[rows[found]] = counts.user_counts[found]
    return ItemStats(
        frequencies=frequencies,
        n_interactions=counts.n_interactions,
        n_unmapped=int(counts.counts[~found].sum()),
        n_unmapped_ids=int((~found).sum()),
        user_counts=user_counts,
        n_users=counts.n_users,
        source=counts.source,
    )


# ---------------------------------------------------------------- pairs


def _batch_rows(items: pa.Array, lookup: _RowLookup | None, n_items: int, log: _Log) -> np.ndarray:
    """Table row of each item id of one batch (-1: no row); ids are rows when ``lookup`` is None."""
    if len(items) == 0:  # e.g. every user id of the block empty: no type to judge the ids by
        return np.empty(0, dtype=np.int64)
    if lookup is None:
        items = _maybe_int(items)
        if pa.types.is_floating(items.type):  # integral floats are ids, as ids_to_numpy reads them
            try:
                items = items.cast(pa.int64(), safe=True)
            except pa.ArrowInvalid:
                pass
        if not pa.types.is_integer(items.type):
            raise _not_integers(log, log.path, _first_non_integer(items))
        ids = items.cast(pa.int64()).to_numpy(zero_copy_only=False)
        return np.where((ids >= 0) & (ids < n_items), ids, -1)
    return lookup(items)


def read_pairs(
    path: Path,
    *,
    fmt: str = "auto",
    user_col: str | None = None,
    item_col: str | None = None,
    item_ids: np.ndarray | None,
    n_items: int,
    max_rows: int | None = None,
    seed: int = 0,
) -> InteractionPairs:
    """(user, item-row) pairs of a log, dropping items without a row.

    With ``max_rows``, a seeded uniform sample (without replacement) of the mapped rows,
    kept in log order: each row draws a random key and the ``max_rows`` smallest keys
    survive (memory O(max_rows)). Users get a dense index in order of first appearance.
    """
    log = open_log(Path(path), fmt, user_col, item_col)
    if log.user_col is None:
        raise InteractionsError(
            f"cannot find a user id column in {log.path}; columns found: {', '.join(log.columns)}. "
            "Pass --user-col NAME"
        )
    if item_ids is not None and len(item_ids) != n_items:
        raise IdMappingError(f"{len(item_ids)} item ids for a table of {n_items} rows")
    if max_rows is not None and max_rows < 1:
        raise InputError(f"max_rows must be at least 1, got {max_rows}")
    for as_strings in (False, True):
        try:
            return _pairs(log, item_ids, n_items, max_rows, seed, as_strings)
        except _TypeDrift:
            continue
    raise InteractionsError(f"cannot read the id columns of {path}")  # pragma: no cover


def _pairs(
    log: _Log, item_ids: np.ndarray | None, n_items: int, max_rows: int | None, seed: int, as_strings: bool
) -> InteractionPairs:
    lookup = _RowLookup(item_ids) if item_ids is not None else None
    rng = np.random.default_rng(seed)
    users_parts: list[pa.Array] = []
    rows_parts: list[np.ndarray] = []
    pos_parts: list[np.ndarray] = []
    key_parts: list[np.ndarray] = []
    kept = 0
    seen = 0
    n_read = 0
    for items, users in log.batches(as_strings):
        assert users is not None
        n_read += len(items)
        valid = pc.and_(pc.is_valid(items), pc.is_valid(users))
        if items.null_count or users.null_count:
            items, users = items.filter(valid), users.filter(valid)
        rows = _batch_rows(items, lookup, n_items, log)
        mapped = np.flatnonzero(rows >= 0)
        users_parts.append(users.take(pa.array(mapped)))
        rows_parts.append(rows[mapped])
        pos_parts.append(seen + np.arange(mapped.size, dtype=np.int64))
        seen += mapped.size
        kept += mapped.size
        if max_rows is not None:
            key_parts.append(rng.random(mapped.size))
            if kept > 2 * max_rows:
                kept = _shrink(users_parts, rows_parts, pos_parts, key_parts, max_rows)
    if max_rows is not None and kept > max_rows:
        _shrink(users_parts, rows_parts, pos_parts, key_parts, max_rows)
    if n_read == 0:
        raise InteractionsError(f"no interactions in {log.path}")
    users_all = pa.concat_arrays(users_parts)  # not empty: at least one batch was read
    rows_all = np.concatenate(rows_parts)
    pos_all = np.concatenate(pos_parts)
    order = np.argsort(pos_all, kind="stable")  # back to log order
    users_all = users_all.take(pa.array(order))
    rows_all = rows_all[order]
    uniq = pc.unique(users_all)  # order of first appearance
    user_ids = _maybe_int(uniq) if as_strings else uniq
    user_index = pc.index_in(users_all, value_set=uniq).to_numpy(zero_copy_only=False).astype(np.int64)
    return InteractionPairs(
        user_index=user_index,
        item_rows=rows_all.astype(np.int64, copy=False),
        user_ids=ids_to_numpy(user_ids, f"user column {log.user_col!r} of {log.path}"),
    )


def _shrink(
    users: list[pa.Array], rows: list[np.ndarray], pos: list[np.ndarray], keys: list[np.ndarray], size: int
) -> int:
    """Keep the ``size`` rows with the smallest random keys (in place); return the count."""
    k = np.concatenate(keys)
    keep = np.sort(np.argpartition(k, size - 1)[:size]) if k.size > size else np.arange(k.size)
    u = pa.concat_arrays(users).take(pa.array(keep))
    r, p = np.concatenate(rows)[keep], np.concatenate(pos)[keep]
    users[:], rows[:], pos[:], keys[:] = [u], [r], [p], [k[keep]]
    return int(keep.size)
