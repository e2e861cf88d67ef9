"""How strongly item embedding norms follow item popularity (SCIENCE.md §6).

All statistics are vectorised over items; Python loops run only over the ten deciles
and over row blocks of the table.
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy import stats as sps

from auditor.errors import EmbeddingTableError
from auditor.loading.tables import block_rows
from auditor.result import DecileRow, FrequencyNorm

# Above this many items the bootstrap resamples a fixed-size subsample instead of all
# items: the CI of ρ shrinks like 1/sqrt(n), and full resampling of a million items
# a thousand times costs minutes for a width that is already below 0.01.
BOOTSTRAP_MAX_ITEMS = 20_000
N_DECILES = 10


def item_norms(table: np.ndarray, block: int | None = None) -> np.ndarray:
    """Euclidean norm of each row, in float64, computed in row blocks to bound memory
    (``block`` rows; default: :func:`~auditor.loading.tables.block_rows` for float64)."""
    if block is None:
        block = block_rows(table.shape[1], bytes_per_value=8)
    out = np.empty(table.shape[0], dtype=np.float64)
    for start in range(0, table.shape[0], block):
        rows = np.asarray(table[start : start + block], dtype=np.float64)
        out[start : start + block] = np.sqrt(np.einsum("ij,ij->i", rows, rows))
    return out


def frequency_norm_stats(
    norms: np.ndarray,
    frequencies: np.ndarray,
    *,
    n_bootstrap: int = 1000,
    seed: int = 0,
) -> tuple[FrequencyNorm, list[str]]:
    """Spearman ρ (with bootstrap CI and p-value), Pearson on log(1+f), Kendall τ,
    the log–log slope over warm items and per-decile norm summaries.

    Returns the section and warnings for the report (e.g. constant frequencies).
    """
    norms = np.asarray(norms, dtype=np.float64)
    freqs = np.asarray(frequencies, dtype=np.float64)
    if norms.shape != freqs.shape or norms.ndim != 1:
        raise EmbeddingTableError(
            f"norms {norms.shape} and frequencies {freqs.shape} do not describe the same items"
        )
    n = norms.shape[0]
    if n < 3:
        raise EmbeddingTableError(f"a correlation needs at least 3 items, the table has {n}")
    notes: list[str] = []
    constant_freqs = np.ptp(freqs) == 0
    constant = constant_freqs or np.ptp(norms) == 0
    if constant:
        which = "frequency" if constant_freqs else "norm"
        notes.append(f"every item has the same {which}: correlations are undefined (reported as null)")
        spearman = spearman_p = pearson_log = kendall = float("nan")
        ci = (float("nan"), float("nan"))
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # scipy warns on ties; the values stay correct
            rho = sps.spearmanr(freqs, norms)
            spearman, spearman_p = float(rho.statistic), float(rho.pvalue)
            pearson_log = float(sps.pearsonr(np.log1p(freqs), norms).statistic)
            kendall = float(sps.kendalltau(freqs, norms).statistic)
        ci = spearman_bootstrap_ci(freqs, norms, n_bootstrap=n_bootstrap, seed=seed)
    warm = freqs > 0
    slope = loglog_slope(freqs[warm], norms[warm])
    if slope is None:
        notes.append("log-log slope undefined: fewer than two distinct positive frequencies")
    deciles = decile_rows(freqs, norms)
    section = FrequencyNorm(
        spearman=spearman,
        spearman_ci=ci,
        spearman_p=spearman_p,
        pearson_log=pearson_log,
        kendall=kendall,
        loglog_slope=slope,
        n_items=n,
        n_cold=int(n - warm.sum()),
        deciles=deciles,
        cold_norm_median=float(np.median(norms[~warm])) if (~warm).any() else None,
        warm_norm_median=float(np.median(norms[warm])) if warm.any() else None,
        n_bootstrap=0 if constant else n_bootstrap,
    )
    return section, notes


def spearman_bootstrap_ci(
    x: np.ndarray, y: np.ndarray, *, n_bootstrap: int = 1000, seed: int = 0, level: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap CI of Spearman ρ, resampling items with replacement.

    Uses scipy.stats.bootstrap (paired, vectorised). For catalogues larger than
    BOOTSTRAP_MAX_ITEMS the CI is computed on a seeded subsample and rescaled by
    sqrt(m/n), the 1/sqrt(n) law of the sampling spread of ρ.
    """
    if n_bootstrap <= 0:
        return (float("nan"), float("nan"))
    rng = np.random.default_rng(seed)
    n = x.shape[0]
    scale = 1.0
    if n > BOOTSTRAP_MAX_ITEMS:
        pick = rng.choice(n, BOOTSTRAP_MAX_ITEMS, replace=False)
        x, y = x[pick], y[pick]
        scale = np.sqrt(BOOTSTRAP_MAX_ITEMS / n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = sps.bootstrap(
            (x, y),
            _spearman_along_axis,
            paired=True,
            vectorized=True,
            n_resamples=n_bootstrap,
            batch=max(1, 1_000_000 // max(1, x.shape[0])),  # ~8 MB per resampled array
            confidence_level=level,
            method="percentile",
            rng=rng,
        )
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if scale != 1.0:
        centre = float(sps.spearmanr(x, y).statistic)
        lo, hi = centre - (centre - lo) * scale, centre + (hi - centre) * scale
    return (max(-1.0, lo), min(1.0, hi))


def _spearman_along_axis(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    """Spearman ρ of each resample (rows of x and y), tie-aware through average ranks."""
    rx = sps.rankdata(x, axis=axis)
    ry = sps.rankdata(y, axis=axis)
    rx = rx - rx.mean(axis=axis, keepdims=True)
    ry = ry - ry.mean(axis=axis, keepdims=True)
    num = (rx * ry).sum(axis=axis)
    den = np.sqrt((rx * rx).sum(axis=axis) * (ry * ry).sum(axis=axis))
    with np.errstate(invalid="ignore", divide="ignore"):
        return num / den


def loglog_slope(freqs: np.ndarray, norms: np.ndarray) -> float | None:
    """Least-squares slope of log(norm) on log(frequency) over items with both > 0.

    Under the ideal mechanism ‖q‖⁴ grows linearly with the number of updates, so a
    slope near 0.25 is the signature of the orthogonal-update bias.
    """
    keep = (freqs > 0) & (norms > 0)
    if np.unique(freqs[keep]).size < 2:
        return None
    slope, _ = np.polyfit(np.log(freqs[keep]), np.log(norms[keep]), 1)
    return float(slope)


def popularity_deciles(freqs: np.ndarray, n_deciles: int = N_DECILES) -> np.ndarray:
    """Decile (0 = least popular) of each item by average rank of its frequency.

    Tied frequencies share a rank and hence a decile, so membership does not depend on
    row order; deciles can be uneven (or empty) when many items tie.
    """
    ranks = sps.rankdata(freqs, method="average")
    return np.minimum(((ranks - 0.5) / freqs.shape[0] * n_deciles).astype(np.int64), n_deciles - 1)


def decile_rows(freqs: np.ndarray, norms: np.ndarray) -> list[DecileRow]:
    """Norm median and mean per popularity decile (empty deciles omitted)."""
    decile = popularity_deciles(freqs)
    order = np.argsort(decile, kind="stable")
    bounds = np.searchsorted(decile[order], np.arange(N_DECILES + 1))
    rows: list[DecileRow] = []
    for d in range(N_DECILES):
        members = order[bounds[d] : bounds[d + 1]]
        if members.size == 0:
            continue
        f, q = freqs[members], norms[members]
        rows.append(
            DecileRow(
                decile=d + 1,
                freq_min=int(f.min()),
                freq_max=int(f.max()),
                n=int(members.size),
                norm_median=float(np.median(q)),
                norm_mean=float(q.mean()),
            )
        )
    return rows
