"""Beside a model, the items the served lists' grade counts by their raw ids though the model's
item table has no row for them (QA "Served N3"; docs/served-lists.md, "Severity").

A served list names items by raw id, and the training log counts them by raw id: grading the
lists needs nothing of the model. Lists alone number every item of the log and of the lists
(:func:`union_ids`); beside a model the lists are read through its item rows, where an item
without a row leaves its slot empty and a log item without one is left out of the model's
frequencies. :class:`RowlessItems` keeps both by raw id, with their training counts and the
slots the listed ones fill, so the grade (:func:`auditor.retrieval.served.graded_shares`) counts
the same catalogue, head and slots with a model or without.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from auditor.loading.alignment import counted_rows
from auditor.loading.counting import IdCounts
from auditor.values import ItemRows, lookup_rows


@dataclass(frozen=True)
class RowlessItems:
    """Items without a row in the model's item table that the lists' grade counts by raw id."""

    ids: np.ndarray
    """Raw ids, distinct and sorted: the listed items without a row, and the training log's (:func:`with_log_counts`)."""
    slot_rows: np.ndarray
    """int64: the list row of each slot left empty for a listed item without a row."""
    slot_positions: np.ndarray
    """int64: its position in the list (0: first)."""
    slot_items: np.ndarray
    """int64: its item, an index into ``ids``."""
    frequencies: np.ndarray
    """int64: training interactions per item of ``ids`` (0: never trained, or no log counted)."""
    user_counts: np.ndarray | None = None
    """int64: distinct training users per item of ``ids`` (None: not counted)."""

    def popularity(self, kind: str) -> np.ndarray:
        """Distinct users (``kind`` ``users``; 0 where not counted) or interactions per item of ``ids``."""
        if kind == "users":
            return np.zeros_like(self.frequencies) if self.user_counts is None else self.user_counts
        return self.frequencies


def listed_rowless(slots: tuple[np.ndarray, np.ndarray, np.ndarray], code_rows: np.ndarray,
                   item_ids: np.ndarray) -> RowlessItems:
    """The listed items without a row (``code_rows`` -1; ``item_ids``: the file's distinct ids, sorted, the
    codes' ids) and the slots ``slots`` (list row, position, item code) they fill, not yet counted in a log."""
    missing = np.flatnonzero(np.asarray(code_rows) < 0)  # sorted codes: their ids stay sorted
    rows, positions, codes = slots
    return RowlessItems(ids=np.asarray(item_ids)[missing], slot_rows=np.asarray(rows, dtype=np.int64),
                        slot_positions=np.asarray(positions, dtype=np.int64),
                        slot_items=np.searchsorted(missing, codes).astype(np.int64),
                        frequencies=np.zeros(missing.size, dtype=np.int64))


def with_log_counts(rowless: RowlessItems, counts: IdCounts, mapping: ItemRows) -> RowlessItems:
    """``rowless`` with the training log's items without a row under ``mapping`` added (their
    interactions are out of the model's frequencies but in the lists' grade, as lists alone count
    them) and every item's training counts from ``counts`` (the log's, by raw id)."""
    log_rowless = np.asarray(counts.ids)[counted_rows(counts, mapping) < 0]
    ids = union_ids(log_rowless, rowless.ids)
    at = lookup_rows(ids, np.asarray(counts.ids))
    known = at >= 0

    def counted(values: np.ndarray) -> np.ndarray:
        out = np.zeros(len(ids), dtype=np.int64)
        out[known] = np.asarray(values)[at[known]]
        return out

    return replace(rowless, ids=ids, slot_items=lookup_rows(rowless.ids, ids)[rowless.slot_items],
                   frequencies=counted(counts.counts),
                   user_counts=None if counts.user_counts is None else counted(counts.user_counts))


def union_ids(log_items: np.ndarray | None, listed: np.ndarray) -> np.ndarray:
    """The distinct ids of the log and the lists, sorted; as text when either is text (the lists'
    catalogue alone)."""
    if log_items is None or len(log_items) == 0:
        return np.asarray(listed)
    log_items = np.asarray(log_items)
    if len(listed) == 0:
        return log_items
    if log_items.dtype.kind in "iu" and listed.dtype.kind in "iu":
        return np.union1d(log_items.astype(np.int64), listed.astype(np.int64))
    as_text = [np.asarray(pa.array(a).cast(pa.string()).to_numpy(zero_copy_only=False), dtype=object)
               for a in (log_items, listed)]
    return np.unique(np.concatenate(as_text))


__all__ = ["RowlessItems", "listed_rowless", "union_ids", "with_log_counts"]
