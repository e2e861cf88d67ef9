"""What error messages may say about a file's content.

A batch manifest can point any path column at any file (``/etc/passwd``), and its error
messages land in a results table other people read. So a message about a file that is
not in the expected format describes it in structural terms (format, number and types
of columns) and never quotes its values. Column names are listed only when the first line
reads as a log's header: several identifier-like names, at least one of them in a log's
vocabulary (``user_id``, ``movieId``, ``timestamp``...). That is what a user needs to pick
the item column, while a headerless data line (``alice,hunter2``, or ``user_4,item_39``: a digit
in every cell) is never echoed. A line
of identifier-like names is also listed when one of them is a column name the user gave
(``a,b,c`` with ``--item-col b``: a header, whatever its words), or when the user gave
names none of which it holds and it is two or more names without digits (``a,b,c`` with
``--item-col y``); a RecBole header (``user_id:token``) read as another format is named
as one, with the option that reads it, and so is a comma header read as TSV.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from auditor.errors import setting

LONG_LINE = "a line is longer than 4 MiB (binary data, or a file that is not line-based)"
"""Why a log with a line beyond the CSV reader's 4 MiB block is refused, however it shows."""

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_ .\-]{0,63}")
_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_ .\-]{0,63}(:[a-z_]{1,16})?")
_LOG_WORDS = re.compile(r"id|user|item|movie|product|sku|session|rating|time|event|count|query|label", re.I)
_EXPECTED_COLUMNS = re.compile(r"Expected (\d+) columns?, got (\d+)")
_ROW_NUMBER = re.compile(r"[Rr]ow #?(\d+)")


def normalised_name(name: str) -> str:
    """A column name as the common-name lists spell them: lower case, no ``_ - `` or space."""
    return re.sub(r"[\s_\-]+", "", name).lower()


def detected_column(
    columns: Sequence[str], names: Sequence[str], path: object, role: str, option: str, error: type[Exception],
) -> str | None:
    """The one column of ``columns`` whose name is a common name of ``role`` (``names``,
    normalised), None when none is. Two such columns (``user_id`` beside ``userId``,
    ``item_id`` beside ``movie_id``, ``count`` beside ``frequency``) raise ``error`` naming
    both and the option that picks one: which of them holds the ids or counts decides the
    figures, and no order of the name list can know it; one name twice (``item_id,item_id``)
    is refused asking to rename them, which no option can pick. The one policy for every role."""
    matches = [c for c in columns if normalised_name(c) in names]
    repeated = next((c for c in matches if matches.count(c) > 1), None)
    if repeated is not None:  # no option can pick one of two columns of one name
        raise error(f"{role} column {repeated!r} appears {matches.count(repeated)} times in {path}; "
                    "rename the duplicates so the column is unambiguous")
    if len(matches) > 1:
        raise error(
            f"several columns of {path} could be the {role} column ({', '.join(map(repr, matches))}); "
            f"pass {setting(option)} NAME to pick one"
        )
    return matches[0] if matches else None


def data_like(columns: Sequence[str], schema: bool = False) -> bool:
    """True when a text file's first line taken as its header has a digit in every cell
    (``user_4,item_39``): data, most likely, never echoed nor offered as column names."""
    return not schema and bool(columns) and all(any(ch.isdigit() for ch in str(c)) for c in columns)


def looks_like_names(columns: Sequence[str], schema: bool = False) -> bool:
    """True for at least two identifier-like names, one of them in a log's vocabulary
    (``schema``: a file's own column names, of which one suffices, RecBole's ``:type``
    suffixes allowed). Other names may be a file's content: they are never repeated."""
    names = [str(c).strip() for c in columns]
    pattern = _SCHEMA_NAME if schema else _NAME
    return (
        not data_like(names, schema)
        and len(names) >= (1 if schema else 2)
        and all(pattern.fullmatch(n) for n in names)
        and any(_LOG_WORDS.search(n) for n in names)
    )


def _named_by_user(columns: Sequence[str], given: Sequence[str | None]) -> bool:
    """True when the line is identifier-like names and the user gave column names: one of
    them in the line (the user knows it is a header; their other name is the mistake), or
    none, where the line has two or more names without digits (``a,b,c`` given ``x`` and
    ``y``: the header, which a data line of words and numbers is not)."""
    names = [str(c).strip() for c in columns]
    wanted = {g.strip().lower() for g in given if g}
    if not wanted or not all(_NAME.fullmatch(n) for n in names):
        return False
    return any(n.lower() in wanted for n in names) or (
        len(names) >= 2 and not any(ch.isdigit() for n in names for ch in n))


def another_format(columns: Sequence[str], schema: bool = False) -> bool:
    """True when :func:`columns_found` advises the format option that reads the file (a
    RecBole header, or a comma header, read as another format): no column option helps."""
    return not schema and (_recbole_header(columns) or _other_delimiter(columns) is not None)


def _other_delimiter(columns: Sequence[str]) -> str | None:
    """The one field of a first line read with another delimiter, when it splits on ``,``,
    ``;`` or ``|`` into a log's header (``user_id,item_id`` read as TSV): that delimiter."""
    if len(columns) != 1:
        return None
    line = str(columns[0])
    for sep in ",;|":
        if sep in line and looks_like_names([p.strip().strip('"') for p in line.split(sep)]):
            return sep
    return None


def _recbole_header(columns: Sequence[str]) -> bool:
    """RecBole's typed header (``user_id:token``, ``timestamp:float``) read as plain names."""
    names = [str(c).strip() for c in columns]
    return (len(names) >= 2 and all(_SCHEMA_NAME.fullmatch(n) and ":" in n for n in names)
            and any(_LOG_WORDS.search(n) for n in names))


def columns_found(columns: Sequence[str], schema: bool = False, given: Sequence[str | None] = ()) -> str:
    """``columns found: a, b`` for column names that look like a log's (a text header, or
    ``schema``: a Parquet file's own names), or that hold a name in ``given`` (the column
    names the user passed); a RecBole typed header read as another format, with the option
    that reads it; otherwise how many there are, without quoting them (they may be content
    of a file that is no log)."""
    if not schema and _recbole_header(columns):
        return (
            "its first line is a RecBole header with typed names (" + ", ".join(str(c).strip() for c in columns)
            + f"); pass {setting('interactions_format')} recbole to read it (or remove the ':type' suffixes)"
        )
    if looks_like_names(columns, schema) or _named_by_user(columns, given):
        return "columns found: " + ", ".join(str(c) for c in columns)
    sep = None if schema else _other_delimiter(columns)
    if sep is not None:
        names = ", ".join(p.strip().strip('"') for p in str(columns[0]).split(sep))
        return (f"its first line is one field, a header separated by {sep!r} ({names}), not by the format's delimiter; "
                f"pass {setting('interactions_format')} csv to read it")
    n = len(columns)
    if data_like(columns, schema):
        return (f"its first line holds {n} field{'s' if n != 1 else ''} with a digit in every one, as data has, "
                "not a header of column names: add a header line naming its columns (user_id,item_id for a log)")
    if schema:
        return f"its {n} column{'s' if n != 1 else ''} (from its schema) {'do' if n != 1 else 'does'} not look like an interaction log's"
    return (
        f"its first line holds {n} field{'s' if n != 1 else ''} that {'do' if n != 1 else 'does'} not look like a "
        "header of column names (is it an interaction log?)"
    )


def arrow_reason(exc: BaseException, data_row: int | None = None) -> str:
    """A pyarrow error in words that quote no content of the file.

    pyarrow's CSV errors end with the offending row (``Expected 2 columns, got 3: a,b,c``)
    and its block-size error suggests a setting popaudit does not expose. ``data_row``: the
    row of a line of another field count, where the caller found it (``sniff.ragged_data_row``).
    """
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if "straddling" in text or "block size" in text:
        return LONG_LINE
    expected = _EXPECTED_COLUMNS.search(text)
    if expected:
        row = _ROW_NUMBER.search(text)
        where = f" (data row {data_row})" if data_row is not None else f" (row {row.group(1)})" if row else ""
        return f"a line has {expected.group(2)} fields where the first line has {expected.group(1)}{where}"
    if "conversion error" in text or "invalid value" in text:
        return "a value could not be read as the column's type"
    # Keep pyarrow's own explanation (format, footer, magic bytes) but nothing quoted after it.
    return re.sub(r":\s*'.*$|:\s*\".*$", "", text)[:200]
