"""How many items of each kind every list holds, counted in one pass over a list matrix.

The built-in list measures count items of a few kinds in each list: the head of
``head_share_1/10/20pct``, ``aplt``'s long tail, the head, mid and tail groups of the
miscalibration, Elliot's long tail of PopRSP and ACLT. Gathering each mask over the
(n_queries, K) matrix and summing it costs one pass per kind; here the items are first
split, once per audit, into *classes* (the items with the same answer to every mask, a
handful at most), so that one gather of each slot's class and one ``bincount`` give every
list's count of every class, and a list's count of a kind is the sum of its classes
(integers, exact: the same numbers as the per-mask sums).

An empty slot (-1) falls in a class of its own, the last, which no mask holds: the code
table has one entry more than the catalogue, and ``codes[-1]`` is that entry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ItemClasses:
    """Items split by named masks (:func:`item_classes`)."""

    names: tuple[str, ...]
    """The masks, in the order of :attr:`members`' columns."""
    codes: np.ndarray
    """Class of each item row (intp), then the empty slot's class (the last entry)."""
    members: np.ndarray
    """float64 (n_classes, n_masks): 1 where the class is in the mask (the empty class: none)."""

    @property
    def n_classes(self) -> int:
        """Classes, the empty slot's included."""
        return int(self.members.shape[0])

    def column(self, name: str) -> int:
        """The column of mask ``name`` in :meth:`count`'s result."""
        return self.names.index(name)

    def count(self, lists: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per list row: int64 (n_rows, n_masks), how many slots hold an item of each
        mask, and int64 (n_rows,), how many slots are filled (not -1). ``lists`` holds
        item rows or -1 (unchecked: :class:`~auditor.plugin_api.Slots` checks them)."""
        n_rows, width = lists.shape
        n_classes = self.n_classes
        keyed = self.codes[lists]
        keyed += np.arange(0, n_rows * n_classes, n_classes, dtype=keyed.dtype)[:, None]
        per_class = np.bincount(keyed.ravel(), minlength=n_rows * n_classes).reshape(n_rows, n_classes)
        filled: np.ndarray = width - per_class[:, -1]
        # Counts below 2**53 are exact in float64, and BLAS multiplies floats several times
        # faster than numpy multiplies integers.
        counts: np.ndarray = (per_class.astype(np.float64) @ self.members).astype(np.int64)
        return counts, filled


def item_classes(masks: Mapping[str, np.ndarray]) -> ItemClasses:
    """The classes of items that ``masks`` (name -> bool per item row, at most 62 masks)
    tell apart: items in the same masks share a class."""
    names = tuple(masks)
    bits = np.zeros(np.shape(next(iter(masks.values())))[0] if masks else 0, dtype=np.int64)
    for bit, name in enumerate(names):
        bits |= np.asarray(masks[name], dtype=np.int64) << bit
    values, codes = np.unique(bits, return_inverse=True)
    empty = values.size
    members = (values[:, None] >> np.arange(len(names), dtype=np.int64)[None, :]) & 1
    members = np.concatenate([members, np.zeros((1, len(names)), dtype=np.int64)])
    return ItemClasses(names, np.append(codes.astype(np.intp), empty), members.astype(np.float64))
