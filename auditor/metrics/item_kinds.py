"""How many items of each kind every list holds, counted in one pass over a list matrix.

The built-in list measures count items of a few kinds in each list: the heads of
``head_share_1/10/20pct``, ``aplt``'s long tail, Elliot's long tail of PopRSP and ACLT, the
head, mid and tail groups of the miscalibration. Gathering each mask over the
(n_queries, K) matrix and summing it costs a pass per kind. Here each item's masks are
packed once per audit as the bytes of a 64-bit word (byte j is 1 when the item is in mask
j, eight masks a word): summing the words of a list's items sums every mask at once, each
in its own byte, so one gather and one sum over the matrix give every list's count of
every kind. A byte holds counts up to 255, so longer lists are summed 255 slots at a time.
The counts are integers, exact: the very numbers of the per-mask sums.

An empty slot (-1) reads the table's extra last word, all zeros.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

LANES = 8
"""Masks packed in one 64-bit word (a byte each)."""
CHUNK = 255
"""Slots summed at once: a byte's largest count."""


@dataclass(frozen=True)
class ItemKinds:
    """Items' membership of named masks, packed (:func:`item_kinds`)."""

    names: tuple[str, ...]
    """The masks, in the order of :meth:`count`'s columns."""
    words: tuple[np.ndarray, ...]
    """Per word: uint64 per item row, byte j set for the word's j-th mask; then a zero word
    (the empty slot's, read through index -1)."""

    def column(self, name: str) -> int:
        """The column of mask ``name`` in :meth:`count`'s result."""
        return self.names.index(name)

    def count(self, lists: np.ndarray) -> np.ndarray:
        """int64 (n_rows, n_masks): how many slots of each list row hold an item of each
        mask. ``lists`` holds item rows or -1 (unchecked: :class:`~auditor.plugin_api.Slots`
        checks them)."""
        n_rows, width = lists.shape
        counts = np.zeros((n_rows, len(self.words) * LANES), dtype=np.int64)
        for start in range(0, width, CHUNK):
            part = lists[:, start : start + CHUNK]
            for w, words in enumerate(self.words):
                summed = words[part].sum(axis=1, dtype=np.uint64)
                counts[:, w * LANES : (w + 1) * LANES] += summed.view(np.uint8).reshape(n_rows, LANES)
        return counts[:, : len(self.names)]


def item_kinds(masks: Mapping[str, np.ndarray]) -> ItemKinds:
    """``masks`` (name -> bool per item row, all of one length) packed for :meth:`ItemKinds.count`."""
    names = tuple(masks)
    n_items = int(np.shape(next(iter(masks.values())))[0]) if masks else 0
    n_words = -(-len(names) // LANES)
    lanes = np.zeros((n_items + 1, n_words * LANES), dtype=np.uint8)  # the last row: an empty slot
    for j, name in enumerate(names):
        lanes[:n_items, j] = np.asarray(masks[name], dtype=bool)
    packed = lanes.view(np.uint64)  # (n_items + 1, n_words): each row's bytes as words, in memory order
    return ItemKinds(names, tuple(np.ascontiguousarray(packed[:, w]) for w in range(n_words)))
