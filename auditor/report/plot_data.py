"""What the report's figures plot, as arrays: kept apart from drawing so it can be tested
exactly (and reused by other reports) without matplotlib."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from auditor.result import DecileRow


def lorenz_curve(counts: np.ndarray, n_points: int = 512) -> tuple[np.ndarray, np.ndarray]:
    """Lorenz curve of exposure counts: (share of items, share of exposure), from (0, 0).

    Items are sorted by their own exposure, least exposed first. Catalogues larger than
    ``n_points`` are resampled by linear interpolation (the curve is piecewise linear,
    so nothing is lost at figure resolution). All-zero counts give the diagonal.
    """
    values = np.sort(np.asarray(counts, dtype=np.float64).ravel())
    n = values.size
    x = np.linspace(0.0, 1.0, n + 1)
    total = values.sum()
    if n == 0 or total <= 0:
        return np.array([0.0, 1.0]), np.array([0.0, 1.0])
    y = np.concatenate(([0.0], np.cumsum(values) / total))
    if n + 1 > n_points:
        grid = np.linspace(0.0, 1.0, n_points)
        return grid, np.interp(grid, x, y)
    return x, y


def popularity_groups(
    frequencies: np.ndarray, deciles: Sequence[DecileRow] | None = None, n_groups: int = 10
) -> tuple[np.ndarray, list[str]]:
    """Assign each item row a popularity group for the by-decile figure.

    Returns ``(group per item, labels)``; group -1 is a cold item (frequency 0) when
    cold items form their own group. When ``deciles`` (the result's table) covers the
    same items, consecutive runs of the frequency-sorted items of the table's sizes
    reproduce its grouping (tied frequencies never straddle a boundary there, so the
    runs are exact) and keep its decile numbers; otherwise warm items are split into
    ``n_groups`` equal-rank groups. Labels read ``"<decile>\\n<freq range>"``.
    """
    freq = np.asarray(frequencies, dtype=np.float64).ravel()
    order = np.argsort(freq, kind="stable")
    groups = np.full(freq.size, -1, dtype=np.int64)
    sizes = [row.n for row in deciles] if deciles else []
    numbers = [row.decile for row in deciles] if deciles else []
    warm = freq > 0
    if sizes and sum(sizes) == freq.size:
        population = order
    else:
        population = order[warm[order]]
        if not sizes or sum(sizes) != population.size:
            k = min(n_groups, max(population.size, 1))
            sizes = [len(chunk) for chunk in np.array_split(np.arange(population.size), k)]
            numbers = list(range(1, len(sizes) + 1))
    bounds = np.concatenate(([0], np.cumsum(sizes)))
    group_of_rank = np.repeat(np.arange(len(sizes)), sizes)
    groups[population] = group_of_rank
    labels = []
    for g in range(len(sizes)):
        members = freq[population[bounds[g] : bounds[g + 1]]]
        if not members.size:
            span = "empty"
        elif members.min() == members.max():
            span = f"{members.min():,.0f}"
        else:
            span = f"{members.min():,.0f}–{members.max():,.0f}"
        labels.append(f"{numbers[g]}\n{span}")
    return groups, labels


LOG_SPAN = 100.0
"""Norms whose largest positive is this many times their smallest positive are drawn on a
log axis: a head of norm 100 over a body of norm 1 otherwise squeezes every box into a line.
Zero norms (a padding row) take no part in the decision: they are drawn at a floor below."""
FLAT_SPAN = 1e-6
"""A relative spread of norms under this is float rounding (float32 norms of one value):
the axis then spans ±5% of the level instead of magnifying the noise (an axis "1e-8+1")."""
ZERO_FLOOR = 10**-0.5
"""On a log axis, zero norms are drawn at the smallest positive norm times this (half a
decade below every positive norm), on a dotted line saying how many they are."""


@dataclass(frozen=True)
class NormScale:
    """The y axis of every plot of item norms, decided once from the finite norms of the
    table: ``log`` from the positive ones only, ``floor`` where its ``zeros`` zero norms
    are drawn on a log axis (None on a linear axis, where 0 has its own place)."""

    log: bool
    count: int
    low: float
    high: float
    zeros: int
    floor: float | None

    def drawn(self, values: np.ndarray) -> np.ndarray:
        """``values`` as plotted: zero norms lifted to the floor on a log axis."""
        values = np.asarray(values, dtype=np.float64)
        return values if self.floor is None else np.where(values > 0, values, self.floor)


def norm_scale(norms: np.ndarray) -> NormScale:
    """The axis for ``norms`` (the finite norms of the table)."""
    norms = np.asarray(norms, dtype=np.float64)
    positive = norms[norms > 0]
    if not norms.size:
        return NormScale(False, 0, 0.0, 0.0, 0, None)
    zeros = int(norms.size - positive.size)
    log = bool(positive.size) and float(positive.max()) / float(positive.min()) >= LOG_SPAN
    floor = float(positive.min()) * ZERO_FLOOR if log and zeros else None
    return NormScale(log, norms.size, float(norms.min()), float(norms.max()), zeros, floor)
