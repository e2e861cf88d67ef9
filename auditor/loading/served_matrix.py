"""Records of served lists (user, item, rank or score) into the (users, K) matrix of item
rows that every list measure takes, with the policies of :mod:`auditor.loading.served_lists`.

All steps are sorts and scatters over the records (no loop per user or per item):

* an item twice in one user's list is refused, naming the data rows (a list shows an
  item once; repeats would count its exposure twice);
* each list is its records ordered by rank (lower first) or score (higher first), ties
  broken by the file's own item ids (lower first: numbers numerically, text as text, the
  order of the item codes), so one file gives one order whatever its items are numbered
  by (a model's table rows or the lists' catalogue): an item without a row (-1) keeps its
  place, its slot empty, and the slots it fills are counted (:attr:`Matrix.rowless`, which
  the lists' grade reads by raw id); tied lists are counted;
* ranks are compacted: only their order counts, so ranks 1, 2, 4 fill slots 1, 2, 3 and
  the list is counted as having a gap. A rank is never a size or an index: the matrix
  is as wide as the longest list (or ``max_k``), whatever the ranks say;
* shorter lists are padded with -1 (an empty slot, which no measure counts);
* the matrix must fit the memory budget (``max_memory``, else half the available memory).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from auditor.config import format_size
from auditor.errors import ServedListsError, setting
from auditor.loading.served_order import OrderKind
from auditor.loading.validation import first_rows
from auditor.memory import memory_budget

_INT64_MAX = np.iinfo(np.int64).max


@dataclass(frozen=True)
class Records:
    """The rows of a served-lists file that have both ids, as codes."""

    user_codes: np.ndarray
    """int64: each row's user, an index into the file's distinct users (sorted)."""
    item_codes: np.ndarray
    """int64: each row's item, an index into the file's distinct items."""
    keys: np.ndarray
    """int64 ranks or float64 scores, one per row."""
    kind: OrderKind
    n_users: int
    dropped: np.ndarray
    """Sorted 0-based positions, among all data rows, of the rows left out for an empty id."""

    def data_rows(self, at: np.ndarray) -> np.ndarray:
        """Data rows (from 1, after any header) of the records at positions ``at``.

        ``dropped[i] - i`` rows were kept before the i-th dropped one, so the dropped
        rows before record j are those with ``dropped[i] - i <= j``.
        """
        shifted = self.dropped - np.arange(self.dropped.size)
        return np.asarray(at) + np.searchsorted(shifted, at, side="right") + 1


@dataclass(frozen=True)
class Matrix:
    """The lists and what building them counted."""

    lists: np.ndarray
    """int64 (n_users, K): item rows best first, -1 for an empty slot."""
    longest: int
    """Items in the longest list (before ``max_k``)."""
    rank_base: int | None
    """0 or 1: the lowest rank of the file is 0 (0-based), else 1; None for scores."""
    n_gap_lists: int = 0
    n_tied_lists: int = 0
    n_short_lists: int = 0
    n_truncated_lists: int = 0
    rowless: tuple[np.ndarray, np.ndarray, np.ndarray] = (np.empty(0, np.int64),) * 3
    """The slots left empty for items without a row: (list row, position, item code) of each."""


def build_lists(
    records: Records, code_rows: np.ndarray, path: Path, *, user_ids: np.ndarray, item_ids: np.ndarray,
    max_k: int | None = None, max_memory: int | None = None,
) -> Matrix:
    """The lists of ``records``, items mapped to rows by ``code_rows`` (row of each item
    code, -1: none); ``user_ids``/``item_ids``: the raw ids of the codes (for messages)."""
    refuse_repeats(records, path, user_ids, item_ids)
    rows = code_rows[records.item_codes]
    users = records.user_codes
    primary = records.keys if records.kind == "rank" else -records.keys.astype(np.float64)
    # Ties: lower item id first (the codes are the file's distinct ids, sorted), never the
    # row, which differs by route (a RecBole table numbers items by first appearance), nor
    # whether it has one: one file, one top K with a model or without (QA "Served N3").
    order = _list_order(users, records.n_users, primary, records.item_codes)
    users, rows, keys, codes = users[order], rows[order], primary[order], records.item_codes[order]
    counts = np.bincount(users, minlength=records.n_users)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    position = np.arange(users.size) - starts[users]
    following = position > 0  # same user as the record before it
    same_key = np.zeros(users.size, dtype=bool)
    same_key[1:] = following[1:] & (keys[1:] == keys[:-1])
    tied = np.bincount(users[same_key], minlength=records.n_users) > 0
    longest = int(counts.max()) if counts.size else 0
    width = longest if max_k is None else min(longest, max_k)
    _check_budget(records.n_users, width, longest, max_memory, path, max_k is None)
    lists = np.full((records.n_users, width), -1, dtype=np.int64)
    kept = position < width
    lists[users[kept], position[kept]] = rows[kept]
    empty = kept & (rows < 0)
    base, gaps = None, 0
    if records.kind == "rank":
        base, gaps = _gaps(records.keys, users, keys, same_key, counts, starts)
    return Matrix(
        lists=lists, longest=longest, rank_base=base, n_gap_lists=gaps, n_tied_lists=int(tied.sum()),
        n_short_lists=int((counts < width).sum()), n_truncated_lists=int((counts > width).sum()),
        rowless=(users[empty], position[empty], codes[empty]),
    )


def _list_order(users: np.ndarray, n_users: int, primary: np.ndarray, secondary: np.ndarray) -> np.ndarray:
    """Positions of the records by user, then ``primary``, then ``secondary`` (a stable lexsort).

    Ranks whose span fits pack with the user and the row into one int64 key, sorted once;
    otherwise pyarrow's multi-key sort (np.lexsort's three stable passes took 7 of the 8
    seconds of 5M rows, pyarrow's sort about a third of that).
    """
    if primary.dtype.kind == "i" and primary.size:
        low = int(primary.min())
        span, n_secondary = int(primary.max()) - low + 1, int(secondary.max()) + 1
        if n_users * span * n_secondary < _INT64_MAX:
            return np.argsort((users * span + (primary - low)) * n_secondary + secondary, kind="stable")
    table = pa.table({"u": users, "p": primary + 0.0 if primary.dtype.kind == "f" else primary, "s": secondary})
    order = pc.sort_indices(table, sort_keys=[("u", "ascending"), ("p", "ascending"), ("s", "ascending")])
    return np.asarray(order.to_numpy(zero_copy_only=False), dtype=np.int64)


def _gaps(all_keys: np.ndarray, users: np.ndarray, keys: np.ndarray, same_key: np.ndarray, counts: np.ndarray,
          starts: np.ndarray) -> tuple[int, int]:
    """(rank base, lists whose ranks skip a position): a list of d distinct ranks has no
    gap when they are base, base + 1, ..., base + d - 1, i.e. its highest is base + d - 1."""
    base = 0 if all_keys.size and int(all_keys.min()) == 0 else 1
    distinct = np.bincount(users[~same_key], minlength=counts.size)
    highest = keys[starts + counts - 1]
    return base, int((highest - base >= distinct).sum())  # no overflow: highest < 2**63, base >= 0


def refuse_repeats(records: Records, path: Path, user_ids: np.ndarray, item_ids: np.ndarray) -> None:
    """Raise ServedListsError when an item appears twice in one user's list, naming the
    data rows (integer ids are quoted; text is not: :mod:`auditor.loading.messages`)."""
    n = records.user_codes.size
    if n < 2:
        return
    n_items = int(records.item_codes.max()) + 1
    if records.n_users * n_items < _INT64_MAX:  # one sort of one key, no positions, while nothing repeats
        pairs = np.sort(records.user_codes * n_items + records.item_codes)
        if not (pairs[1:] == pairs[:-1]).any():
            return
    order = np.lexsort((records.item_codes, records.user_codes))
    u, i = records.user_codes[order], records.item_codes[order]
    repeat = np.flatnonzero((u[1:] == u[:-1]) & (i[1:] == i[:-1]))
    if repeat.size == 0:
        return
    first = int(order[np.concatenate((repeat, repeat + 1))].min())  # the earliest record of any repeat
    user, item = records.user_codes[first], records.item_codes[first]
    at = np.flatnonzero((records.user_codes == user) & (records.item_codes == item))
    n_lists = np.unique(u[repeat]).size
    raise ServedListsError(
        f"{path} lists item{_quoted(item_ids[item])} twice for user{_quoted(user_ids[user])} (data rows "
        f"{first_rows(records.data_rows(at))}; {repeat.size:,} repeats in {n_lists:,} list{'s' * (n_lists > 1)}): "
        "a served list shows each item once, so remove the repeats (a repeated item would count its exposure twice)"
    )


def _quoted(value: object) -> str:
    return f" {value.item()!r}" if isinstance(value, np.integer) else ""


def _check_budget(n_users: int, width: int, longest: int, max_memory: int | None, path: Path, uncut: bool) -> None:
    """Refuse a matrix beyond the memory budget (one long list among short ones makes it wide)."""
    need = n_users * width * 8
    budget = memory_budget(max_memory)
    if budget is None or need <= budget:
        return
    remedy = (
        f"read them with max_k, the largest cut-off measured ({setting('ks')}), or raise {setting('max_memory')}"
        if uncut else f"measure at smaller cut-offs ({setting('ks')}) or raise {setting('max_memory')}"
    )
    raise ServedListsError(
        f"the served lists of {path} need {format_size(need)} as a {n_users:,} users x {width:,} slots matrix "
        f"(the longest list holds {longest:,} items), more than the memory budget of {format_size(budget)} "
        f"({setting('max_memory')}); {remedy}"
    )
