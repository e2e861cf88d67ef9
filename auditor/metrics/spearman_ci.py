"""Confidence interval of Spearman ρ between item frequency and norm.

Up to :data:`BOOTSTRAP_MAX_ITEMS` items: a percentile bootstrap over items. Above: a
Fisher-z interval around the full-sample ρ (so it contains ρ by construction) whose
standard error is bootstrapped on a seeded subsample and scaled to n. Coverage is
checked by simulation in ``tests/test_bootstrap_coverage.py``.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np

from auditor.metrics.correlations import average_ranks
from auditor.metrics.percentile_bootstrap import percentile_bootstrap, resample_batch
from auditor.metrics.resample_ranks import tie_groups, weighted_ranks
from auditor.metrics.student_t import normal_quantile
from auditor.parallel import usable_cores

# Up to this many items the CI is a percentile bootstrap over all items. Above it the
# standard error of ρ is bootstrapped on a seeded subsample of this many items and
# scaled to n (see spearman_ci): resampling a million items a thousand times costs
# minutes for a width that is already below 0.01.
BOOTSTRAP_MAX_ITEMS = 20_000
CI_LEVEL = 0.95
"""The confidence level of the audit's interval of ρ."""
RESAMPLE_BATCH = 32
"""Bootstrap resamples per batch in the large-table path (32 x 20,000 float64 = 5 MB
per scratch array); each batch has its own seeded generator, so the result does not
depend on how batches are spread over threads."""
MAX_BOOTSTRAP_THREADS = 4
MIN_INFORMATIVE_ITEMS = 100
"""The subsample's bootstrap SE is used only when, for both variables, at least this
many subsample items lie outside the variable's largest tie (e.g. the cold items).
Below that its resamples differ mainly in how many copies of a handful of items they
draw, which understates the spread. With under 0.5% of items off one tie |ρ| cannot
exceed about sqrt(3 x 0.005) = 0.12, where the Bonett–Wright SE used instead is close
to the exact null SD 1/sqrt(n - 1) (simulated: within 10% on 1M items, 0.005-0.5% warm)."""


class SpearmanInterval(NamedTuple):
    """A confidence interval of Spearman ρ and how it was computed (for the report)."""

    low: float
    high: float
    method: str
    n_resamples: int = 0
    """Bootstrap resamples drawn for the interval (0: none were drawn)."""
    n_undefined: int = 0
    """Of those, the resamples whose ρ is undefined (every drawn item with one frequency or
    one norm), left out of the percentile interval; the interval is NaN when they are more
    than 1 - level of the resamples (see
    :func:`~auditor.metrics.percentile_bootstrap.too_many_undefined`)."""


def spearman_ci(
    x: np.ndarray,
    y: np.ndarray,
    *,
    n_bootstrap: int = 1000,
    seed: int = 0,
    level: float = CI_LEVEL,
    rho: float | None = None,
) -> SpearmanInterval:
    """Confidence interval of Spearman ρ of (x, y), resampling items with replacement.

    * n <= BOOTSTRAP_MAX_ITEMS: percentile bootstrap over all items, resampled as
      ``scipy.stats.bootstrap`` (paired, vectorised, ``default_rng(seed)``) resamples
      them, with its digits (see :func:`~auditor.metrics.percentile_bootstrap.percentile_bootstrap`),
      over the resamples whose ρ is defined; NaN when more than 1 - level are not.
    * n > BOOTSTRAP_MAX_ITEMS (m = BOOTSTRAP_MAX_ITEMS): a Fisher-z interval around the
      full-sample ρ, ``tanh(atanh(ρ) ± q · se_z)``. se_z is the standard deviation of
      atanh(ρ*) over ``n_bootstrap`` bootstrap resamples of a seeded m-item subsample,
      scaled by sqrt(m/n). Why this is right: Spearman's ρ is asymptotically normal with
      variance c/n (a smooth function of U-statistics, so √n-consistent), hence the
      sampling spread at n is the spread at m times sqrt(m/n); Fisher's z = atanh(ρ)
      stabilises that variance (for Spearman, var z ≈ (1 + ρ²/2)/(n - 3), Bonett &
      Wright 2000), so an interval symmetric in z has near-nominal coverage even close
      to ±1, always lies inside (-1, 1), and contains ρ by construction. The bootstrap
      (rather than the Bonett–Wright formula) measures c on the data itself, ties
      included; the formula is the fallback when the subsample is nearly all one tie
      (fewer than MIN_INFORMATIVE_ITEMS items off it, e.g. almost every item cold) or
      its bootstrap is degenerate. |ρ| = 1 gives the point (ρ, ρ): every resample of a
      monotone table is monotone. The subsample sets only the standard error, never
      the centre (centring on the subsample's ρ is what made the interval miss ρ).

    ``rho``: the full-sample ρ when the caller has it (else computed here). NaN ρ or
    ``n_bootstrap <= 0`` gives (NaN, NaN).
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n = x.shape[0]
    if n_bootstrap <= 0:
        return SpearmanInterval(float("nan"), float("nan"), "")
    if n <= BOOTSTRAP_MAX_ITEMS:
        batches = -(-n_bootstrap // resample_batch(n))
        threads = max(1, min(batches, usable_cores(), MAX_BOOTSTRAP_THREADS))
        lo, hi, undefined = percentile_bootstrap(x, y, n_bootstrap, seed, level, threads=threads)
        method = f"percentile bootstrap, {n_bootstrap} resamples"
        if undefined:
            method += f" ({undefined} with an undefined ρ left out)"
        return SpearmanInterval(lo, hi, method, n_bootstrap, undefined)
    centre = _spearman_rho(x, y) if rho is None else float(rho)
    if not np.isfinite(centre):
        return SpearmanInterval(float("nan"), float("nan"), "")
    m = BOOTSTRAP_MAX_ITEMS
    if abs(centre) >= 1.0:
        return SpearmanInterval(
            centre, centre, "none needed: |ρ| = 1 (a monotone table; every resample is monotone)"
        )
    rng = np.random.default_rng(seed)
    pick = rng.choice(n, m, replace=False)
    se_z, resamples = 0.0, 0
    if min(_outside_largest_tie(x[pick]), _outside_largest_tie(y[pick])) >= MIN_INFORMATIVE_ITEMS:
        replicates = _bootstrap_rho(x[pick], y[pick], n_bootstrap, rng)
        inside = replicates[np.abs(replicates) < 1.0]  # NaN (constant resample), ±1 drop out
        if inside.size >= 2:
            se_z, resamples = float(np.std(np.arctanh(inside), ddof=1)), n_bootstrap
    if se_z > 0 and np.isfinite(se_z):
        se_z *= np.sqrt(m / n)  # the √n law: spread at n = spread at m x sqrt(m/n)
        method = (
            f"Fisher-z interval around the full-sample ρ, standard error from a "
            f"{n_bootstrap}-resample bootstrap of a {m:,}-item subsample scaled by sqrt(m/n)"
        )
    else:
        se_z, resamples = float(np.sqrt((1.0 + centre**2 / 2.0) / (n - 3))), 0  # Bonett & Wright (2000)
        method = (
            "Fisher-z interval around the full-sample ρ, Bonett–Wright standard error "
            f"sqrt((1 + ρ²/2)/(n − 3)) (a {m:,}-item subsample had too few untied items "
            "to bootstrap)"
        )
    # Fisher's z = atanh(ρ) is near-normal with a variance that barely depends on ρ, so
    # the interval is symmetric in z; tanh maps it back inside (-1, 1) around ρ.
    half = normal_quantile(0.5 + level / 2.0) * se_z
    z = float(np.arctanh(centre))
    # min/max guard against tanh(atanh(ρ)) rounding 1 ulp past ρ near ±1.
    lo, hi = min(float(np.tanh(z - half)), centre), max(float(np.tanh(z + half)), centre)
    return SpearmanInterval(lo, hi, method, resamples)


def _outside_largest_tie(values: np.ndarray) -> int:
    """How many values differ from the most common value."""
    return int(values.shape[0] - np.unique(values, return_counts=True)[1].max(initial=0))


def _spearman_rho(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman ρ (Pearson correlation of average ranks); equals scipy's spearmanr
    statistic to rounding, at a third of its cost on a million items."""
    centre = (x.shape[0] + 1) * 0.5  # average ranks always sum to n(n+1)/2
    rx, ry = average_ranks(x) - centre, average_ranks(y) - centre
    with np.errstate(invalid="ignore", divide="ignore"):
        return float(np.dot(rx, ry) / np.sqrt(np.dot(rx, rx) * np.dot(ry, ry)))


def _bootstrap_rho(x: np.ndarray, y: np.ndarray, n_bootstrap: int, rng: np.random.Generator) -> np.ndarray:
    """ρ of ``n_bootstrap`` resamples (items drawn with replacement) of (x, y).

    A resample is held as multiplicities (how often each item was drawn), so its
    ranks come from cumulative sums over the once-sorted items, O(m) instead of a sort
    per resample; its ρ is the multiplicity-weighted Pearson correlation of those ranks,
    which equals Spearman's ρ of the expanded resample exactly (ties included). Batches
    run on a few threads (numpy releases the GIL); each batch has its own generator
    spawned from ``rng``, so the result does not depend on the thread count.
    """
    m = x.shape[0]
    by_x = np.argsort(x, kind="stable")
    x, y = x[by_x], y[by_x]  # columns in x order: x's ranks need no gather
    x_ties, y_ties = tie_groups(x), tie_groups(y)
    centre = (m + 1) * 0.5
    full_term = float(m) ** 3 - m
    sizes = [min(RESAMPLE_BATCH, n_bootstrap - b) for b in range(0, n_bootstrap, RESAMPLE_BATCH)]
    generators = rng.spawn(len(sizes))

    def batch(j: int) -> np.ndarray:
        b = sizes[j]
        draws = generators[j].integers(0, m, size=(b, m))
        draws += np.arange(0, b * m, m)[:, None]  # row r counts into [r*m, (r+1)*m)
        weights = np.bincount(draws.ravel(), minlength=b * m).reshape(b, m).astype(np.float64)
        rx, x_tie_term = weighted_ranks(weights, x_ties)
        # y's ranks in y order; x's ranks and the weights follow them there.
        w_y = np.take(weights, y_ties.order, axis=1)
        ry, y_tie_term = weighted_ranks(w_y, y_ties)
        rx = np.take(rx, y_ties.order, axis=1)
        # Σ w (rx - c)(ry - c) = Σ w rx ry - m c², as ranks sum to m c; the sums of
        # squares are the closed form (m³ - m - Σ runs (S³ - S)) / 12.
        sxy = np.einsum("ij,ij->i", w_y * rx, ry) - m * centre * centre
        sxx = (full_term - x_tie_term) / 12.0
        syy = (full_term - y_tie_term) / 12.0
        with np.errstate(invalid="ignore", divide="ignore"):
            return sxy / np.sqrt(sxx * syy)

    threads = max(1, min(len(sizes), usable_cores(), MAX_BOOTSTRAP_THREADS))
    if threads == 1:
        return np.concatenate([batch(j) for j in range(len(sizes))])
    with ThreadPoolExecutor(threads) as pool:
        return np.concatenate(list(pool.map(batch, range(len(sizes)))))


