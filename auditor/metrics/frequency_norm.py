"""How strongly item embedding norms follow item popularity (docs/measures.md).

All statistics are vectorised over items; Python loops run only over the ten deciles
and over row blocks of the table.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from auditor.errors import EmbeddingTableError
from auditor.memory import block_rows
from auditor.metrics.correlations import average_ranks, kendall_tau_b, pearson, spearman
from auditor.metrics.percentile_bootstrap import allowed_undefined
from auditor.metrics.spearman_ci import CI_LEVEL, SpearmanInterval, spearman_ci
from auditor.result import DecileRow, FrequencyNorm

N_DECILES = 10


class NormPrecision(NamedTuple):
    """The precision an item table's norms carry: its dtype and width (see :attr:`tolerance`)."""

    dtype: str
    dim: int

    @property
    def tolerance(self) -> float:
        """The relative spread of norms that rounding alone can make (0 for a non-float
        table: only exact ties count): 2·sqrt(dim) epsilons of the dtype the norms were
        computed in (the table's own, float32 at most), or 2 epsilons of a coarser dtype
        the entries are stored in (bfloat16, float16), whichever is larger.

        Why: a row normalised in float32 (``F.normalize``, or a float64 unit row stored
        as float32) has its entries rounded to half an ulp each, and the norm it was
        divided by was summed from dim rounded squares. Independent roundings add like a
        random walk, so a "unit" row's norm is 1 to within about sqrt(dim)·eps; two rows
        can err in opposite directions, hence twice that for the spread (max − min).
        Measured on random rows normalised in float32: at most 2.5 eps (3.0e-7) over
        200,000 rows of 2 to 8 dims, 2.1 eps over 5,000 rows of 16 to 1,024 dims, within
        the 2.8 eps allowed at 2 dims (8 eps, 9.5e-7, at 16); 1 dim is exact (±1).
        Entries stored in a coarser dtype are each rounded by at most half its ulp (twice
        that if the division ran in it), after a normaliser summed in float32 or wider
        (torch's reductions accumulate bf16/fp16 in float32): a norm moves by at most
        that share whatever the width, so the spread stays within 2 eps of the stored
        dtype and, unlike summation error, does not grow with sqrt(dim). A real spread
        of norms is far above either: 1e-3 of the norm is 1,000 times float32's at 16 dims.
        """
        if self.dtype == "bfloat16":  # a torch table numpy has no dtype for: 8 significand bits
            eps = 2.0**-7
        else:
            kind = np.dtype(self.dtype)
            if not np.issubdtype(kind, np.floating):
                return 0.0
            eps = float(np.finfo(kind).eps)
        summed_in = min(eps, float(np.finfo(np.float32).eps))
        return float(2.0 * max(np.sqrt(max(self.dim, 1)) * summed_in, eps))

    @property
    def summed(self) -> float:
        """The share of :attr:`tolerance` the norm's own summation makes (2·sqrt(dim) float32
        epsilons at most): norms closer than that are never told apart, whatever the spread."""
        return min(self.tolerance, float(2.0 * np.sqrt(max(self.dim, 1)) * np.finfo(np.float32).eps))


def norm_precision(table: Any, stored: str | None = None) -> NormPrecision:
    """The precision of an item table's norms: its width, and the coarser of its own dtype
    and the one the file stores it in (``stored``, ``ModelBundle.item_dtype``): a bf16 or
    fp16 file read as float32 keeps its own rounding, and a float64 file read as float32
    gets float32's, the norms being computed from the float32 table."""
    own = NormPrecision(np.dtype(table.dtype).name, int(table.shape[1]))
    if stored is None or stored == own.dtype:
        return own
    return max(own, NormPrecision(stored, own.dim), key=lambda precision: precision.tolerance)


PLATEAU_SHARE = 0.01
"""The share of the table (and at least :data:`PLATEAU_MIN_ROWS` rows) that rows sharing one
norm to within rounding must hold to be ranked as ties (:func:`plateau_ties`)."""
PLATEAU_MIN_ROWS = 3
PLATEAU_CONTRAST = 4
"""How many times the rows within rounding on either side of it a plateau's run must hold
(:func:`plateau_ties`): one norm stands out of its neighbourhood, a dense stretch does not."""


def plateau_ties(norms: np.ndarray, precision: NormPrecision | None) -> np.ndarray:
    """``norms`` with each plateau set to its smallest norm, for the rank statistics: a run of
    norms (in sorted order) spanning no more than the table's rounding
    (:attr:`NormPrecision.tolerance` of the largest norm) and holding at least
    :data:`PLATEAU_SHARE` of the rows (and :data:`PLATEAU_MIN_ROWS`): unit rows beside rescaled
    ones, a max-norm clip, found among near neighbours too (:func:`_tie_plateaus`). Their order
    is rounding noise, which would otherwise decide ρ.

    Why that share: norms of a trained table are continuous, so rows within 1e-6 of each
    other by chance number a few (two items of a few thousand), never 1% of the table; and
    a plateau smaller than 1% moves ρ by at most ~0.01³ through its own order. Elsewhere the
    raw norms are ranked as they are (the same array is returned where no plateau exists)."""
    n = norms.shape[0]
    if precision is None or n < PLATEAU_MIN_ROWS or not np.isfinite(norms).all():
        return norms
    largest = float(np.abs(norms).max())
    order = np.argsort(norms, kind="stable")
    tied = _tie_plateaus(norms[order], precision.tolerance * largest, max(PLATEAU_MIN_ROWS, PLATEAU_SHARE * n),
                         precision.summed * largest)
    if tied is None:
        return norms
    out = np.empty_like(norms)
    out[order] = tied
    return out


def _tie_plateaus(ranked: np.ndarray, tolerance: float, least: float, floor: float) -> np.ndarray | None:
    """Sorted ``ranked`` with each plateau set to its smallest norm (None: no plateau). The
    densest runs within ``tolerance`` first: a run of at least ``least`` rows holds a plateau
    where it holds :data:`PLATEAU_CONTRAST` times the rows within ``tolerance`` on either side
    of it, so a clip beside nearby unclipped rows ties while a dense continuous stretch,
    whose runs hold about as many rows as their neighbours, does not; an isolated run (no
    row on either side) ties whole; neither ties rows told apart from its core (:func:`_told_apart`,
    never closer than ``floor``). Each run taken (tied or not) leaves the rest, so at most
    n / ``least`` passes."""
    n = ranked.shape[0]
    at = np.arange(n)
    reach = np.searchsorted(ranked, ranked + tolerance, side="right")  # each run's end, from each start
    tied = None
    for _ in range(int(n // least) + 1):
        start = int(np.argmax(reach - at))
        stop = int(reach[start])
        if stop - start < least:
            break
        below = start - int(np.searchsorted(ranked, ranked[start] - tolerance, side="left"))
        above = int(np.searchsorted(ranked, ranked[stop - 1] + tolerance, side="right")) - stop
        if stop - start >= PLATEAU_CONTRAST * (below + above):
            first, last = _plateau_core(ranked[start:stop], below + above, least, floor)
            tied = ranked.copy() if tied is None else tied
            tied[start + first:start + last] = ranked[start + first]
        reach[start:stop] = at[start:stop]  # taken: no run starts in it, and none reaches into it
        np.minimum(reach[:start], start, out=reach[:start])
    return tied


def _plateau_core(run: np.ndarray, beside: int, least: float, floor: float) -> tuple[int, int]:
    """[first, last) of the plateau in a sorted ``run`` whose sides hold ``beside`` rows: the
    narrowest stretch of all but ``beside`` rows (the run's estimated background: its sides'),
    less any rows it holds beyond a gap wider than the rest's whole span (rows told apart from
    it: :func:`_told_apart`), widened over the rows next to it that lie no farther apart than
    twice its own widest gap (a plateau's rounding tail, not its neighbours). Without rows
    beside, the whole run less the rows told apart."""
    size = run.shape[0] - beside
    first = int(np.argmin(run[size - 1:] - run[: run.shape[0] - size + 1]))
    first, size = _told_apart(run, first, size, least, floor)
    gaps = np.diff(run)
    limit = 2 * float(gaps[first:first + size - 1].max(initial=0.0))
    wide_below = np.flatnonzero(gaps[:first] > limit)
    wide_above = np.flatnonzero(gaps[first + size - 1:] > limit)
    low = int(wide_below[-1]) + 1 if wide_below.size else 0
    high = first + size + (int(wide_above[0]) if wide_above.size else run.shape[0] - first - size)
    return low, high


def _told_apart(run: np.ndarray, first: int, size: int, least: float, floor: float) -> tuple[int, int]:
    """(first, size) of the stretch ``run[first:first + size]`` less the rows on the far side of
    its widest gap, while that gap is wider than the other side's whole span (and than
    ``floor``, the summation's rounding) and that side holds a plateau's ``least`` rows: a
    plateau's own norms lie within that span of each other, so a row farther off is told apart
    from it (a bf16 clip's rounding spans 0.002, an unclipped row 0.01 below is not the clip),
    however wide the dtype's worst-case rounding is. Each pass drops at least one row."""
    while size > least:
        core = run[first:first + size]
        gaps = np.diff(core)
        widest = int(np.argmax(gaps))
        low, high = widest + 1, size - widest - 1  # rows below and above the widest gap
        keep_low = low > high  # the larger side is the plateau
        rest = core[:low] if keep_low else core[low:]
        if rest.shape[0] < least or gaps[widest] <= max(float(rest[-1] - rest[0]), floor):
            break
        first, size = (first, low) if keep_low else (first + low, high)
    return first, size


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
    they differ by no more than the table's rounding (:attr:`NormPrecision.tolerance`,
    relative to the largest norm), else "" (they differ)."""
    spread = float(np.ptp(norms))
    if spread == 0:
        return "same norm"
    if precision is not None and spread <= precision.tolerance * float(np.abs(norms).max()):
        return f"same norm to within {precision.dtype} rounding"
    return ""


def _rounding_spread(norms: np.ndarray, precision: NormPrecision | None) -> str:
    """The figures behind "equal to within rounding", for the reason."""
    if precision is None:
        return ""
    return (
        f"(the norms span {float(np.ptp(norms) / np.abs(norms).max()):.2g} of the largest, within the "
        f"{precision.tolerance:.2g} that {precision.dtype} rounding at {precision.dim} dimensions can make, as in "
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
