"""What a log file is, from its name and first bytes: Parquet or text, delimiter,
header or none, RecBole typed header, and which columns hold the user and item ids.

Only a sample is read (``SAMPLE_BYTES``): detection must cost nothing next to the
streamed reads of :mod:`auditor.loading.logs`.
"""

from __future__ import annotations

import codecs
import csv
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from auditor.errors import InteractionsError, setting
from auditor.loading.messages import another_format, arrow_reason, columns_found, data_like, detected_column

# Normalised (lower-case, no _ - or space) column names of each role (unranked: two columns of one role are refused, messages.detected_column).
ITEM_COLUMN_NAMES = (
    "itemid", "item", "movieid", "movie", "productid", "product", "trackid", "track", "songid",
    "videoid", "articleid", "iid", "asin", "parentasin", "businessid", "poiid", "docid", "itemidx", "itemindex",
)
USER_COLUMN_NAMES = (
    "userid", "user", "uid", "customerid", "customer", "memberid", "accountid", "visitorid",
    "reviewerid", "sessionid", "queryid", "useridx", "userindex",
)
MOVIELENS_COLUMNS = ("user_id", "item_id", "rating", "timestamp")
PARQUET_MAGIC = b"PAR1"
SAMPLE_BYTES = 1 << 16
_NUMBER = re.compile(r"^[+-]?\d+(\.\d+)?([eE][+-]?\d+)?$")
_DIGIT_RUN = re.compile(r"\d+")
_EXPECTED_FIELDS = re.compile(r"Expected \d+ columns?, got \d+")
_ROW = re.compile(r"Row #(\d+)")
# Lines below the first compared with it to tell a header from data.
_SHAPE_LINES = 20

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


def open_stream(path: Path) -> pa.NativeFile:
    """The file's bytes, decompressed when its name says so (``.gz``, ``.bz2``, ...)."""
    return pa.input_stream(str(path), compression="detect")


COMPRESSION_SUFFIXES = (".gz", ".bz2", ".lz4", ".zst")
"""Name endings :func:`open_stream` decompresses (pyarrow's ``compression="detect"``)."""


def name_as_read(path: Path) -> str:
    """The file's name without a compression ending :func:`open_stream` decompresses:
    ``x.train.inter.gz`` is read as ``x.train.inter``."""
    name = path.name
    return name[: -len(path.suffix)] if path.suffix.lower() in COMPRESSION_SUFFIXES else name


def is_parquet(path: Path) -> bool:
    """Parquet by name (``.parquet``, ``.pq``) or by its leading magic bytes."""
    if path.suffix.lower() in (".parquet", ".pq"):
        return True
    with open(path, "rb") as fh:
        return fh.read(4) == PARQUET_MAGIC


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
        fmt_setting = setting("interactions_format")
        hint = (
            f"it was read as {fmt} because that format was given; pass {fmt_setting} parquet "
            f"({setting('data_format')} parquet for retrain)"
            if fmt != "auto" else f"name it .parquet or pass {fmt_setting} parquet"
        )
    elif what.startswith("gzip"):
        hint = "name it with a .gz suffix so it is decompressed"
    elif what.startswith("UTF-16"):
        hint = "re-save it as UTF-8 text"
    else:
        hint = "pass the training interaction log (Parquet, CSV/TSV, MovieLens or RecBole .inter)"
    raise InteractionsError(f"{path} is not a text interaction log (it looks like {what}); {hint}")


def sample_lines(path: Path, fmt: str = "auto") -> list[str]:
    """The non-blank complete lines of the first ``SAMPLE_BYTES`` of a text log.

    Raises InteractionsError for binary data, or when there is no line to detect from.
    """
    try:
        with open_stream(path) as fh:
            data = fh.read(SAMPLE_BYTES)
    except (OSError, pa.ArrowException) as exc:
        raise InteractionsError(f"cannot read {path}: {arrow_reason(exc)}") from exc
    _check_text(path, data, fmt)
    text = data.decode("utf-8-sig", errors="replace")
    lines = text.splitlines()
    cut = len(data) == SAMPLE_BYTES
    if cut and lines:
        lines = lines[:-1]  # the last line may be cut
    kept = [ln for ln in lines if ln.strip()]
    if kept:
        return kept
    if not data:
        why = "the file is empty (0 bytes)"
    elif cut and not lines:
        why = f"its first {SAMPLE_BYTES // 1024} KiB hold no complete line (one huge line: binary data or not a line-based log?)"
    elif cut:
        why = f"its first {SAMPLE_BYTES // 1024} KiB hold only blank lines"
    else:
        why = "it holds only blank lines"
    raise InteractionsError(f"no interactions in {path}: {why}")


def sniff_delimiter(lines: list[str], allowed: str = ",\t;|") -> str:
    """The delimiter of sampled lines (csv.Sniffer, else the most frequent; ``,`` by default)."""
    sample = "\n".join(lines[:20])
    try:
        return csv.Sniffer().sniff(sample, delimiters=allowed).delimiter
    except csv.Error:
        counts = {d: lines[0].count(d) for d in allowed} if lines else {}
        best = max(counts, key=lambda d: counts[d]) if counts else ","
        return best if counts.get(best) else ","


def typed_header(line: str) -> bool:
    """RecBole headers look like ``user_id:token<TAB>item_id:token``."""
    fields = line.split("\t")
    return len(fields) >= 2 and all(re.fullmatch(r"[^:]+:[a-z_]+", f.strip()) for f in fields)


def all_numbers(fields: list[str]) -> bool:
    """True when every field is a number: a data line, so the file has no header."""
    return all(_NUMBER.match(f.strip()) for f in fields)


def ragged_data_row(path: Path, read: pacsv.ReadOptions, parse: pacsv.ParseOptions, exc: BaseException) -> int | None:
    """The data row (from 1, after any header) of the line whose field count differs from
    the first line's, when ``exc`` is pyarrow's error for one: pyarrow counts the file's
    lines (the header too), and its threaded reader names none, so a single-threaded pass to
    the line finds it, on this error path only. None for another error, or no row found."""
    text = str(exc)
    if not _EXPECTED_FIELDS.search(text):
        return None
    row = _ROW.search(text)
    if row is None:
        options = pacsv.ReadOptions(use_threads=False, block_size=read.block_size, column_names=read.column_names,
                                    skip_rows=read.skip_rows)
        try:
            for _ in pacsv.open_csv(open_stream(path), read_options=options, parse_options=parse):
                pass
        except pa.ArrowInvalid as again:
            row = _ROW.search(str(again))
    return None if row is None else int(row.group(1)) - (0 if read.column_names else 1) - read.skip_rows


def csv_reason(path: Path, read: pacsv.ReadOptions, parse: pacsv.ParseOptions, exc: BaseException) -> str:
    """:func:`~auditor.loading.messages.arrow_reason` of a CSV/TSV read's error, a line of
    another field count named by its data row (:func:`ragged_data_row`): the one wording of
    every delimited table popaudit reads with these options (logs, holdouts, counts files)."""
    return arrow_reason(exc, ragged_data_row(path, read, parse, exc))


def _shape(cell: str) -> str:
    """A cell's shape: ``N`` for a number, else its text with each run of digits as ``#``
    (``user_4`` and ``user_17`` are both ``user_#``)."""
    cell = cell.strip()
    return "N" if _NUMBER.match(cell) else _DIGIT_RUN.sub("#", cell)


def first_line_is_data(lines: list[str], delimiter: str) -> bool:
    """True when a text file's first line is data, so it has no header (the one rule for
    logs and counts files): every cell a number (``u.data``), or every cell holds a digit
    and has the shape of the same cell in most lines below it (``user_4,item_39`` above
    ``user_7,item_2``; a one-line file: every cell holds a digit). A header of names
    (``user_id,item_id``) has a cell without a digit, or cells of another shape than the
    data's (``item1`` above ``5``)."""
    rows = list(csv.reader(lines[: _SHAPE_LINES + 1], delimiter=delimiter))
    first = rows[0] if rows else []
    if not first or all_numbers(first):
        return bool(first)
    if not all(any(ch.isdigit() for ch in cell) for cell in first):
        return False
    below = [row for row in rows[1:] if len(row) == len(first)]
    return all(
        2 * sum(_shape(row[k]) == _shape(cell) for row in below) > len(below) or not below
        for k, cell in enumerate(first)
    )


def _find_column(
    columns: list[str], given: str | None, names: tuple[str, ...], path: Path, what: str, schema: bool = False,
    named: tuple[str | None, ...] = (),
) -> str | None:
    """``given`` (exact, then case-insensitive), else the one column with a common name
    (:func:`~auditor.loading.messages.detected_column`: two are refused)."""
    if given is not None:
        exact = [c for c in columns if c == given] or [c for c in columns if c.lower() == given.lower()]
        if len(exact) == 1:
            return exact[0]
        if len(exact) > 1:
            raise InteractionsError(
                f"{what} column {given!r} appears {len(exact)} times in {path} ({', '.join(map(repr, exact))}); "
                "rename the duplicates so the column is unambiguous"
            )
        raise InteractionsError(
            f"{what} column {given!r} is not in {path}; {columns_found(columns, schema, named)}"
        )
    return detected_column(columns, names, path, f"{what} id", what + "_col", InteractionsError)


def choose_columns(
    columns: list[str], path: Path, user_col: str | None, item_col: str | None, schema: bool = False
) -> tuple[str, str | None]:
    """(item column, user column or None): the names given, else common id column names
    (``schema``: the columns are a Parquet schema's, listed as such in errors)."""
    given = (user_col, item_col)
    item = _find_column(columns, item_col, ITEM_COLUMN_NAMES, path, "item", schema, given)
    if item is None:
        advice = "" if another_format(columns, schema) or data_like(columns, schema) else f" Pass {setting('item_col')} NAME."
        raise InteractionsError(f"cannot find an item id column in {path}; {columns_found(columns, schema, given)}.{advice}")
    user = _find_column(columns, user_col, USER_COLUMN_NAMES, path, "user", schema, given)
    if user == item:
        raise InteractionsError(f"user and item columns of {path} are both {item!r}")
    return item, user
