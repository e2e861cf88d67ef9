"""The column that orders served lists: a rank (lower first) or a score (higher first).

Which column: the one named by the ``rank_col`` or ``score_col`` setting (exact, then
case-insensitive), else the column with a common rank name (``rank``, ``position``,
``pos``...), else the one with a common score name (``score``, ``prediction``...). Two
columns with rank names (``rank`` and ``position``, or ``rank`` and ``Rank``), or, in a
file without one, two with score names (``score`` and ``prediction``), are an error asking
for the setting that picks one: they may disagree, and the choice decides every figure. A
rank wins over a score when a file has one of each: the rank is the order the users were
served; a score may have been re-ranked after it. Evidently's
``prediction`` column may hold either: it is read as a score unless ``rank_col`` names it.

What a cell must hold, checked for every row (the message names the column and the
first offending data row, counting from 1 after any header, and never quotes the
value; :mod:`auditor.loading.messages`):

* ranks: whole numbers >= 0. Integer columns are taken as they are (int64; uint64 beyond
  int64 is refused); float and text cells must be whole numbers below 2**53, where
  floats are still exact integers. A rank is only ever compared and sorted, never used
  as a size or an index, so a huge rank costs nothing.
* scores: numbers, NaN refused (it has no place in an order); ±inf kept (they order).
* empty cells (in text files also NA, NaN, null: pyarrow's missing-value markers), text that is not a number (``0x10``, ``1_000``, ``first``) and other
  types (booleans, dates) are refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from auditor.errors import ServedListsError, setting
from auditor.loading.messages import columns_found, detected_column
from auditor.loading.validation import first_rows

OrderKind = Literal["rank", "score"]

# Normalised (lower-case, no _ - or space) names, most specific first.
RANK_NAMES = ("rank", "ranking", "position", "pos", "rnk", "itemrank", "recrank", "slot")
SCORE_NAMES = (
    "score", "scores", "prediction", "predictions", "pred", "predicted", "predictedscore",
    "predictedrating", "relevance", "est", "estimate", "probability", "prob", "logit",
)
EXACT_FLOAT_RANK = 2.0**53
"""Float and text ranks must stay below this: beyond it floats no longer tell integers apart."""

_NUMBER = r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?$"
_SPECIAL = r"^[+-]?(inf|infinity|nan)$"


@dataclass(frozen=True)
class OrderColumn:
    """The column a file's lists are ordered by."""

    kind: OrderKind
    name: str

    @property
    def setting(self) -> str:
        return f"{self.kind}_col"


def _given(columns: list[str], given: str, kind: str, path: Path) -> str:
    found = [c for c in columns if c == given] or [c for c in columns if c.lower() == given.lower()]
    if len(found) == 1:
        return found[0]
    if found:
        raise ServedListsError(f"{kind} column {given!r} appears {len(found)} times in {path}")
    raise ServedListsError(f"{kind} column {given!r} ({setting(kind + '_col')}) is not in {path}; {columns_found(columns)}")


def _detected(columns: list[str], names: tuple[str, ...], kind: str, path: Path) -> str | None:
    """The one column whose name is one of ``names``; two such columns (``rank`` and
    ``Rank``, or ``rank`` and ``position``: a re-ranker's slot beside the model's rank,
    say) are ambiguous whichever names they spell, since the choice decides the lists."""
    return detected_column(columns, names, path, kind, kind + "_col", ServedListsError)


def choose_order(columns: list[str], path: Path, rank_col: str | None, score_col: str | None,
                 taken: tuple[str, ...]) -> OrderColumn:
    """The rank or score column of ``columns`` (module docstring); ``taken``: the id
    columns, which it may not be."""
    if rank_col is not None and score_col is not None:
        raise ServedListsError(
            f"pass {setting('rank_col')} or {setting('score_col')}, not both: a list is ordered by one column"
        )
    if rank_col is not None:
        order = OrderColumn("rank", _given(columns, rank_col, "rank", path))
    elif score_col is not None:
        order = OrderColumn("score", _given(columns, score_col, "score", path))
    else:
        rank = _detected(columns, RANK_NAMES, "rank", path)
        score = None if rank is not None else _detected(columns, SCORE_NAMES, "score", path)
        if rank is None and score is None:
            raise ServedListsError(
                f"cannot find a rank or score column in {path}; {columns_found(columns)}. "
                f"Pass {setting('rank_col')} NAME (lower first) or {setting('score_col')} NAME (higher first)"
            )
        order = OrderColumn("rank", rank) if rank is not None else OrderColumn("score", str(score))
    if order.name in taken:
        raise ServedListsError(f"the {order.kind} column of {path} is {order.name!r}, which is also an id column")
    return order


def order_keys(values: pa.Array, order: OrderColumn, path: Path, first_row: int) -> np.ndarray:
    """The sort keys of one batch: int64 ranks or float64 scores, checked (module
    docstring); ``first_row``: the data row (from 1) of ``values[0]``, for messages."""
    if pa.types.is_dictionary(values.type):
        values = values.dictionary_decode()
    # CSV cells NA, NaN, null... are read as missing, as they are in an id column.
    problems: list[tuple[np.ndarray, str]] = [(_mask(values.is_null()), "is empty (no value, or NA/NaN/null)")]
    t = values.type
    if pa.types.is_integer(t):
        keys = np.asarray(values.fill_null(0).to_numpy(zero_copy_only=False))
        if order.kind == "rank" and t == pa.uint64():
            problems.append((keys > np.iinfo(np.int64).max, "is beyond int64"))
        elif order.kind == "rank" and pa.types.is_signed_integer(t):
            problems.append((keys < 0, "is negative"))
        floats = keys.astype(np.float64)
    elif pa.types.is_floating(t) or pa.types.is_decimal(t):
        floats = np.asarray(values.cast(pa.float64()).fill_null(0.0).to_numpy(zero_copy_only=False))
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        floats, not_number = _text_numbers(values)
        problems.append((not_number, "is not a number"))
    else:
        rule = "whole numbers" if order.kind == "rank" else "numbers"
        raise ServedListsError(f"{order.kind} column {order.name!r} of {path} has type {t}; {order.kind}s must be {rule}")
    if not pa.types.is_integer(t):
        problems.append((np.isnan(floats), "is not a number (NaN)"))
        if order.kind == "rank":
            problems += [
                (floats < 0, "is negative"),
                (np.isinf(floats) | (np.floor(floats) != floats), "is not a whole number"),
                (np.abs(floats) >= EXACT_FLOAT_RANK, "is 2**53 or more (too large to be an exact rank)"),
            ]
    _refuse(problems, order, path, first_row)
    if order.kind == "score":
        return floats
    if pa.types.is_integer(t):
        return keys.astype(np.int64)
    return floats.astype(np.int64)


def _mask(arr: pa.Array) -> np.ndarray:
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=bool)


def _text_numbers(values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(float64 value of each cell, mask of non-empty cells that are not a number).

    pyarrow's own casts accept more than numbers (``0x10`` as an integer), so cells are
    matched against a number's spelling first; the others become NaN here and an error
    in :func:`_refuse`.
    """
    text = pc.utf8_trim_whitespace(values)
    number = pc.or_(pc.match_substring_regex(text, _NUMBER),
                    pc.match_substring_regex(text, _SPECIAL, ignore_case=True))
    number = pc.fill_null(number, True)  # empty cells are reported as empty
    safe = pc.fill_null(pc.if_else(number, text, pa.scalar("nan")), "0")
    floats = np.asarray(safe.cast(pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64)
    return floats, ~_mask(number)


def _refuse(problems: list[tuple[np.ndarray, str]], order: OrderColumn, path: Path, first_row: int) -> None:
    """Raise for the first problem found, naming its first data rows."""
    rule = (
        "ranks must be whole numbers >= 0 (positions from 0 or 1, lower first)"
        if order.kind == "rank" else "scores must be numbers (higher first)"
    )
    for bad, why in problems:
        rows = np.flatnonzero(bad)
        if rows.size:
            raise ServedListsError(
                f"{order.kind} column {order.name!r} of {path}: data row {first_row + int(rows[0])} {why}"
                + (f" (rows {first_rows(rows + first_row)})" if rows.size > 1 else "")
                + f"; {rule}"
            )
