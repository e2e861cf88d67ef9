"""Typing ids read from text so that they keep their spelling.

One rule for every reader (CSV/TSV/``::`` logs, ``.txt``/``.csv`` id files, Parquet
string columns, ``.npy`` of strings): text ids that are all canonical integers ("12",
not "012") are integers, anything else stays text (:func:`auditor.loading.logs.maybe_int`
applies it to a whole column). pyarrow's CSV type inference reads "001" as 1, so a
log's reader types each block itself (:class:`BlockTyper`): plain integers as int64 (as
fast as inference), zero-padded integers as text, other numbers as inference would.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc


_WHITESPACE_ONLY = r"^[ \t\r\n\f\v]*$"


def blank_as_null(ids: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """``ids`` with every empty or whitespace-only text id as null: a blank id, however the
    file spells it (a CSV's ``3, `` as its ``3,``), so every reader leaves out and counts the
    same rows. Other types are returned as they are."""
    t = ids.type
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


def _int64(block: pa.Array) -> pa.Array | None:
    try:
        return block.cast(pa.int64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


def infer_block(block: pa.Array) -> pa.Array:
    """Ids of one block read as bytes, typed: int64 when every id is a plain integer
    (surrounding spaces allowed, as pyarrow's inference allows them), float64 when every
    id is a number, else text (zero-padded integers included)."""
    text, ints = block, _int64(block)
    if ints is None and block.null_count < len(block):
        text = _as_text(block)
        if pa.types.is_string(text.type):
            text = pc.utf8_trim_whitespace(text)
            ints = _int64(text)
    if ints is not None:
        return _as_text(block) if zero_padded(text) else ints
    try:
        return block.cast(pa.float64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return _as_text(block)


class BlockTyper:
    """Types one id column block by block; the first block fixes the type, as pyarrow's
    streaming CSV reader does: a later block that cannot take it raises
    :class:`DriftedBlock` (text fixed first: later blocks stay text)."""

    def __init__(self) -> None:
        self.fixed: pa.DataType | None = None

    def __call__(self, block: pa.Array) -> pa.Array:
        if self.fixed is not None and not pa.types.is_integer(self.fixed) and not pa.types.is_floating(self.fixed):
            return _as_text(block)
        typed = infer_block(block)
        if block.null_count == len(block):  # an all-empty block: no type to judge by
            return typed if self.fixed is None else pa.nulls(len(block), self.fixed)
        if self.fixed is None:
            self.fixed = typed.type
        elif typed.type != self.fixed:
            if not (pa.types.is_floating(self.fixed) and pa.types.is_integer(typed.type)):
                raise DriftedBlock
            typed = typed.cast(self.fixed)
        return typed
