"""Which items count as popular: the head at a catalogue percentage, the short head
holding a share of the interactions, and the least popular fraction (the long tail).

Every rule puts items tied at the cut on the same side, so a result never depends on
the order of table rows (except RecBole's fraction rule, which orders ties by row).
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np


def head_count(percent: float, n_items: int) -> int:
    """c, the rank of the item whose popularity cuts the top-``percent``% head of a
    catalogue of ``n_items`` (:func:`head_mask`): max(1, floor(percent/100 * n_items)),
    at most ``n_items``. Two catalogues with the same c on the same popularity have the same
    head; another c is another head (``popaudit diff`` compares head shares only then)."""
    return min(max(1, int(math.floor(percent / 100.0 * n_items + 1e-9))), max(n_items, 1))


def head_mask(popularity: np.ndarray, percent: float) -> np.ndarray:
    """Boolean mask of the head: items at least as popular as the c-th most popular one.

    c = max(1, floor(percent/100 * n_items)); items tied with the c-th are all in, so the
    mask does not depend on row order. Items with popularity 0 are never head (when more
    than (100-percent)% of the catalogue is cold, the head is just the warm items).
    """
    popularity = np.asarray(popularity)
    n = popularity.shape[0]
    if n == 0:
        return np.zeros(0, dtype=bool)
    c = head_count(percent, n)
    # partition finds the c-th largest without a full sort.
    f_c = np.partition(popularity, n - c)[n - c]
    return (popularity >= f_c) & (popularity > 0)


def short_head_mask(popularity: np.ndarray, head_mass: float = 0.8) -> np.ndarray:
    """The short head: the most popular items that together hold ``head_mass`` of the mass.

    Items are taken in decreasing popularity until their cumulative share reaches
    ``head_mass``; items tied with the last one taken are all in. Zero mass: empty head.
    """
    popularity = np.asarray(popularity, dtype=np.float64)
    total = popularity.sum()
    if total <= 0:
        return np.zeros(popularity.shape[0], dtype=bool)
    ordered = np.sort(popularity)[::-1]
    cumulative = np.cumsum(ordered) / total
    last = int(np.searchsorted(cumulative, head_mass - 1e-12, side="left"))
    last = min(last, ordered.shape[0] - 1)
    return (popularity >= ordered[last]) & (popularity > 0)


def bottom_tail_mask(
    popularity: np.ndarray, fraction: float, cold: Literal["include", "drop"] = "include"
) -> np.ndarray:
    """Long tail as the ``fraction`` least popular items (ties ordered by row).

    ``max(1, int(fraction * n))`` items, n counting only warm items when ``cold="drop"``
    (cold items are then neither ranked nor tail): RecBole's TailPercentage rule, including
    its float truncation (0.29 * 100 is 28.999..., so 28 items, not 29).
    """
    popularity = np.asarray(popularity)
    rows = np.arange(popularity.shape[0])
    if cold == "drop":
        rows = rows[popularity > 0]
    mask = np.zeros(popularity.shape[0], dtype=bool)
    if rows.size == 0:
        return mask
    cut = max(1, int(fraction * rows.size))
    order = rows[np.lexsort((rows, popularity[rows]))]
    mask[order[:cut]] = True
    return mask
