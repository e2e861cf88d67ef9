"""The candidates of PopRSP and PopREO (Elliot's denominators), per list row, and the rule
that decides, per user, whether their training items are among them.

Elliot never serves a training item, so a user's candidates are the items they did not
train on (``g − T_u``). Lists that re-serve training items (served lists are measured as
served) make those items candidates too, but only for the users whose own list re-serves
some: a user's training items are candidates exactly when their list holds one of them
(or for everyone with ``keep_seen``). So one slot moves one user's denominator, never the
definition for every user, and lists that hold none (a model's scorings) keep Elliot's
figure. Only rows with a list (a filled slot) count, as Elliot's users with
recommendations: a queried user without a list adds no candidates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from auditor.metrics.held_hits import HeldTable, held_table
from auditor.metrics.popularity_groups import Profiles


@dataclass(frozen=True)
class Candidates:
    """Per list row, the short-head and long-tail candidates with and without its training items."""

    untrained: np.ndarray
    """float64 (n_rows, 2): |short head − T_u|, |long tail − T_u| (PopRSP), or of R_u (PopREO)."""
    every: np.ndarray
    """float64 (n_rows, 2): the same with the training items kept."""

    def summed(self, listed: np.ndarray, kept: np.ndarray | bool) -> tuple[float, float]:
        """Σ over the ``listed`` rows of each row's candidates, its training items among them
        where ``kept`` (per row, or for every row)."""
        rows = np.broadcast_to(np.asarray(kept, dtype=bool), (self.every.shape[0],))
        total = np.where(rows[:, None], self.every, self.untrained)[listed].sum(axis=0)
        return float(total[0]), float(total[1])


def catalogue_candidates(profiles: Profiles, tail: np.ndarray) -> Candidates:
    """PopRSP's: the short-head and long-tail items each row could be served."""
    head = ~tail
    trained_head = profiles.row_sums(head)
    trained_tail = profiles.sizes - trained_head
    every = np.tile(np.array([head.sum(), tail.sum()], dtype=np.float64), (profiles.n, 1))
    untrained = every - np.stack([trained_head, trained_tail], axis=1)
    return Candidates(untrained=untrained, every=every)


def held_candidates(relevant: Profiles, profiles: Profiles, tail: np.ndarray, n_items: int) -> Candidates:
    """PopREO's: each row's held-out short-head and long-tail items (distinct), without and
    with the ones it also trained on."""
    if relevant.n != profiles.n:
        raise ValueError(f"relevant has {relevant.n} rows but profiles {profiles.n}; both must align with the lists")
    owner = relevant.owner
    held = owner * n_items + relevant.rows  # distinct keys (as_profiles), < n_rows * n_items
    untrained = ~np.isin(held, profiles.owner * n_items + profiles.rows, assume_unique=True)
    in_tail = tail[relevant.rows]

    def per_row(mask: np.ndarray) -> np.ndarray:
        return np.stack([np.bincount(owner[mask & ~in_tail], minlength=relevant.n),
                         np.bincount(owner[mask & in_tail], minlength=relevant.n)], axis=1).astype(np.float64)

    return Candidates(untrained=per_row(untrained), every=per_row(np.ones_like(untrained)))


def trained_table(profiles: Profiles, n_items: int) -> HeldTable:
    """Each row's training items, ready to find which lists re-serve some (:func:`reserving`)."""
    return held_table(profiles.indptr, profiles.rows, n_items)


def reserving(trained: HeldTable, lists: np.ndarray) -> np.ndarray:
    """bool per row: its list holds one of its own training items."""
    return np.asarray(trained.hits(lists).hits.any(axis=1))
