"""Held-out ranking accuracy of top-K lists: recall, NDCG, hit rate and MRR @K.

RecBole's definitions (docs/measures.md, "Held-out accuracy"), averaged over evaluated users.
For a user with held-out set H and a list ranked best first (rank r = 1, 2, ...):

- ``recall@K`` = hits in the first K / |H|;
- ``ndcg@K`` = DCG@K / IDCG@K, gain 1/log2(r + 1) per hit, IDCG over min(|H|, K) hits;
- ``hit_rate@K`` = 1 when any of the first K is a hit;
- ``mrr@K`` = 1 / rank of the first hit within K (0 without one).

Inputs: ``lists``, the ``(n_users, width)`` int matrix of item rows a scoring served
(``-1``: an empty slot, never a hit; ranks beyond ``width`` are empty too), and the
held-out sets as CSR, ``indptr`` (n_users + 1,) over ``items`` (item rows; a repeated
item counts once). A user without held-out items is not evaluated: callers drop them,
passing one is a ValueError. An item repeated within one list is a hit once, at its
first rank. A held-out entry flagged ``unhittable`` stays in |H| but no slot hits it
(a held-out repeat of a training pair under the seen-excluded convention,
:func:`auditor.evaluation.unhittable_repeats`). Hits are found for every list slot at once (no per-user Python loop): list
and held-out entries get keys ``user × m + code``, ``code`` the item's rank among the m
distinct held-out items of a block of users, so keys stay far below 2**63 whatever the
item rows are.

RecTools' NDCG divides by the IDCG of K hits unless ``divide_by_achievable=True``; its
Recall, HitRate and MRR agree with these (tests/test_metrics_accuracy.py shows both).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from auditor.result import RankingAccuracy

BLOCK_USERS = 1 << 16
"""Users whose hits are found together (bounds the temporaries to a few list blocks)."""
_KEY_LIMIT = 1 << 62
TABLE_ROWS = 1 << 24
"""Item rows below this are coded through a lookup table (at most 128 MiB), others by search."""


@dataclass(frozen=True)
class UserAccuracy:
    """Per-user values at one K, float64 arrays of shape (n_users,)."""

    recall: np.ndarray
    ndcg: np.ndarray
    hit_rate: np.ndarray
    mrr: np.ndarray

    def mean(self) -> RankingAccuracy:
        """The averages over users (RecBole's aggregation)."""
        return RankingAccuracy(
            recall=float(self.recall.mean()),
            ndcg=float(self.ndcg.mean()),
            hit_rate=float(self.hit_rate.mean()),
            mrr=float(self.mrr.mean()),
        )


@dataclass(frozen=True)
class HeldOutHits:
    """Which list slots hit the user's held-out set, and the size of each set."""

    hits: np.ndarray
    """bool (n_users, width): slot j of user u's list holds an item of H_u (first occurrence)."""
    n_relevant: np.ndarray
    """int64 (n_users,): |H_u|, distinct held-out items."""

    @property
    def n_users(self) -> int:
        return int(self.hits.shape[0])

    def at(self, k: int) -> UserAccuracy:
        """Per-user recall, NDCG, hit rate and MRR over the first ``k`` ranks."""
        if k < 1:
            raise ValueError(f"K must be at least 1, got {k}")
        hits = self.hits[:, : min(k, self.hits.shape[1])]
        cols = hits.shape[1]
        n_hits = hits.sum(axis=1, dtype=np.int64)
        relevant = self.n_relevant.astype(np.float64)
        gains = 1.0 / np.log2(np.arange(2, cols + 2, dtype=np.float64))
        dcg = hits @ gains if cols else np.zeros(hits.shape[0])
        ideal = np.concatenate(([0.0], np.cumsum(1.0 / np.log2(np.arange(2, k + 2, dtype=np.float64)))))
        idcg = ideal[np.minimum(self.n_relevant, k)]
        any_hit = n_hits > 0
        first = np.argmax(hits, axis=1) if cols else np.zeros(hits.shape[0], dtype=np.int64)
        return UserAccuracy(
            recall=n_hits / relevant,
            ndcg=np.asarray(dcg, dtype=np.float64) / idcg,
            hit_rate=any_hit.astype(np.float64),
            mrr=np.where(any_hit, 1.0 / (first + 1.0), 0.0),
        )

    def mean_at(self, k: int) -> RankingAccuracy:
        return self.at(k).mean()


def find_hits(
    lists: np.ndarray, indptr: np.ndarray, items: np.ndarray, unhittable: np.ndarray | None = None
) -> HeldOutHits:
    """The hit matrix of ``lists`` against the CSR held-out sets (module docstring);
    ``unhittable``: bool over ``items``, entries counted in |H| that no slot hits."""
    lists, indptr, items = _checked(lists, indptr, items)
    if unhittable is not None and np.shape(unhittable) != items.shape:
        raise ValueError(f"unhittable must flag each held-out item, got shape {list(np.shape(unhittable))}")
    hittable = np.ones(items.shape, dtype=bool) if unhittable is None else ~np.asarray(unhittable, dtype=bool)
    n_users, width = lists.shape
    hits = np.zeros((n_users, width), dtype=bool)
    n_relevant = np.zeros(n_users, dtype=np.int64)
    for start in range(0, n_users, BLOCK_USERS):
        stop = min(start + BLOCK_USERS, n_users)
        _block_hits(lists[start:stop], indptr[start : stop + 1], items, hits[start:stop], n_relevant[start:stop],
                    hittable)
    empty = np.flatnonzero(n_relevant == 0)
    if empty.size:
        raise ValueError(
            f"{empty.size} of {n_users} users have no held-out item (the first is user {int(empty[0])}); "
            "accuracy is defined over users with at least one, so drop them before measuring"
        )
    return HeldOutHits(hits=hits, n_relevant=n_relevant)


def ranking_accuracy(lists: np.ndarray, indptr: np.ndarray, items: np.ndarray, k: int | None = None) -> RankingAccuracy:
    """Mean recall, NDCG, hit rate and MRR @``k`` (default: the lists' width)."""
    lists = np.asarray(lists)
    return find_hits(lists, indptr, items).mean_at(k if k is not None else int(lists.shape[1]))


def accuracy_at(
    lists: np.ndarray, indptr: np.ndarray, items: np.ndarray, ks: tuple[int, ...] | list[int]
) -> dict[int, RankingAccuracy]:
    """Mean accuracy at every cut-off in ``ks``, from one hit matrix (ranks beyond the
    lists' width count as empty slots)."""
    found = find_hits(lists, indptr, items)
    return {int(k): found.mean_at(int(k)) for k in ks}


def _checked(lists: np.ndarray, indptr: np.ndarray, items: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The inputs as int64 arrays, their shapes and the CSR invariants checked."""
    lists, indptr, items = np.asarray(lists), np.asarray(indptr), np.asarray(items)
    if lists.ndim != 2:
        raise ValueError(f"lists must be a (n_users, K) matrix, got shape {list(lists.shape)}")
    for name, arr in (("lists", lists), ("indptr", indptr), ("held-out items", items)):
        if arr.size and arr.dtype.kind not in "iu":
            raise ValueError(f"{name} must hold integers, got {arr.dtype}")
    n_users = lists.shape[0]
    if indptr.shape != (n_users + 1,):
        raise ValueError(f"indptr must have n_users + 1 = {n_users + 1} entries, got shape {list(indptr.shape)}")
    indptr = indptr.astype(np.int64, copy=False)
    items = items.astype(np.int64, copy=False).ravel()
    if indptr[0] != 0 or indptr[-1] != items.size or np.any(np.diff(indptr) < 0):
        raise ValueError("indptr must start at 0, never decrease, and end at the number of held-out items")
    if items.size and int(items.min()) < 0:
        raise ValueError("held-out items must be table rows (>= 0)")
    return lists.astype(np.int64, copy=False), indptr, items


def _block_hits(
    lists: np.ndarray, indptr: np.ndarray, items: np.ndarray, hits: np.ndarray, n_relevant: np.ndarray,
    hittable: np.ndarray,
) -> None:
    """Fill ``hits`` and ``n_relevant`` (views) for one block of users (``hittable``: over every held-out item)."""
    n_block, width = lists.shape
    held = items[indptr[0] : indptr[-1]]
    if held.size == 0:
        return
    owner = np.repeat(np.arange(n_block, dtype=np.int64), np.diff(indptr))
    distinct = _distinct(held)
    m = int(distinct.size)
    if n_block * m >= _KEY_LIMIT:  # pragma: no cover - needs ~2**46 distinct held-out items per block
        raise ValueError("too many distinct held-out items to key a block of users")
    code = _coder(distinct)
    all_keys = owner * m + code(held)
    n_relevant[:] = np.bincount(_distinct(all_keys) // m, minlength=n_block)  # duplicates count once
    held_keys = _distinct(all_keys[hittable[indptr[0] : indptr[-1]]])
    if held_keys.size == 0:
        return
    flat_code = code(lists.ravel())
    slots = np.flatnonzero(flat_code >= 0)
    if slots.size == 0:
        return
    keys = (slots // width) * m + flat_code[slots]
    at = np.searchsorted(held_keys, keys)
    is_hit = at < held_keys.size
    is_hit[is_hit] = held_keys[at[is_hit]] == keys[is_hit]
    slots, keys = slots[is_hit], keys[is_hit]
    if slots.size == 0:
        return
    order = np.argsort(keys, kind="stable")  # an item repeated in a list hits once, first
    ordered = keys[order]
    first = slots[order[np.concatenate(([True], ordered[1:] != ordered[:-1]))]]
    hits[first // width, first % width] = True


def _distinct(values: np.ndarray) -> np.ndarray:
    """Sorted distinct values (a sort and a comparison: numpy's hashing ``unique`` is
    several times slower on these arrays)."""
    ordered = np.sort(values)
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))] if ordered.size else ordered


def _coder(distinct: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """values -> index in the sorted ``distinct`` (-1: not there): through a lookup table
    when the item rows are small enough for one (several times faster), else a binary search."""
    top = int(distinct[-1])
    if top < TABLE_ROWS:
        table = np.full(top + 2, -1, dtype=np.int64)  # the last entry answers every value outside
        table[distinct] = np.arange(distinct.size)

        def lookup(values: np.ndarray) -> np.ndarray:
            return table[np.where((values >= 0) & (values <= top), values, top + 1)]

        return lookup

    def search(values: np.ndarray) -> np.ndarray:
        at = np.minimum(np.searchsorted(distinct, values), distinct.size - 1)
        return np.where(distinct[at] == values, at, -1)

    return search
