"""Exposure measures over top-K lists: head share, ARP, APLT, Gini, coverage, novelty.

Every measure is a small object built once from the training statistics (the LensKit
habit) with a ``label`` and a ``measure(lists)`` method. ``lists`` is the
``(n_queries, K)`` int matrix of item *rows* a scoring served; ``-1`` marks an empty slot
(FAISS's convention when fewer than K items qualify, and the way to pass lists shorter
than K). All work is vectorised over that matrix.

The report's list measures are declared (name, label, definition) and registered in
:mod:`auditor.metrics.builtin_measures` and bound to one audit in
:mod:`auditor.metrics.list_measures`; a plugin's list measure gets the same
:class:`ListContext` and :class:`Slots`.

The defaults are the definitions in ``docs/measures.md`` (the ones the report uses). Libraries disagree on
several conventions, so each alternative is a constructor parameter and the published
values of RecBole, Evidently and RecTools can be reproduced (``tests/test_metrics_exposure.py``):

========================  ==================================  ===============================
measure                   popaudit default                    alternatives
========================  ==================================  ===============================
ARP                       cold items count with popularity 0  ``cold="drop"`` with popularity =
                          (RecBole, RecTools)                 distinct users (Evidently)
APLT (long tail)          tail = items outside the short      ``bottom_fraction=f``: the f
                          head holding 80% of interactions    least popular items (RecBole's
                                                              TailPercentage); ``cold="drop"``
Gini                      exposure over the whole catalogue,  ``over="recommended"``,
                          never-shown items count 0 (RecBole) ``unbiased=True`` (Evidently)
coverage                  distinct recommended / catalogue    ``trained=mask`` (Evidently:
                                                              among items seen in training)
novelty                   cold items capped at 1 user         ``cold="drop"`` (Evidently)
========================  ==================================  ===============================
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

from auditor.errors import setting
from auditor.loading.counts_only import counts_only
from auditor.plugin_api import ListContext, Slots, as_slots, exposure_counts  # re-exported: where measures have always found them
from auditor.metrics.popularity_sets import bottom_tail_mask, head_mask, short_head_mask

ColdPolicy = Literal["zero", "drop"]
GiniScope = Literal["catalogue", "recommended"]

OVERLAP_DEFINITION = (
    "overlap_dot_cosine: mean over queries of |dot list ∩ cosine list| / the filled slots of the shorter list "
    "(K unless a query has fewer candidates); queries with an empty list left out"
)


def _nanmean(values: np.ndarray) -> float:
    finite = values[~np.isnan(values)]
    return float(finite.mean()) if finite.size else math.nan


def gini_index(counts: np.ndarray, over: GiniScope = "catalogue", unbiased: bool = False) -> float:
    """Gini index of exposure ``counts`` (one per item).

    ``over="catalogue"`` keeps never-shown items as zeros (popaudit, RecBole);
    ``"recommended"`` keeps only items shown at least once (Evidently). ``unbiased``
    divides by n-1 instead of n (Evidently's small-sample form). No exposure: NaN.
    """
    x = np.asarray(counts, dtype=np.float64)
    if over == "recommended":
        x = x[x > 0]
    n = x.shape[0]
    total = x.sum()
    if n == 0 or total <= 0:
        return math.nan
    if unbiased and n == 1:
        return math.nan
    x = np.sort(x)
    weights = 2.0 * np.arange(1, n + 1) - n - 1
    return float((weights * x).sum() / ((n - 1 if unbiased else n) * total))


class HeadShare:
    """Share of filled recommended slots taken by the head (see :func:`head_mask`)."""

    def __init__(self, popularity: np.ndarray, percent: float) -> None:
        self.percent = percent
        self.label = f"head_share_{percent:g}pct"
        self.mask = head_mask(popularity, percent)
        self.n_items = int(self.mask.shape[0])

    def measure(self, lists: np.ndarray | Slots) -> float:
        """Head slots / filled slots over all queries (NaN when no slot is filled)."""
        slots = as_slots(lists, self.n_items)
        if slots.all_valid:  # no empty slot to mask out
            filled, head = int(slots.lists.size), int(self.mask[slots.lists].sum())
        else:
            filled, head = int(slots.valid.sum()), int((self.mask[slots.safe] & slots.valid).sum())
        if filled == 0:
            return math.nan
        return float(head / filled)


class AvgRecPopularity:
    """ARP: mean over queries of the mean popularity of each list's items.

    ``cold="zero"`` (default): items without training interactions count 0 (RecBole
    AveragePopularity, RecTools AvgRecPopularity). ``cold="drop"``: they are left out of
    the list mean, and lists with no warm item out of the query mean (Evidently).
    """

    label = "arp"

    def __init__(self, popularity: np.ndarray, cold: ColdPolicy = "zero") -> None:
        self.popularity = np.asarray(popularity, dtype=np.float64)
        self.cold = cold
        self.n_items = int(self.popularity.shape[0])

    def per_list(self, lists: np.ndarray | Slots) -> np.ndarray:
        """ARP of each query's list (NaN for a list with no counted item)."""
        slots = as_slots(lists, self.n_items)
        include = self.popularity > 0 if self.cold == "drop" else None
        return slots.per_list_mean(self.popularity, include)

    def measure(self, lists: np.ndarray | Slots) -> float:
        """Mean of :meth:`per_list` over queries whose list counts at least one item."""
        return _nanmean(self.per_list(lists))


class LongTailShare:
    """APLT: mean over queries of the share of long-tail items in each list.

    Default: the long tail is everything outside the short head (the most popular items
    holding ``head_mass`` of the popularity mass, :func:`short_head_mask`). With
    ``bottom_fraction`` the tail is instead that fraction of least popular items
    (:func:`bottom_tail_mask`; ``cold="drop"`` keeps cold items out of the ranking).
    """

    label = "aplt"

    def __init__(
        self,
        popularity: np.ndarray,
        head_mass: float = 0.8,
        bottom_fraction: float | None = None,
        cold: Literal["include", "drop"] = "include",
    ) -> None:
        popularity = np.asarray(popularity)
        if bottom_fraction is None:
            self.tail = ~short_head_mask(popularity, head_mass)
        else:
            self.tail = bottom_tail_mask(popularity, bottom_fraction, cold)
        self.n_items = int(popularity.shape[0])

    def per_list(self, lists: np.ndarray | Slots) -> np.ndarray:
        """Long-tail share of each list (NaN for an empty list)."""
        return as_slots(lists, self.n_items).per_list_mean(self.tail)  # bool: 1 per tail slot

    def measure(self, lists: np.ndarray | Slots) -> float:
        """Mean of :meth:`per_list` over non-empty lists."""
        return _nanmean(self.per_list(lists))


class GiniIndex:
    """Gini index of the exposure counts the lists produce (see :func:`gini_index`)."""

    label = "gini"

    def __init__(self, n_items: int, over: GiniScope = "catalogue", unbiased: bool = False) -> None:
        self.n_items = n_items
        self.over: GiniScope = over
        self.unbiased = unbiased

    def measure(self, lists: np.ndarray | Slots) -> float:
        """Gini of the exposure counts (NaN when nothing is shown)."""
        return gini_index(as_slots(lists, self.n_items).counts, self.over, self.unbiased)


class ItemCoverage:
    """Distinct recommended items / catalogue size.

    With ``trained`` (a boolean mask of items seen in training) it is the share of
    trained items recommended, ignoring recommended cold items (Evidently's convention).
    """

    label = "coverage"

    def __init__(self, n_items: int, trained: np.ndarray | None = None) -> None:
        self.n_items = n_items
        self.trained = None if trained is None else np.asarray(trained, dtype=bool)

    def measure(self, lists: np.ndarray | Slots) -> float:
        """Coverage in [0, 1] (NaN for an empty catalogue)."""
        shown = as_slots(lists, self.n_items).counts > 0
        if self.trained is None:
            return float(shown.sum() / self.n_items) if self.n_items else math.nan
        n_trained = int(self.trained.sum())
        return float((shown & self.trained).sum() / n_trained) if n_trained else math.nan


class Novelty:
    """Mean self-information −log2(users(i)/n_users) of the recommended items.

    ``user_counts``: distinct training users per item; ``n_users``: distinct users in the
    whole training log (not only the queried ones), so the scale does not depend on the
    query sample.

    ``cold="cap"`` (default): an item no training user saw is scored as seen by one user,
    the finite maximum log2(n_users), so cold items stay in the mean. ``cold="drop"``:
    such items are left out (Evidently's NoveltyMetric).
    """

    label = "novelty"

    def __init__(
        self, user_counts: np.ndarray, n_users: int, cold: Literal["cap", "drop"] = "cap"
    ) -> None:
        if n_users < 1:
            raise ValueError(f"n_users must be at least 1, got {n_users}")
        counts = np.asarray(user_counts, dtype=np.float64)
        self.cold = cold
        self.warm = counts > 0
        self.information = -np.log2(np.maximum(counts, 1.0) / n_users)
        self.n_items = int(counts.shape[0])

    def per_list(self, lists: np.ndarray | Slots) -> np.ndarray:
        """Mean self-information of each list (NaN for a list with no counted item)."""
        include = self.warm if self.cold == "drop" else None
        return as_slots(lists, self.n_items).per_list_mean(self.information, include)

    def measure(self, lists: np.ndarray | Slots) -> float:
        """Mean of :meth:`per_list` over queries whose list counts at least one item."""
        return _nanmean(self.per_list(lists))


MARK_FACTOR = 32
""":func:`shared_counts` marks each row's items in an (n_rows, n_items) table when it holds
at most this many cells per slot of the two matrices (a small catalogue and long lists),
else it sorts each row."""


def shared_counts(a: np.ndarray, b: np.ndarray, n_items: int | None = None) -> np.ndarray:
    """|a_q ∩ b_q| for each query q of two list matrices with the same number of rows.

    Each row holds distinct items, so after concatenating a row of ``a`` with the same
    row of ``b`` and sorting, every adjacent equal pair is one shared item. Empty slots
    (-1) get distinct negative fillers so they never match. With ``n_items`` (every item
    row below it) and a table of rows x items no larger than :data:`MARK_FACTOR` cells per
    slot, each row's items of ``a`` are marked and those of ``b`` looked up instead: the
    same counts, without the sort.
    """
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"list matrices differ in rows: {a.shape} vs {b.shape}")
    if n_items is not None and a.shape[0] * (n_items + 1) <= MARK_FACTOR * (a.size + b.size):
        return _marked_counts(a, b, n_items)
    filler = -1 - np.arange(a.shape[1] + b.shape[1], dtype=np.int64)
    a = np.where(a >= 0, a, filler[: a.shape[1]])
    b = np.where(b >= 0, b, filler[a.shape[1] :])
    both = np.sort(np.concatenate([a, b], axis=1), axis=1)
    return (both[:, 1:] == both[:, :-1]).sum(axis=1)


def slot_cells(lists: np.ndarray, n_items: int) -> np.ndarray:
    """int64 (n_rows, width): each slot's cell in a row-major table of rows x (n_items + 1)
    marks, one row per list row; an empty slot (-1) falls on its row's extra last cell."""
    stride = n_items + 1
    offsets = np.arange(0, lists.shape[0] * stride, stride, dtype=np.int64)[:, None]
    cells: np.ndarray = np.where(lists >= 0, lists, n_items) + offsets
    return cells


def _marked_counts(a: np.ndarray, b: np.ndarray, n_items: int) -> np.ndarray:
    """:func:`shared_counts` through a table of each row's items of ``a``; an empty slot
    marks and reads the row's extra cell, which is cleared between."""
    marked = np.zeros(a.shape[0] * (n_items + 1), dtype=bool)
    marked[slot_cells(a, n_items)] = True
    marked[n_items :: n_items + 1] = False  # the empty slots' cells
    return marked[slot_cells(b, n_items)].sum(axis=1)


def per_query_overlap(a: np.ndarray, b: np.ndarray, n_items: int | None = None) -> np.ndarray:
    """|a_q ∩ b_q| / K for each query q of two (n_queries, K) list matrices (``n_items``:
    see :func:`shared_counts`)."""
    if np.shape(a) != np.shape(b):
        raise ValueError(f"list matrices differ in shape: {np.shape(a)} vs {np.shape(b)}")
    k = np.shape(a)[1]
    if k == 0:
        return np.zeros(np.shape(a)[0])
    return shared_counts(a, b, n_items) / k


def overlap(a: np.ndarray, b: np.ndarray, n_items: int | None = None) -> float:
    """Mean over queries of |a ∩ b| / K (:data:`OVERLAP_DEFINITION`; ``n_items``: see
    :func:`shared_counts`)."""
    per_query = per_query_overlap(a, b, n_items)
    return float(per_query.mean()) if per_query.size else math.nan


def filled_overlap(a: np.ndarray, b: np.ndarray, n_items: int | None = None) -> float:
    """Mean over queries of |a ∩ b| / min(|a|, |b|), |·| a list's filled slots, over the
    queries whose two lists are both non-empty (NaN: none) (:data:`OVERLAP_DEFINITION`):
    two scorings serving the same candidates agree fully when a query has fewer than K of
    them, where / K would read less (``n_items``: see :func:`shared_counts`)."""
    if np.shape(a) != np.shape(b):
        raise ValueError(f"list matrices differ in shape: {np.shape(a)} vs {np.shape(b)}")
    shorter = np.minimum((np.asarray(a) >= 0).sum(axis=1), (np.asarray(b) >= 0).sum(axis=1))
    both = shorter > 0
    if not both.any():
        return math.nan
    return float((shared_counts(a, b, n_items)[both] / shorter[both]).mean())


def popular_order(popularity: np.ndarray, k: int, tie_rank: np.ndarray | None = None) -> np.ndarray:
    """The k most popular item rows, the most-popular scoring's list; ties by ``tie_rank``
    (:func:`id_order`: the raw ids' order, so one model's list is the same whatever order
    its file stores the rows in), else by row."""
    negative = -np.asarray(popularity, dtype=np.float64)
    k = min(k, negative.shape[0])
    if k == 0:
        return np.empty(0, dtype=np.int64)
    # Only items at least as popular as the k-th (ties included) can be in the list: O(n).
    rows = np.flatnonzero(negative <= np.partition(negative, k - 1)[k - 1])
    ties = rows if tie_rank is None else tie_rank[rows]
    return rows[np.lexsort((ties, negative[rows]))][:k].astype(np.int64)


def canonical_rows(item_ids: np.ndarray | None) -> np.ndarray | None:
    """The rows in the order of their raw item ids (None: no ids, the rows are the ids, or
    ids that do not sort, such as numbers mixed with text): one model's canonical order,
    whatever order its file stores the rows in. Users' raw ids too (the trade-off's resamples)."""
    if item_ids is None:
        return None
    try:
        return np.argsort(np.asarray(item_ids), kind="stable")
    except TypeError:
        return None


def id_order(item_ids: np.ndarray | None) -> np.ndarray | None:
    """Each row's rank in :func:`canonical_rows` (None where that is None)."""
    order = canonical_rows(item_ids)
    if order is None:
        return None
    rank = np.empty(order.shape[0], dtype=np.int64)
    rank[order] = np.arange(order.shape[0], dtype=np.int64)
    return rank


def novelty_unmeasured(user_counts: np.ndarray | None, n_users: int | None, origin: str) -> str | None:
    """Why :class:`ExposureMeasures` leaves novelty None (None: it is measured); ``origin``
    (``log``, ``checkpoint``, ``frequencies``): where the counts came from, for the remedy."""
    if user_counts is not None and n_users:
        return None
    log = setting("interactions")
    remedy = {"log": f"the log has no user column: pass {setting('user_col')} NAME",
              "checkpoint": ("the checkpoint records interactions per item, not every (user, item) training pair: pass "
                             f"the log it was trained on with {log} (its training part only, where it held some out)"),
              "frequencies": counts_only()}
    missing = ("users(i) and n_users (the distinct training users of each item and of the whole log)"
               if user_counts is None else "n_users (the distinct training users of the whole log)")
    return f"novelty, -log2(users(i)/n_users), needs {missing}; {remedy[origin]}"


__all__ = [
    "AvgRecPopularity", "GiniIndex", "HeadShare", "ItemCoverage", "ListContext", "LongTailShare", "Novelty", "Slots",
    "as_slots", "exposure_counts", "filled_overlap", "gini_index", "novelty_unmeasured", "overlap", "per_query_overlap", "popular_order",
    "shared_counts",
]  # fmt: skip
