"""Average ranks within bootstrap resamples held as multiplicities (how often each item
was drawn): a resample's ranks come from cumulative sums over the once-sorted items,
O(n) per resample instead of a sort. Ranks are half integers, computed exactly, so
they equal the ranks of the resample written out item by item."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class TieGroups(NamedTuple):
    """One variable, sorted: the sort order, the first position of each
    run of equal values (None: no ties) and each sorted position's run."""

    order: np.ndarray
    starts: np.ndarray | None
    group: np.ndarray | None


def tie_groups(values: np.ndarray) -> TieGroups:
    """The sort order and runs of equal values of ``values``."""
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    new = np.empty(ordered.shape[0], dtype=bool)
    new[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
    starts = np.flatnonzero(new)
    if starts.shape[0] == ordered.shape[0]:
        return TieGroups(order, None, None)
    return TieGroups(order, starts, np.cumsum(new) - 1)


def weighted_ranks(weights: np.ndarray, ties: TieGroups) -> tuple[np.ndarray, np.ndarray]:
    """Average ranks of the items (columns, in sorted order) within each resample (row),
    where item i appears ``weights[:, i]`` times (:func:`run_ranks`). Also returns each
    row's sum of S**3 - S over runs of S copies, the tie term of the rank variance."""
    ranks, per_run = run_ranks(weights, ties)
    return ranks, np.einsum("ij,ij->i", per_run * per_run - 1.0, per_run)


def run_ranks(weights: np.ndarray, ties: TieGroups) -> tuple[np.ndarray, np.ndarray]:
    """Average ranks of the items (columns, in sorted order) within each resample (row),
    where item i appears ``weights[:, i]`` times: a run of equal values holding S copies
    after C smaller copies has average rank C + (S + 1)/2 (the mean of positions C + 1
    to C + S). Also returns the copies per run (S)."""
    if ties.starts is None or ties.group is None:
        return np.cumsum(weights, axis=1) - (weights - 1.0) * 0.5, weights
    per_run = np.add.reduceat(weights, ties.starts, axis=1)
    run_rank = np.cumsum(per_run, axis=1) - (per_run - 1.0) * 0.5
    return np.take(run_rank, ties.group, axis=1), per_run
