"""Rank and linear correlations of two item vectors, with scipy.stats' values.

Spearman's ρ and its p-value, Pearson's r and Kendall's τ-b and its test are computed here in numpy,
each step as ``scipy.stats`` (1.17) takes it, so that the figures are scipy's: ranks,
counts and Kendall's τ-b bit for bit, ρ and r by the same floating-point operations,
the p-value to about 1e-12 relative (:mod:`auditor.metrics.student_t`). Why not scipy.stats:
importing it costs 1.4 s, more than the rest of a small audit after ``import torch``
(issue 25); ``tests/test_correlations.py`` holds scipy as the reference.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from auditor.metrics.student_t import t_two_sided_p


class RankCorrelation(NamedTuple):
    """A rank correlation (Spearman's ρ, Kendall's τ-b) and its two-sided p-value (NaN when undefined)."""

    statistic: float
    pvalue: float


def average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks along the last axis (1-D, or one row per sample), ties sharing
    their average rank: ``scipy.stats.rankdata(values, axis=-1)`` for finite values.

    A rank is (first + last position of its run of equal values) / 2 + 1, a half
    integer computed exactly, so the ranks equal scipy's bit for bit.
    """
    values = np.asarray(values)
    order = np.argsort(values, axis=-1, kind="stable")
    ordered = np.take_along_axis(values, order, axis=-1)
    n = values.shape[-1]
    starts = np.ones(ordered.shape, dtype=bool)
    np.not_equal(ordered[..., 1:], ordered[..., :-1], out=starts[..., 1:])
    ends = np.ones(ordered.shape, dtype=bool)
    ends[..., :-1] = starts[..., 1:]
    position = np.broadcast_to(np.arange(n), ordered.shape)
    first = np.maximum.accumulate(np.where(starts, position, 0), axis=-1)
    last = np.flip(np.minimum.accumulate(np.flip(np.where(ends, position, n - 1), axis=-1), axis=-1), axis=-1)
    ranks = np.empty(ordered.shape, dtype=np.float64)
    np.put_along_axis(ranks, order, (first + last) * 0.5 + 1.0, axis=-1)
    return ranks


def spearman(x: np.ndarray, y: np.ndarray) -> RankCorrelation:
    """Spearman's ρ of (x, y) with its two-sided t-test p-value: ``scipy.stats.spearmanr``
    (NaN for fewer than 2 items, a constant side or a NaN value)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n = x.shape[0]
    if n <= 1 or (x[0] == x).all() or (y[0] == y).all() or np.isnan(x).any() or np.isnan(y).any():
        return RankCorrelation(float("nan"), float("nan"))
    # spearmanr ranks the columns of column_stack((x, y)) into a Fortran-ordered array
    # (apply_along_axis) and takes corrcoef of it: the same layout gives the same sums.
    ranked = np.asfortranarray(np.column_stack((average_ranks(x), average_ranks(y))))
    rho = np.corrcoef(ranked, rowvar=False)[1, 0]
    dof = n - 2
    with np.errstate(divide="ignore"):
        t = rho * np.sqrt(np.clip(dof / ((rho + 1.0) * (1.0 - rho)), 0, None))
    return RankCorrelation(float(rho), t_two_sided_p(float(t), float(dof)))


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson's r of (x, y): ``scipy.stats.pearsonr(x, y).statistic`` (deviations
    scaled by their largest before the norm, as scipy does against overflow; NaN when
    a side is constant)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.shape[0] < 2 or (x == x[0]).all() or (y == y[0]).all():
        return float("nan")
    xm, ym = x - x.mean(), y - y.mean()
    with np.errstate(invalid="ignore", divide="ignore"):
        # axis=-1 as scipy passes it: the elementwise sum, not the BLAS dot of axis=None.
        norm_x = np.abs(xm).max() * np.linalg.norm(xm / np.abs(xm).max(), axis=-1)
        norm_y = np.abs(ym).max() * np.linalg.norm(ym / np.abs(ym).max(), axis=-1)
        r = np.vecdot(xm / norm_x, ym / norm_y)
    return float(np.clip(r, -1.0, 1.0))


class _KendallCounts(NamedTuple):
    """The pair counts Kendall's τ-b and its test are made of (scipy's names)."""

    size: int
    total: int
    """All pairs."""
    discordant: int
    joint_ties: int
    x_ties: tuple[int, int, int]
    """Pairs tied on x and scipy's two variance sums over x's runs (``count_rank_tie``)."""
    y_ties: tuple[int, int, int]


def _kendall_counts(x: np.ndarray, y: np.ndarray) -> _KendallCounts:
    """Concordance counts of (x, y) as ``scipy.stats.kendalltau`` takes them."""
    x, y = np.asarray(x).ravel(), np.asarray(y).ravel()
    by_y = np.argsort(y, kind="stable")  # y as dense ranks, then items in x order
    x, y = x[by_y], y[by_y]
    y_rank = np.r_[True, y[1:] != y[:-1]].cumsum(dtype=np.intp)
    by_x = np.argsort(x, kind="stable")
    x, y_rank = x[by_x], y_rank[by_x]
    x_rank = np.r_[True, x[1:] != x[:-1]].cumsum(dtype=np.intp)
    runs = np.diff(np.flatnonzero(np.r_[True, (x_rank[1:] != x_rank[:-1]) | (y_rank[1:] != y_rank[:-1]), True]))
    size = int(x.size)
    return _KendallCounts(size, size * (size - 1) // 2, discordant_pairs(y_rank), int((runs * (runs - 1) // 2).sum()),
                          _tied_pairs(x_rank), _tied_pairs(y_rank))


def kendall_tau_b(x: np.ndarray, y: np.ndarray) -> float:
    """Kendall's τ-b of (x, y): ``scipy.stats.kendalltau(x, y).statistic``, from the same
    integer counts of concordant, discordant and tied pairs (NaN when every pair ties
    on a side)."""
    if np.asarray(x).size == 0:
        return float("nan")
    return _tau(_kendall_counts(x, y))


def _tau(c: _KendallCounts) -> float:
    if c.x_ties[0] == c.total or c.y_ties[0] == c.total:
        return float("nan")
    concordant_minus_discordant = c.total - c.x_ties[0] - c.y_ties[0] + c.joint_ties - 2 * c.discordant
    tau = concordant_minus_discordant / np.sqrt(c.total - c.x_ties[0]) / np.sqrt(c.total - c.y_ties[0])
    return float(np.minimum(1.0, max(-1.0, tau)))


def kendall_tau_test(x: np.ndarray, y: np.ndarray) -> RankCorrelation:
    """Kendall's τ-b of (x, y) with its two-sided p-value: ``scipy.stats.kendalltau(x, y)``
    (``method='auto'``): the exact null distribution when nothing ties and there are at
    most 33 items (or at most one discordant or concordant pair), else the normal
    approximation with scipy's tie-corrected variance. NaN for fewer than 2 items or a
    side that is all ties."""
    if np.asarray(x).size < 2:
        return RankCorrelation(float("nan"), float("nan"))
    c = _kendall_counts(x, y)
    tau = _tau(c)
    if np.isnan(tau):
        return RankCorrelation(tau, float("nan"))
    n, (xtie, x0, x1), (ytie, y0, y1) = c.size, c.x_ties, c.y_ties
    if xtie == 0 and ytie == 0 and (n <= 33 or min(c.discordant, c.total - c.discordant) <= 1):
        return RankCorrelation(tau, _kendall_exact_p(n, c.total - c.discordant))
    concordant_minus_discordant = c.total - xtie - ytie + c.joint_ties - 2 * c.discordant
    m = n * (n - 1.0)
    var = (m * (2 * n + 5) - x1 - y1) / 18 + (2 * xtie * ytie) / m + x0 * y0 / (9 * m * (n - 2))
    z = concordant_minus_discordant / np.sqrt(var)
    return RankCorrelation(tau, float(np.clip(math.erfc(abs(float(z)) / math.sqrt(2.0)), 0.0, 1.0)))


def _kendall_exact_p(n: int, concordant: int) -> float:
    """Two-sided p of ``concordant`` pairs among ``n`` untied items under independence:
    the counts of permutations by inversions (Mahonian numbers, built one item at a
    time), as ``scipy.stats._mstats_basic._kendall_p_exact``."""
    c = min(concordant, n * (n - 1) // 2 - concordant)
    if n <= 2:
        return 1.0
    if c == 0:
        return 2.0 / math.factorial(n) if n < 171 else 0.0
    if c == 1:
        return 2.0 / math.factorial(n - 1) if n < 172 else 0.0
    if 4 * c == n * (n - 1):
        return 1.0
    counts = np.zeros(c + 1)
    counts[0:2] = 1.0
    for j in range(3, n + 1):  # n steps of O(c) each: n <= 33 here, or c <= 1 (above)
        counts = np.cumsum(counts) if n < 171 else np.cumsum(counts) / j
        if j <= c:
            counts[j:] -= counts[: c + 1 - j]
    prob = 2.0 * np.sum(counts) / math.factorial(n) if n < 171 else np.sum(counts)
    return float(np.clip(prob, 0.0, 1.0))


def _tied_pairs(ranks: np.ndarray) -> tuple[int, int, int]:
    """Pairs of items sharing a dense rank, and scipy's two variance sums over the runs
    of tied ranks (``count_rank_tie``)."""
    counts = np.bincount(ranks).astype(np.int64, copy=False)
    counts = counts[counts > 1]
    return (int((counts * (counts - 1) // 2).sum()), int((counts * (counts - 1.0) * (counts - 2)).sum()),
            int((counts * (counts - 1.0) * (2 * counts + 5)).sum()))


def discordant_pairs(values: np.ndarray) -> int:
    """Pairs i < j with ``values[i] > values[j]`` (inversions) of non-negative integers.

    Two values that differ first at bit b (from the top) share the bits above it and
    are out of order exactly when the earlier one has bit b set. So, bit by bit from
    the top, with the values kept grouped by their higher bits (in their original
    order within a group), each 0 adds the 1s before it in its group; then each group
    is split stably into its 0s and 1s for the next bit. O(n) vectorised work per bit,
    O(n log n) in all, like scipy's merge sort (``_kendall_dis``) without its compiled
    loop.
    """
    current = np.asarray(values, dtype=np.int64)
    n = current.shape[0]
    if n < 2:
        return 0
    position = np.arange(n, dtype=np.int64)
    new_group = np.ones(n, dtype=bool)
    total = 0
    for b in range(int(current.max()).bit_length() - 1, -1, -1):
        high = current >> (b + 1)
        np.not_equal(high[1:], high[:-1], out=new_group[1:])
        starts = np.flatnonzero(new_group)
        sizes = np.diff(np.append(starts, n))
        group_start = np.repeat(starts, sizes)
        bit = (current >> b) & 1
        ones_through = np.cumsum(bit)
        ones_before = ones_through - bit
        ones_in_group_before = ones_before - ones_before[group_start]
        ones = ones_through[starts + sizes - 1] - ones_before[starts]
        # Each 0 adds the 1s before it in its group: all positions' counts, less what
        # the 1s hold (the k-th 1 of a group has k - 1 before it).
        total += int(ones_in_group_before.sum()) - int((ones * (ones - 1) // 2).sum())
        zeros = np.repeat(sizes - ones, sizes)
        target = np.where(bit == 1, group_start + zeros + ones_in_group_before, position - ones_in_group_before)
        regrouped = np.empty_like(current)
        regrouped[target] = current
        current = regrouped
    return total
