"""The percentile bootstrap interval of Spearman's ρ over all items (tables up to
:data:`~auditor.metrics.spearman_ci.BOOTSTRAP_MAX_ITEMS` items).

Its digits are part of reference audits, so it is ``scipy.stats.bootstrap((x, y),
statistic, paired=True, vectorized=True, method="percentile", rng=default_rng(seed))``
taken step by step, without importing scipy.stats (1.4 s): the same draws
(``rng.integers(0, n, (batch, n))`` per batch of :func:`resample_batch` resamples), the
same ρ of each resample in the same arithmetic, and scipy's "linear" quantile of the
replicates; ``tests/test_correlations.py`` checks it against scipy bit for bit. The
resample's ranks come from its multiplicities (:mod:`~auditor.metrics.resample_ranks`),
O(n) instead of a sort: equal to rankdata's exactly, in half the time at 800 items.

A resample that drew only items of one frequency (or one norm) has no ρ; scipy's interval
is then NaN. Here such resamples are left out and counted: the interval is the same
quantiles over the resamples whose ρ is defined (scipy's digits when all are), and it is
undefined (NaN) when more than ``1 - level`` of them are left out
(:func:`too_many_undefined`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import NamedTuple

import numpy as np

from auditor.metrics.resample_ranks import TieGroups, run_ranks, tie_groups


class BootstrapInterval(NamedTuple):
    """A percentile bootstrap interval and the resamples left out of it."""

    low: float
    high: float
    n_undefined: int
    """Resamples whose ρ is undefined (every drawn item with one frequency or one norm),
    left out of the quantiles; the interval is NaN when :func:`too_many_undefined`."""


def percentile_bootstrap(
    x: np.ndarray, y: np.ndarray, n_bootstrap: int, seed: int, level: float, *, threads: int = 1
) -> BootstrapInterval:
    """The ``level`` percentile bootstrap interval of Spearman's ρ of (x, y), resampling
    items (pairs) with replacement ``n_bootstrap`` times from ``default_rng(seed)``, over
    the resamples whose ρ is defined (NaN when too many are not).

    The draws come from the one generator in batch order (they are the digits); the
    ranks and ρ of each batch may run on up to ``threads`` threads (numpy releases the
    GIL), which changes nothing in the result.
    """
    rng = np.random.default_rng(seed)
    n = x.shape[0]
    batch = resample_batch(n)
    x_ties, y_ties = tie_groups(x), tie_groups(y)

    def replicate(draws: np.ndarray) -> np.ndarray:
        return _spearman_rows(_resample_ranks(draws, x_ties), _resample_ranks(draws, y_ties))

    draws = (
        rng.integers(0, n, (min(batch, n_bootstrap - start), n), dtype=np.int64)
        for start in range(0, n_bootstrap, batch)
    )
    replicates = np.concatenate(_in_order(replicate, draws, threads))
    # A constant resample's ρ is 0/0 = NaN: left out and counted, not clamped to ±1
    # (which turned one such resample among a thousand into the interval [-1, 1]).
    defined = replicates[~np.isnan(replicates)]
    undefined = int(replicates.shape[0] - defined.shape[0])
    if too_many_undefined(undefined, int(replicates.shape[0]), level):
        return BootstrapInterval(float("nan"), float("nan"), undefined)
    lo, hi = _linear_quantiles(defined, (1.0 - level) / 2.0)
    return BootstrapInterval(lo, hi, undefined)


def too_many_undefined(undefined: int, resamples: int, level: float) -> bool:
    """Whether the resamples left out (undefined ρ) are too many for a ``level`` interval:
    more than ``1 - level`` of them (50 of 1,000 at 95%).

    Why that share: the interval is the middle ``level`` of the defined resamples. Had the
    u left out had a ρ, they could have fallen anywhere, so of all resamples the interval
    holds between (1 - u)·level - u and (1 - u)·level + u. Up to u = 1 - level (as many
    as the interval's own tails leave out) that is at least 85% at 95%, and a handful of
    constant resamples (a few cold-dominated draws among a thousand) change nothing a
    reader would act on; past it the bound falls fast (75% at u = 10%) and the interval
    says more about which resamples happened to be defined than about ρ's spread, so it
    is reported as undefined with its reason.
    """
    return resamples == 0 or undefined > allowed_undefined(resamples, level)


def allowed_undefined(resamples: int, level: float) -> int:
    """The most resamples that may be left out of a ``level`` interval of ``resamples``
    (1e-9 absorbs 1 - 0.95 being stored as 0.04999...)."""
    return int(np.floor((1.0 - level) * resamples + 1e-9))


def _in_order(
    work: Callable[[np.ndarray], np.ndarray], batches: Iterator[np.ndarray], threads: int
) -> list[np.ndarray]:
    """``work`` of each batch, in order, on up to ``threads`` threads, with at most two
    batches per thread drawn ahead (each about 8 MB)."""
    if threads <= 1:
        return [work(b) for b in batches]
    results: list[np.ndarray] = []
    with ThreadPoolExecutor(threads) as pool:
        pending: deque[Future[np.ndarray]] = deque()
        for b in batches:
            pending.append(pool.submit(work, b))
            if len(pending) >= 2 * threads:
                results.append(pending.popleft().result())
        results.extend(future.result() for future in pending)
    return results


def resample_batch(n: int) -> int:
    """Resamples per batch: about 8 MB per resampled array. It also fixes how the
    generator's draws are split, so it is part of the digits."""
    return max(1, 1_000_000 // max(1, n))


def _resample_ranks(draws: np.ndarray, ties: TieGroups) -> np.ndarray:
    """``rankdata(values[draws], axis=-1)``: each drawn item's average rank within its
    resample (row), from the resample's multiplicities over the sorted items."""
    rows, n = draws.shape
    sorted_position = np.empty(n, dtype=np.int64)
    sorted_position[ties.order] = np.arange(n)
    # Each draw as its item's place in sorted order, offset by its row: one flat index
    # serves the counting and the gathering back.
    flat = sorted_position[draws]
    flat += np.arange(0, rows * n, n)[:, None]
    weights = np.bincount(flat.ravel(), minlength=rows * n).reshape(rows, n).astype(np.float64)
    ranks, _ = run_ranks(weights, ties)
    return np.take(ranks, flat)


def _spearman_rows(rx: np.ndarray, ry: np.ndarray) -> np.ndarray:
    """Spearman ρ of each resample (rows of ranks) in the arithmetic the bootstrap's
    statistic has always used: centred ranks, sums along the rows."""
    rx = rx - rx.mean(axis=-1, keepdims=True)
    ry = ry - ry.mean(axis=-1, keepdims=True)
    num = (rx * ry).sum(axis=-1)
    den = np.sqrt((rx * rx).sum(axis=-1) * (ry * ry).sum(axis=-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return num / den


def _linear_quantiles(replicates: np.ndarray, alpha: float) -> tuple[float, float]:
    """The alpha and 1 - alpha quantiles of the replicates by ``scipy.stats.quantile``'s
    "linear" rule (Hyndman & Fan type 7) in its own arithmetic: position
    j = p·B + (1 - p), interpolated between the sorted values at floor(j) - 1 and
    floor(j). NaN if any replicate is NaN."""
    if replicates.shape[0] == 0 or np.isnan(replicates).any():
        return float("nan"), float("nan")
    ordered = np.sort(replicates)
    count = float(ordered.shape[0])
    p = np.asarray([alpha, 1.0 - np.float64(alpha)])
    position = p * count + (1 - p)
    upper = position // 1
    lower = upper - 1
    weight = position % 1
    weight[lower < 0] = 0
    low_index = np.clip(lower, 0.0, count - 1).astype(np.int64)
    high_index = np.clip(upper, 0.0, count - 1).astype(np.int64)
    values = (1 - weight) * ordered[low_index] + weight * ordered[high_index]
    return float(values[0]), float(values[1])
