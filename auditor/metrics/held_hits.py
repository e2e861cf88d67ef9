"""Which list slots hit each user's held-out items, for lists measured again and again
against the same held-out sets (every scoring at every K of one audit).

:func:`~auditor.metrics.accuracy.find_hits` keys, sorts and searches the held-out sets
and the lists on every call. The per-group NDCG and PopREO read the hits of 12 or more list
matrices against one holdout, so :class:`HeldTable` marks each evaluated user's held-out
items once in a (users, items + 1) table, and a list matrix's hits are then one lookup per
slot; an item repeated within a list is a hit once, at its first rank (``find_hits``' rule),
checked among the few hit slots only. The hits are the very booleans ``find_hits`` gives.

The table costs a byte per user and item: above :data:`TABLE_CELLS` cells it is not built
and ``find_hits`` answers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from auditor.metrics.accuracy import HeldOutHits, find_hits
from auditor.metrics.exposure import slot_cells

TABLE_CELLS = 1 << 25
"""The most cells (bytes) of a held-out table: 32 MiB, e.g. 10,000 users x 3,300 items."""


@dataclass(frozen=True)
class HeldTable:
    """The held-out sets of the evaluated list rows, as CSR ``indptr``/``items`` (each
    row's items distinct), and their marks when small enough (:data:`TABLE_CELLS`)."""

    indptr: np.ndarray
    items: np.ndarray
    n_items: int
    marks: np.ndarray | None
    """bool, row r's item i at r * (n_items + 1) + i; column n_items never marked (an empty slot)."""

    def hits(self, lists: np.ndarray) -> HeldOutHits:
        """The hits of ``lists`` (one row per evaluated row, item rows or -1), as ``find_hits``'."""
        if self.marks is None:
            return find_hits(lists, self.indptr, self.items)
        cells = slot_cells(lists, self.n_items)
        hits = self.marks[cells]
        found = np.flatnonzero(hits)
        if found.size:  # a repeated item hits at its first rank only
            keys = cells.ravel()[found]
            order = np.argsort(keys, kind="stable")
            ordered = keys[order]
            again = np.concatenate(([False], ordered[1:] == ordered[:-1]))
            hits.ravel()[found[order[again]]] = False
        return HeldOutHits(hits=hits, n_relevant=np.diff(self.indptr))


def held_table(indptr: np.ndarray, items: np.ndarray, n_items: int) -> HeldTable:
    """``indptr``/``items`` (CSR of non-empty held-out sets, items distinct per row, in
    [0, n_items)) ready for :meth:`HeldTable.hits`."""
    n_rows = int(indptr.shape[0]) - 1
    stride = n_items + 1
    if n_rows * stride > TABLE_CELLS:
        return HeldTable(indptr, items, n_items, None)
    marks = np.zeros(n_rows * stride, dtype=bool)
    owner = np.repeat(np.arange(n_rows, dtype=np.int64), np.diff(indptr))
    marks[owner * stride + items] = True
    return HeldTable(indptr, items, n_items, marks)
