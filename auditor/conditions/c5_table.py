"""What the trained table itself shows of C5's growth: its head/median norm ratio and its
frequency–norm correlation.

C5's projection (:mod:`auditor.conditions.c5_growth`) measures the growth per update c/s²
at the finished checkpoint, where the norms are largest, so it can only understate the
growth training made: it can show that the learning rate was large enough, never by itself
that it was too small. The table is the growth that did happen; C5 reads it beside the
projection (docs/theory.md §7).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from auditor.metrics.frequency_norm import item_norms
from auditor.result import FrequencyNorm
from auditor.wording import correlation_figures

STRONG_RHO = 0.3
"""A frequency–norm ρ (significant and positive) this large is growth that materialised."""
NO_RHO = 0.1
"""A |ρ| below this (or one not significant) is no material frequency–norm relation."""
SIGNIFICANCE = 0.05
"""ρ is significant where its p-value (Spearman's t-test) is below this. The p-value, not
the bootstrap CI the report quotes beside it: it needs no resampling, so ``bootstrap``
(0 for no CI, 200 or 1,000 resamples) never changes C5's grade, in ``check`` or in the
experiment grids (a percentile CI drawn from a few hundred resamples can exclude 0 where
the test does not, and not with 0 resamples: the QA's low-lr run, ρ 0.062 with p 0.0505)."""
MIDDLE = (0.4, 0.6)
"""The frequency percentiles whose items stand for the median item (a band, so that it is
never empty where frequencies are whole numbers)."""


class TableGrowth(NamedTuple):
    """The trained table's evidence of growth."""

    ratio: float | None
    """The median norm of the items at or above the 99th-percentile frequency over that of
    the items between the 40th and 60th percentiles (items trained on; None: no frequencies
    or no norm in the middle band)."""
    rho: float | None
    """Spearman ρ of frequency and norm (None: not measured or undefined)."""
    significant: bool
    """ρ's p-value is below ``SIGNIFICANCE`` (its 95% CI excludes 0 where no p-value is defined)."""
    rho_text: str
    """ρ with its CI and log–log slope, as the evidence quotes it ("" when not measured)."""

    def grown(self, threshold: float) -> bool:
        """The table shows growth: a significant positive ρ that is strong, or whose head
        stands above the median by more than a random initialisation spreads norms."""
        if self.rho is None or not self.significant or self.rho <= 0:
            return False
        return self.rho >= STRONG_RHO or (self.ratio is not None and self.ratio >= threshold)

    def flat(self, threshold: float) -> bool:
        """The table shows no material growth: no material ρ and a head/median ratio within
        twice the init spread (``threshold`` is 1 + the spread; the head is a few items,
        and a random initialisation alone puts the median of a few norms about one spread
        away: the QA's low-lr run, untrained in effect, 1.132 against 1.125), at least one
        of the two measured."""
        if self.rho is None and self.ratio is None:
            return False
        material = self.rho is not None and self.significant and abs(self.rho) >= NO_RHO
        spread = self.ratio is not None and self.ratio >= 1 + 2 * (threshold - 1)
        return not material and not spread

    def describe(self) -> str:
        """The table's figures in words."""
        parts = [] if self.ratio is None else [f"head/median norm ratio {self.ratio:.3f}"]
        if self.rho_text:
            parts.append(self.rho_text)
        return ", ".join(parts) if parts else "no figure of the table"


def table_growth(table: np.ndarray, frequencies: np.ndarray | None, fn: FrequencyNorm | None) -> TableGrowth:
    """The growth evidence of an item ``table`` (rows: items) trained with ``frequencies``
    (None: unknown), with its frequency–norm statistics ``fn`` (None: not measured)."""
    ratio = None
    if frequencies is not None and np.asarray(frequencies).shape == (table.shape[0],):
        ratio = head_median_ratio(item_norms(table), np.asarray(frequencies, dtype=np.float64))
    rho = None if fn is None or not math.isfinite(fn.spearman) else float(fn.spearman)
    if fn is None or rho is None:
        return TableGrowth(ratio, None, False, "")
    lo, hi = fn.spearman_ci
    p = fn.spearman_p
    bounded = math.isfinite(lo) and math.isfinite(hi)
    significant = p < SIGNIFICANCE if math.isfinite(p) else bounded and (lo > 0 or hi < 0)
    rho_shown, *bounds = correlation_figures(rho, *((lo, hi) if bounded else ()))
    ci = f", 95% CI [{bounds[0]}, {bounds[1]}]" if bounded else ""
    # the p-value is what C5 grades ρ by (SIGNIFICANCE), so the evidence quotes it
    said_p = "" if not math.isfinite(p) else ", p < 1e-300" if p == 0 else f", p = {p:.3g}"
    text = f"Spearman ρ = {rho_shown}{ci}{said_p}" + (
        f", log–log slope {fn.loglog_slope:.3f}" if fn.loglog_slope else "")
    return TableGrowth(ratio, rho, bool(significant), text)


def head_median_ratio(norms: np.ndarray, frequencies: np.ndarray) -> float | None:
    """The median norm of the head items (frequency at or above the 99th percentile of the
    items trained on) over that of the middle items (40th–60th percentile); None without
    a positive frequency or a positive middle norm."""
    positive = frequencies > 0
    if not positive.any():
        return None
    f = frequencies[positive]
    n = norms[positive]
    lo, hi = np.quantile(f, MIDDLE[0], method="lower"), np.quantile(f, MIDDLE[1], method="higher")
    head = float(np.median(n[f >= np.quantile(f, 0.99)]))
    middle_norms = n[(f >= lo) & (f <= hi)]
    if middle_norms.size == 0:
        return None
    middle = float(np.median(middle_norms))
    if not (middle > 0 and math.isfinite(middle) and math.isfinite(head)):
        return None
    return head / middle
