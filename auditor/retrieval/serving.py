"""What a query may be served: each query's excluded rows (its training items) as CSR,
removed from ranked candidates, and the most-popular list under the same exclusions.

Every scoring competes for the same candidates: exact scorings never rank an excluded
row (:mod:`auditor.retrieval.scorings`), approximate ones fetch extra candidates and drop
excluded ones here, and the popular list is the most popular rows a query has not been
excluded from.
"""

from __future__ import annotations

import bisect
from typing import Any

import numpy as np

from auditor.metrics.list_measures import ExposureMeasures

Exclusions = tuple[np.ndarray, np.ndarray]
"""CSR (indptr int64 (n_queries + 1,), rows int64) of each query's excluded table rows."""
FILTER_BLOCK = 1024
"""Queries per block when candidates are filtered (bounds the candidate matrix)."""


def max_excluded(exclude: Exclusions | None) -> int:
    """The most rows any one query has excluded (0 without exclusions)."""
    return 0 if exclude is None else int(np.diff(exclude[0]).max(initial=0))


SATURATED_SHARE = 0.5
"""A K grades (or clears) the harm only where fewer than this share of the queries with a
candidate are saturated (K holds every candidate of theirs: any scoring serves them the same
items, which draws the dot/cosine ratio toward 1); at this share or more it is saturated,
not measured. The one policy: :mod:`auditor.harm` grades with it, and the retrieval records
the largest K it lets grade (``Retrieval.graded_up_to``)."""


def saturated_at(n_saturated: int, n_queries: int) -> bool:
    """Whether a K that saturates ``n_saturated`` of ``n_queries`` queries with a candidate
    measures no harm (:data:`SATURATED_SHARE`): the one policy ``Retrieval.saturated`` records."""
    return n_saturated > 0 and n_saturated >= SATURATED_SHARE * n_queries


def candidate_counts(n_items: int, n_queries: int, exclude: Exclusions | None) -> np.ndarray:
    """(n_queries,) int64: each query's candidates, the catalogue less the rows it excludes."""
    return np.full(n_queries, n_items, dtype=np.int64) if exclude is None else n_items - np.diff(exclude[0])


def saturation(ks: list[int], n_items: int, n_queries: int, exclude: Exclusions | None) -> dict[str, Any]:
    """The retrieval's saturation fields: ``n_saturated`` (K -> the queries K saturates: it
    reaches their candidate count, at least 1, so their list holds every candidate under any
    scoring), ``n_no_candidates`` (queries trained on every item: their lists are empty under
    every scoring, so they add no slot, saturate no K and count in no share) and
    ``graded_up_to`` (the largest K :func:`saturated_at` lets grade; None where none does)."""
    candidates = np.sort(candidate_counts(n_items, n_queries, exclude))
    having = candidates[candidates > 0]
    counted = {k: int(np.searchsorted(having, k, side="right")) for k in ks}
    # The policy is monotone in the count: the first count that saturates (found by bisection)
    # is reached at that query's candidate count, so the K one below it is the largest that grades.
    first = bisect.bisect_left(range(1, having.size + 1), True, key=lambda m: saturated_at(m, having.size)) + 1
    graded = int(having[first - 1]) - 1 if having.size else 0
    return {"n_saturated": counted, "n_no_candidates": int(candidates.size - having.size),
            "graded_up_to": graded if graded >= 1 else None}


def subset_exclusions(exclude: Exclusions | None, queries: np.ndarray) -> Exclusions | None:
    """The exclusions of the queries at positions ``queries`` (in that order)."""
    if exclude is None:
        return None
    indptr, rows = exclude
    starts, counts = indptr[queries], indptr[queries + 1] - indptr[queries]
    new = np.zeros(queries.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=new[1:])
    at = np.repeat(starts - new[:-1], counts) + np.arange(int(new[-1]), dtype=np.int64)
    return new, rows[at]


def shard_exclusions(exclude: Exclusions | None, start: int, stop: int) -> Exclusions | None:
    """The exclusions that fall in table rows [start, stop), numbered from ``start``."""
    if exclude is None:
        return None
    indptr, rows = exclude
    inside = (rows >= start) & (rows < stop)
    kept_before = np.concatenate(([0], np.cumsum(inside, dtype=np.int64)))
    return kept_before[indptr], rows[inside] - start


def filter_excluded(candidates: np.ndarray, exclude: Exclusions | None, n_items: int, k: int) -> np.ndarray:
    """(n_queries, k): each query's candidate rows (best first; -1 empty) without its
    excluded rows, in the same order; -1 where fewer than ``k`` remain."""
    n_queries = candidates.shape[0]
    out = np.full((n_queries, k), -1, dtype=np.int64)
    if exclude is None:
        width = min(k, candidates.shape[1])
        out[:, :width] = candidates[:, :width]
        return out
    indptr, rows = exclude
    # Excluded (query, row) pairs as sorted codes; a candidate is excluded when found.
    codes = np.sort(np.repeat(np.arange(n_queries, dtype=np.int64), np.diff(indptr)) * n_items + rows)
    for start in range(0, n_queries, FILTER_BLOCK):
        stop = min(start + FILTER_BLOCK, n_queries)
        block = np.asarray(candidates[start:stop], dtype=np.int64)
        keyed = np.arange(start, stop, dtype=np.int64)[:, None] * n_items + np.maximum(block, 0)
        at = np.minimum(np.searchsorted(codes, keyed), max(codes.size - 1, 0))
        dropped = (codes[at] == keyed) if codes.size else np.zeros(keyed.shape, dtype=bool)
        dropped |= block < 0
        # Stable: kept candidates stay in rank order, dropped ones move last.
        keep = np.argsort(dropped, axis=1, kind="stable")[:, :k]
        picked = np.take_along_axis(block, keep, axis=1)
        picked[np.take_along_axis(dropped, keep, axis=1)] = -1
        out[start:stop, : picked.shape[1]] = picked
    return out


def popular_lists(measures: ExposureMeasures, k: int, n_queries: int, exclude: Exclusions | None) -> np.ndarray:
    """(n_queries, k): the most popular rows (ties by row) each query was not excluded
    from; -1 where fewer remain."""
    if exclude is None:
        return np.broadcast_to(measures.popular_list(k), (n_queries, min(k, measures.n_items)))
    order = measures.popular_list(min(measures.n_items, k + max_excluded(exclude)))
    return skip_excluded(order, exclude, measures.n_items, k)


def skip_excluded(order: np.ndarray, exclude: Exclusions, n_items: int, k: int) -> np.ndarray:
    """(n_queries, k): the first ``k`` rows of the one ranking ``order`` that each query was
    not excluded from (-1 where fewer remain), without a candidate matrix.

    With a query's excluded positions in ``order`` sorted, e_0 < e_1 < ..., the rows
    kept before e_i number a_i = e_i - i (non-decreasing), so the j-th kept position is
    j + #{i : a_i <= j}: one sort of the excluded positions and one search per slot.
    """
    width = int(order.shape[0])
    n_queries = int(exclude[0].shape[0]) - 1
    if width == 0:
        return np.full((n_queries, k), -1, dtype=np.int64)
    rank = np.full(n_items, width, dtype=np.int64)
    rank[order] = np.arange(width, dtype=np.int64)
    indptr, rows = exclude
    owner = np.repeat(np.arange(n_queries, dtype=np.int64), np.diff(indptr))
    position = rank[rows]
    inside = position < width
    codes = np.sort(owner[inside] * width + position[inside])  # by query, then position
    owner, position = codes // width, codes % width
    first = np.searchsorted(owner, np.arange(n_queries, dtype=np.int64))
    before = position - (np.arange(codes.shape[0], dtype=np.int64) - first[owner])  # a_i, < width
    keys = owner * (width + 1) + before  # sorted: a_i never decreases within a query
    slots = np.arange(k, dtype=np.int64)
    base = np.arange(n_queries, dtype=np.int64)[:, None] * (width + 1)
    counted = np.searchsorted(keys, base + slots, side="right") - np.searchsorted(keys, base, side="left")
    at = slots + counted
    return np.where(at < width, order[np.minimum(at, width - 1)], -1).astype(np.int64)
