"""Typing ids read from text so that they keep their spelling.

One rule for every reader (CSV/TSV/``::``/RecBole logs, ``.txt``/``.csv`` id files,
Parquet string columns, ``.npy`` of strings, counts files, served lists):
:func:`integer_ids`. A text id is an integer only when it is spelled as one: an optional
minus sign and digits, surrounding spaces allowed ("12", " -3 "). Anything else stays
text: zero-padded integers ("012", "-0"), a plus sign ("+5"), decimals ("5.0") and
exponents ("5E0"), so "5" and "5.0" are two ids in every format. Typed numeric columns
(Parquet int/float, ``.npy`` numbers) keep their types (:func:`auditor.loading.ids.ids_to_numpy`).
pyarrow's CSV type inference reads "001" as 1 and "5.0" as 5, so a log's reader types
each block itself (:class:`BlockTyper`) with the same rule, as fast as inference.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


_WHITESPACE_ONLY = r"^[ \t\r\n\f\v]*$"

PANDAS_MISSING = (
    "", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN", "<NA>", "N/A",
    "NA", "NULL", "NaN", "None", "n/a", "nan", "null",
)  # fmt: skip
"""The words ``pandas.read_csv`` (2.x) reads as missing values, token columns included."""


def null_words(fmt: str) -> list[str]:
    """The cells a text file of format ``fmt`` reads as empty (pyarrow ``null_values``):
    only the empty cell (blank ones become null in :func:`blank_as_null`), so an item
    coded ``NA``, ``null`` or ``nan`` is an id, as in Parquet and ``.npy``; a RecBole
    ``.inter`` also pandas' missing-value words, as RecBole itself reads the file."""
    return list(PANDAS_MISSING) if fmt == "recbole" else [""]


def blank_as_null(ids: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """``ids`` with every empty or whitespace-only text id, and every NaN of a float column,
    as null: a blank id, however the file spells it (a CSV's ``3, `` as its ``3,``, polars'
    NaN as pandas' null), so every reader leaves out and counts the same rows. Other types
    are returned as they are."""
    t = ids.type
    if pa.types.is_floating(t):
        nan = pc.is_nan(ids)
        return pc.if_else(nan, pa.scalar(None, t), ids) if pc.any(nan).as_py() else ids
    if not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t)):
        return ids
    try:  # utf8_is_space (false on "") is about twice as fast as a regex over every id
        blank = pc.or_(pc.utf8_is_space(ids.cast(pa.large_string() if pa.types.is_large_binary(t) else pa.string())),
                       pc.equal(pc.binary_length(ids), 0))
    except pa.ArrowInvalid:  # bytes that are not UTF-8: their reader names them
        blank = pc.match_substring_regex(ids, _WHITESPACE_ONLY)
    if not pc.any(blank).as_py():  # the common case: nothing to replace, no copy
        return ids
    return pc.if_else(blank, pa.scalar(None, t), ids)


def decimal_as_number(values: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """A decimal column (a warehouse's ``NUMBER(18,0)``, ``DECIMAL(38,2)``) as int64 when
    every value is whole within int64 (at any scale: ``3.00`` is 3), else uint64 when they
    fit it, else float64, so decimals take the integer or float path of every reader (a
    fraction is refused naming its row, as a float's); other types are returned as they are.
    The one policy for decimal ids and counts."""
    if not pa.types.is_decimal(values.type):
        return values
    for whole in (pa.int64(), pa.uint64()):
        try:
            return values.cast(whole)  # safe: refuses a fraction or an overflow
        except pa.ArrowInvalid:
            continue
    return values.cast(pa.float64(), safe=False)


def first_unwhole(ids: pa.Array) -> tuple[int, str] | None:
    """(position, why) of the first id of a float column that no integer id can equal:
    a fraction (3.5), an infinity or a number beyond int64; None when there is none
    (NaN is an empty id, :func:`blank_as_null`)."""
    if not pa.types.is_floating(ids.type) or len(ids) == 0:
        return None
    values = np.asarray(ids.to_numpy(zero_copy_only=False), dtype=np.float64)  # nulls read as NaN
    with np.errstate(invalid="ignore"):
        infinite, beyond = np.isinf(values), ~np.isinf(values) & (np.abs(values) >= 2.0**63)
        fraction = np.isfinite(values) & (np.floor(values) != values)
    bad = infinite | beyond | fraction
    if not bad.any():
        return None
    at = int(np.argmax(bad))
    why = "is infinite" if infinite[at] else "is beyond int64" if beyond[at] else "is not a whole number"
    return at, why


class DriftedBlock(Exception):
    """A block's ids cannot take the type the earlier blocks fixed (re-read all as text)."""


def zero_padded(text: pa.Array) -> bool:
    """True when some id is an integer written with leading zeros ("007", "-01"), which
    an integer read would merge with "7"; ``text`` holds ids that all cast to integers."""
    if len(text) == 0:
        return False
    long = pc.greater(pc.binary_length(text), 1)
    padded = pc.or_(pc.and_(pc.starts_with(text, "0"), long), pc.starts_with(text, "-0"))
    return bool(pc.any(padded).as_py())


def _as_text(block: pa.Array) -> pa.Array:
    """Binary as UTF-8 text where it is valid (else as it is: its reader says so)."""
    try:
        return block.cast(pa.string())
    except pa.ArrowInvalid:
        return block


def _cast(block: pa.Array, to: pa.DataType) -> pa.Array | None:
    try:
        return block.cast(to)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


def integer_ids(block: pa.Array, wide: bool = True) -> pa.Array | None:
    """``block`` (text or bytes, nulls allowed) as int64 when every id is spelled as an
    integer (module docstring), as uint64 when some are beyond int64 (hashed 64-bit ids;
    only when ``wide``), else None: the ids stay text.

    Vectorised casts only (this runs over every id of a log): arrow's string to integer cast
    takes digits with an optional minus sign (and "0x" hex, which :func:`zero_padded`
    refuses with the other spellings starting with a 0); it takes no spaces, so surrounding
    spaces are trimmed only when the plain cast fails."""
    if block.null_count == len(block):
        return None
    text = block
    for int_type in (pa.int64(), pa.uint64()) if wide else (pa.int64(),):
        ints = _cast(text, int_type)
        if ints is None and text is block:
            trimmed = _as_text(block)
            if pa.types.is_string(trimmed.type) or pa.types.is_large_string(trimmed.type):
                text = pc.utf8_trim_whitespace(trimmed)
                ints = _cast(text, int_type)
        if ints is not None:
            return None if zero_padded(text) else ints
    return None


def infer_block(block: pa.Array) -> pa.Array:
    """Ids of one block read as bytes, typed: int64 when every id is spelled as an integer
    (:func:`integer_ids`), else text (integers beyond int64 too: their reader makes them
    uint64 or keeps them as text, :func:`auditor.loading.ids.ids_to_numpy`)."""
    if block.null_count == len(block):  # no id to judge by (BlockTyper gives it the column's type)
        return pa.nulls(len(block), pa.int64())
    ints = integer_ids(block, wide=False)
    return _as_text(block) if ints is None else ints


class BlockTyper:
    """Types one id column block by block; the first block fixes the type, as pyarrow's
    streaming CSV reader does: a later block that cannot take it raises
    :class:`DriftedBlock` (text fixed first: later blocks stay text)."""

    def __init__(self) -> None:
        self.fixed: pa.DataType | None = None

    def __call__(self, block: pa.Array) -> pa.Array:
        if self.fixed is not None and not pa.types.is_integer(self.fixed):
            return _as_text(block)
        typed = infer_block(block)
        if block.null_count == len(block):  # an all-empty block: no type to judge by
            return typed if self.fixed is None else pa.nulls(len(block), self.fixed)
        if self.fixed is None:
            self.fixed = typed.type
        elif typed.type != self.fixed:
            raise DriftedBlock
        return typed
