"""How strongly item embedding norms follow item popularity (docs/measures.md).

All statistics are vectorised over items; Python loops run only over the ten deciles
and over row blocks of the table.
"""

from __future__ import annotations

import numpy as np

from auditor.errors import EmbeddingTableError
from auditor.memory import block_rows
from auditor.metrics.correlations import average_ranks, kendall_tau_b, pearson, spearman
from auditor.metrics.norm_rounding import NormPrecision, plateau_ties
from auditor.metrics.percentile_bootstrap import allowed_undefined
from auditor.metrics.spearman_ci import CI_LEVEL, SpearmanInterval, spearman_ci
from auditor.result import DecileRow, FrequencyNorm

N_DECILES = 10


def item_norms(table: np.ndarray, block: int | None = None) -> np.ndarray:
    """Euclidean norm of each row, in float64, computed in row blocks to bound memory
    (``block`` rows; default: :func:`~auditor.memory.block_rows` for float64).

    Finite for any finite table: each row is scaled by the power of two nearest above
    its largest |x| before squaring and the norm scaled back. Scaling by a power of two
    is exact, so wherever plain float64 squaring neither overflows nor underflows the
    result is bit-for-bit that of ``sqrt(sum(x**2))``.
    """
    if block is None:
        block = block_rows(table.shape[1], bytes_per_value=8)
    out = np.empty(table.shape[0], dtype=np.float64)
    for start in range(0, table.shape[0], block):
        rows = np.asarray(table[start : start + block], dtype=np.float64)
        # max and -min instead of abs(): no block-sized temporary.
        peak = np.maximum(rows.max(axis=1, initial=0.0), -rows.min(axis=1, initial=0.0))
        _, exponent = np.frexp(peak)  # peak = mantissa * 2**exponent, mantissa in [0.5, 1)
        # In place only on our own float64 copy, never on the caller's table.
        own = not np.may_share_memory(rows, table)
        scaled = np.ldexp(rows, -exponent[:, None], out=rows if own else None)
        out[start : start + block] = np.ldexp(
            np.sqrt(np.einsum("ij,ij->i", scaled, scaled)), exponent
        )
    return out


def frequency_norm_stats(
    norms: np.ndarray,
    frequencies: np.ndarray,
    *,
    n_bootstrap: int = 1000,
    seed: int = 0,
    precision: NormPrecision | None = None,
) -> tuple[FrequencyNorm, list[str]]:
    """Spearman ρ (with CI and p-value), Pearson on log(1+f), Kendall τ, the log–log
    slope over warm items and per-decile norm summaries.

    Returns the section and warnings for the report (e.g. constant frequencies). When ρ
    cannot be computed the correlations are NaN and ``undefined_reason`` says why; norms
    equal to within the table's ``precision`` (None: exactly equal) count as constant.
    """
    norms = np.asarray(norms, dtype=np.float64)
    freqs = np.asarray(frequencies, dtype=np.float64)
    if norms.shape != freqs.shape or norms.ndim != 1:
        raise EmbeddingTableError(
            f"norms {norms.shape} and frequencies {freqs.shape} do not describe the same items"
        )
    n = norms.shape[0]
    notes: list[str] = []
    reason = undefined_reason(norms, freqs, precision)
    if reason is not None:
        if n >= 3 and np.isfinite(norms).all() and np.isfinite(freqs).all():
            which = "same frequency" if np.ptp(freqs) == 0 else _same_norm(norms, precision)
            notes.append(f"every item has the {which}: correlations are undefined (reported as null)")
        else:
            notes.append(f"{reason} (reported as null)")
        nan = float("nan")
        spearman_rho = spearman_p = pearson_log = kendall = nan
        interval = SpearmanInterval(nan, nan, "")
    else:
        ranked = plateau_ties(norms, precision)  # scipy.stats' values, a plateau of rounding noise tied
        spearman_rho, spearman_p = spearman(freqs, ranked)
        pearson_log = pearson(np.log1p(freqs), norms)
        kendall = kendall_tau_b(freqs, ranked)
        interval = spearman_ci(freqs, ranked, n_bootstrap=n_bootstrap, seed=seed, rho=spearman_rho)
    ci_reason = ci_undefined_reason(interval)
    if ci_reason is not None:
        notes.append(ci_reason)
    warm = freqs > 0
    slope = loglog_slope(freqs[warm], norms[warm], precision) if np.isfinite(norms).all() else None
    if slope is None:
        notes.append("log-log slope undefined: fewer than two distinct positive frequencies")
    deciles = decile_rows(freqs, norms)
    section = FrequencyNorm(
        spearman=spearman_rho,
        spearman_ci=(interval.low, interval.high),
        spearman_p=spearman_p,
        pearson_log=pearson_log,
        kendall=kendall,
        loglog_slope=slope,
        n_items=n,
        n_cold=int(n - warm.sum()),
        deciles=deciles,
        cold_norm_median=float(np.median(norms[~warm])) if (~warm).any() else None,
        warm_norm_median=float(np.median(norms[warm])) if warm.any() else None,
        n_bootstrap=interval.n_resamples,
        undefined_reason=reason,
        ci_method=interval.method,
        n_bootstrap_undefined=interval.n_undefined,
        ci_undefined_reason=ci_reason,
    )
    return section, notes


def ci_undefined_reason(interval: SpearmanInterval) -> str | None:
    """Why a bootstrap interval of a defined ρ is undefined (too many resamples drew
    items of one frequency or one norm); None when it is defined or was not drawn."""
    if not interval.n_undefined or np.isfinite(interval.low):
        return None
    return (
        f"{interval.n_undefined:,} of {interval.n_resamples:,} bootstrap resamples drew items that all have "
        f"one frequency or one norm, so their ρ is undefined; that is more than the "
        f"{allowed_undefined(interval.n_resamples, CI_LEVEL):,} (5%) a 95% interval can leave out: "
        "the CI of ρ is undefined (reported as null; ρ and its p-value stand)"
    )


def undefined_reason(norms: np.ndarray, freqs: np.ndarray, precision: NormPrecision | None = None) -> str | None:
    """Why Spearman ρ of ``freqs`` and ``norms`` is undefined, in plain words; None if
    it is defined (at least 3 items, finite values, neither side constant: norms equal to
    within ``precision``'s rounding count as constant)."""
    n = norms.shape[0]
    if n < 3:
        items = "no items" if n == 0 else f"only {n} item{'s' if n > 1 else ''}"
        return f"the table has {items}; a rank correlation needs at least 3: the correlation is undefined"
    bad_norms, bad_freqs = int((~np.isfinite(norms)).sum()), int((~np.isfinite(freqs)).sum())
    if bad_norms or bad_freqs:
        what = f"{bad_norms} item norms" if bad_norms else f"{bad_freqs} item frequencies"
        return f"{what} are not finite (NaN or infinite): the correlation is undefined"
    same_freq, same_norm = bool(np.ptp(freqs) == 0), _same_norm(norms, precision)
    constant = "(a constant table)" if np.ptp(norms) == 0 else _rounding_spread(norms, precision)
    if same_freq and same_norm:
        return (
            f"every item has the same training frequency and the {same_norm} {constant}: "
            "the correlation is undefined"
        )
    if same_freq:
        return (
            f"every item has the same training frequency ({freqs[0]:g}): the correlation is "
            "undefined"
        )
    if same_norm:
        return f"every item has the {same_norm} {constant}: the correlation is undefined"
    return None


def _same_norm(norms: np.ndarray, precision: NormPrecision | None) -> str:
    """"same norm" when every norm is equal, "same norm to within float32 rounding" when
    they differ by no more than the table's rounding (:meth:`NormPrecision.spread` of the
    largest norm), else "" (they differ)."""
    spread = float(np.ptp(norms))
    if spread == 0:
        return "same norm"
    if precision is not None and spread <= precision.spread(float(np.abs(norms).max())):
        return f"same norm to within {precision.dtype} rounding"
    return ""


def _rounding_spread(norms: np.ndarray, precision: NormPrecision | None) -> str:
    """The figures behind "equal to within rounding", for the reason."""
    if precision is None:
        return ""
    largest = float(np.abs(norms).max())
    allowed = precision.spread(largest) / largest
    steps = f" of entries held in subnormals (steps of {precision.subnormal_step:.2g})" if allowed > precision.tolerance else ""
    return (
        f"(the norms span {float(np.ptp(norms)) / largest:.2g} of the largest, within the "
        f"{allowed:.2g} that {precision.dtype} rounding{steps} at {precision.dim} dimensions can make, as in "
        "a table normalised to one norm)"
    )


def loglog_slope(freqs: np.ndarray, norms: np.ndarray, precision: NormPrecision | None = None) -> float | None:
    """Least-squares slope of log(norm) on log(frequency) over items with both > 0.

    Under the ideal mechanism ‖q‖⁴ grows linearly with the number of updates, so a
    slope near 0.25 is the signature of the orthogonal-update bias. Norms equal to within
    ``precision``'s rounding (as :func:`undefined_reason` counts them constant) give exactly
    0: the slope of a constant, where the fit would return its rounding noise (about 1e-9
    on a float32 unit-norm table, 1e-17 on equal norms), which a diff would read as a base.
    """
    keep = (freqs > 0) & (norms > 0)
    if np.unique(freqs[keep]).size < 2:
        return None
    if _same_norm(norms[keep], precision):
        return 0.0
    slope, _ = np.polyfit(np.log(freqs[keep]), np.log(norms[keep]), 1)
    return float(slope)


def popularity_deciles(freqs: np.ndarray, n_deciles: int = N_DECILES) -> np.ndarray:
    """Decile (0 = least popular) of each item by average rank of its frequency.

    Tied frequencies share a rank and hence a decile, so membership does not depend on
    row order; deciles can be uneven (or empty) when many items tie.
    """
    ranks = average_ranks(freqs)
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
