"""What rounding alone makes of item norms (docs/measures.md): the precision a table's norms
carry (:class:`NormPrecision`), and the plateaus of norms equal to within it that the rank
statistics tie (:func:`plateau_ties`)."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np


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
        A float8 table is always a wider one converted (torch computes nothing in float8),
        each entry rounded once: 1 epsilon, not 2 (measured on unit rows stored as
        float8_e4m3fn and float8_e5m2 at 2 to 256 dims: at most 0.67 of it). Its epsilon
        (0.125, 0.25) is close to real spreads, so the looser bound would tie away a real
        one (QA13 report F1, F2: norms growing 1.0 to 1.95 with frequency read as equal).
        """
        floats = float_format(self.dtype)
        if floats is None:
            return 0.0
        eps = floats[0]
        summed_in = min(eps, float(np.finfo(np.float32).eps))
        stored = eps if self.dtype.startswith("float8") else 2.0 * eps
        return float(max(2.0 * np.sqrt(max(self.dim, 1)) * summed_in, stored))

    @property
    def subnormal_step(self) -> float:
        """The dtype's smallest subnormal, the fixed step its entries are rounded to below its
        smallest normal (float32: 2⁻¹⁴⁹, bfloat16: 2⁻¹³³, float16: 2⁻²⁴); 0 for a non-float table."""
        floats = float_format(self.dtype)
        return 0.0 if floats is None else floats[1]

    def spread(self, largest: float) -> float:
        """The spread (max − min) that rounding alone can make of norms up to ``largest``:
        :attr:`tolerance` of it, or 2·sqrt(dim) subnormal steps where that is more.

        Why: an entry below the dtype's smallest normal is rounded to half a fixed step
        (:attr:`subnormal_step`), not half an ulp of itself, so a table held in subnormals
        carries more relative rounding than :attr:`tolerance` allows (float32 unit rows
        times 2⁻¹³⁰: 3e-6 of the norm at 16 dims, against 9.5e-7). A row's norm moves by at
        most sqrt(dim) half-steps (Cauchy–Schwarz), two rows err in opposite directions, and
        twice that if the scaling ran in the dtype: measured on unit rows times 2⁻¹³⁰ to 2⁻¹⁴⁵,
        at most 2.2 steps at 2 to 1,024 dims (2.8 allowed at 2, 8 at 16).
        So a unit-norm table has no ρ at any power-of-two scale, as at scale 1."""
        return max(self.tolerance * largest, 2.0 * float(np.sqrt(max(self.dim, 1))) * self.subnormal_step)

    @property
    def summed(self) -> float:
        """The share of :attr:`tolerance` the norm's own summation makes (2·sqrt(dim) float32
        epsilons at most): norms closer than that are never told apart, whatever the spread."""
        return min(self.tolerance, float(2.0 * np.sqrt(max(self.dim, 1)) * np.finfo(np.float32).eps))


def float_format(name: str) -> tuple[float, float] | None:
    """(epsilon, smallest subnormal) of the float dtype ``name``, numpy's or one only torch
    has (bfloat16, the float8 formats: the smallest normal times epsilon); None for a
    dtype that is not a float (integer tables: only exact ties count)."""
    try:
        kind: np.dtype[Any] | None = np.dtype(name)
    except TypeError:
        kind = None
    if kind is not None and np.issubdtype(kind, np.floating):
        finfo = np.finfo(kind)
        return float(finfo.eps), float(finfo.smallest_subnormal)
    if kind is not None and kind.kind in "biuc":  # integers, booleans, complex: no float format
        return None
    # Names numpy does not know, or knows only once ml_dtypes (keras, jax) has registered
    # them, as non-float "V" types: torch defines them. Torch is imported by every audit already.
    import torch

    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        return None
    info = torch.finfo(dtype)
    return float(info.eps), float(info.smallest_normal) * float(info.eps)


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
TOLD_APART_CHANCE = 1e-4
"""How seldom a plateau of rounding noise alone may be split by :func:`_told_apart` (the chance
that the next of its rows falls beyond the gap it must exceed, :func:`apart_factor`)."""


def plateau_ties(norms: np.ndarray, precision: NormPrecision | None) -> np.ndarray:
    """``norms`` with each plateau set to its smallest norm, for the rank statistics: a run of
    norms (in sorted order) spanning no more than the table's rounding
    (:meth:`NormPrecision.spread` of the largest norm) and holding at least
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
    tied = _tie_plateaus(norms[order], precision.spread(largest), max(PLATEAU_MIN_ROWS, PLATEAU_SHARE * n),
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


def apart_factor(rows: int) -> float:
    """How many times its own span a gap beside a plateau of ``rows`` norms must exceed to tell
    the rows beyond it apart (:func:`_told_apart`): α^(−1/(rows − 1)) − 1, at least 1, with α
    :data:`TOLD_APART_CHANCE`. Why: ``rows`` draws of one noise leave rows − 1 gaps that, with the
    next draw's, share the noise's width alike (exchangeable spacings), so that draw lies beyond
    c times their span with chance (1 + c)^−(rows − 1). Ten rows' span is a fair measure of their
    rounding (factor 1.78), three rows' is not (99): 9 items sharing one norm, stored in f16,
    were cut at a gap 1.67 times the span of the other 6, then down to 3 (measured on normal
    noise: a plateau is split at most 0.4% of the time at any size; was 40-60% at 4 to 6 rows).
    ``rows`` counts distinct norms: rows repeating one norm exactly (a dtype's quantised values)
    are one draw, and one distinct norm has no span to measure (infinite: never told apart)."""
    return math.inf if rows < 2 else max(1.0, TOLD_APART_CHANCE ** (-1.0 / (rows - 1)) - 1.0)


def _told_apart(run: np.ndarray, first: int, size: int, least: float, floor: float) -> tuple[int, int]:
    """(first, size) of the stretch ``run[first:first + size]`` less the rows on the far side of
    its widest gap, while that gap is wider than the other side's whole span times
    :func:`apart_factor` of its rows (and than ``floor``, the summation's rounding) and that side
    holds a plateau's ``least`` rows: a plateau's own norms lie within about that span of each
    other, so a row farther off is told apart from it (a bf16 clip's rounding spans 0.002, an
    unclipped row 0.01 below is not the clip), however wide the dtype's worst-case rounding is.
    Each pass drops at least one row."""
    while size > least:
        core = run[first:first + size]
        gaps = np.diff(core)
        widest = int(np.argmax(gaps))
        low, high = widest + 1, size - widest - 1  # rows below and above the widest gap
        keep_low = low > high  # the larger side is the plateau
        rest = core[:low] if keep_low else core[low:]
        distinct = int(np.count_nonzero(np.diff(rest))) + 1  # one repeated norm: no span, never told apart
        factor = apart_factor(distinct) if distinct > 1 else 0.0
        if rest.shape[0] < least or not factor or gaps[widest] <= max(factor * float(rest[-1] - rest[0]), floor):
            break
        first, size = (first, low) if keep_low else (first + low, high)
    return first, size
