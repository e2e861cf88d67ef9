"""Gate names taken apart: the per-K flat names some run would produce (:func:`per_k_name`,
:func:`well_formed`) and which of them compare two scorings' lists (:func:`compares_scorings`)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from auditor.alpha import ALPHA_PREFIX, alpha_scoring, scoring_alpha
from auditor.flat import BASE_METRICS, CORRELATION_FIGURES, FRACTIONS, RATIO
from auditor.sections import (
    ACCURACY_MEASURES, BUILTIN_LIST_MEASURES, GROUP_LIST_MEASURES, OVERLAP_SERVED, SCORINGS, SERVED, SEVERITIES,
    USER_GROUP_NAMES,
)

PERCENT_SHARES = frozenset(name for name, info in {**BUILTIN_LIST_MEASURES, **GROUP_LIST_MEASURES}.items()
                           if info.display == "pct")
"""The figures the reports print as percentages (a share 3.6%, a ΔGAP -74.2%): a threshold of
magnitude 1 or more on one was meant as a percentage, and the refusal says the fraction."""
_PER_K = re.compile(r"^(?P<stem>[A-Za-z_][\w.]*)@(?P<k>[1-9]\d*)$")
SERVED_OVERLAPS = frozenset(f"overlap_served_{s}" for s in OVERLAP_SERVED)
_UNSCORED = ("overlap_dot_cosine", "recall", *sorted(SERVED_OVERLAPS))
"""The per-K names without a scoring: the dot/cosine overlap, the index's recall, the served lists' overlaps."""


@dataclass(frozen=True)
class PerK:
    """A per-K flat name taken apart: ``<measure>_<scoring>@K``, or an unscored name
    (``recall@K``: ``scoring`` None)."""

    stem: str
    measure: str
    scoring: str | None
    k: int

    def at(self, k: int, scoring: str | None = None) -> str:
        """The same figure's name at cut-off ``k`` (and, given, under ``scoring``)."""
        scoring = scoring or self.scoring
        return f"{self.measure}_{scoring}@{k}" if scoring else f"{self.measure}@{k}"


def per_k_name(name: str, list_measures: Iterable[str] | None = None) -> PerK | None:
    """``name`` taken apart when it is a per-K flat name that some run would produce: a
    list measure (``list_measures``, default the built-in ones) or accuracy measure under
    dot, cosine, popular, served, ratio or a norm-aware α in [0, 1] (as ``alpha_<α>``
    writes it), at any K; None for anything else (a typo)."""
    match = _PER_K.match(name)
    if match is None:
        return None
    stem, k = match["stem"], int(match["k"])
    if stem in _UNSCORED:
        return PerK(stem, stem, None, k)
    measures = {*({**BUILTIN_LIST_MEASURES, **GROUP_LIST_MEASURES} if list_measures is None else list_measures),
                *ACCURACY_MEASURES}
    for scoring in (*SCORINGS, SERVED, RATIO):
        measure = stem.removesuffix(f"_{scoring}")
        if measure != stem and measure in measures:
            return PerK(stem, measure, scoring, k)
    measure, _, alpha = stem.rpartition(f"_{ALPHA_PREFIX}")
    exponent = scoring_alpha(ALPHA_PREFIX + alpha) if measure in measures else None
    if exponent is not None and 0 <= exponent <= 1 and alpha_scoring(exponent) == ALPHA_PREFIX + alpha:
        return PerK(stem, measure, ALPHA_PREFIX + alpha, k)
    return None


def well_formed(name: str, list_measures: Iterable[str] | None = None) -> bool:
    """Whether ``name`` is a flat name some run would produce (:data:`BASE_METRICS`, or
    :func:`per_k_name`), though not every run does: a gate on it is accepted and fails,
    where unmeasured, with :func:`why_unmeasured`'s reason."""
    return name in BASE_METRICS or per_k_name(name, list_measures) is not None


ORDER_MEASURES = frozenset({"ndcg", "mrr", *(f"ndcg_{group}" for group in USER_GROUP_NAMES)})
"""The measures that weigh a list's items by their rank (NDCG's discount, MRR's first hit), not
only by which items it holds: at a K that holds every candidate, dot and cosine still rank
those candidates apart, so these measure the ranking there. Every other measure (the list
measures, a plugin's included, recall, hit rate, the overlaps) reads the lists' item sets."""


def order_dependent(name: PerK) -> bool:
    """Whether ``name``'s figure depends on the order within the lists (:data:`ORDER_MEASURES`)."""
    return name.measure in ORDER_MEASURES


def compares_scorings(name: PerK) -> bool:
    """Whether ``name`` compares two scorings' item sets (a ``_ratio`` of a set-based measure, an
    overlap): a figure that a saturated K (every list holds every candidate) fixes by
    construction. A ratio of NDCG or MRR (:func:`order_dependent`) still compares the rankings;
    ``overlap_served_<scoring>`` compares the file's lists, which are not kept to the
    candidates (they may hold training items), with a scoring's: saturation fixes nothing there."""
    overlap = name.measure.startswith("overlap_") and name.measure not in SERVED_OVERLAPS
    return (name.scoring == RATIO or overlap) and not order_dependent(name)


FRACTION = "a fraction 0–1"
FIGURE_RANGES: dict[str, tuple[float, float, str]] = {
    "fraction": (0.0, 1.0, FRACTION),
    "correlation": (-1.0, 1.0, "a correlation from -1 to 1"),
    "ratio": (0.0, math.inf, "a dot / cosine ratio, never below 0"),
    "divergence": (0.0, 1.0, "a Jensen–Shannon divergence in bits, 0–1"),
    "relative_change": (-1.0, math.inf, "a relative change, never below -1 (-100%)"),
    "severity_level": (0.0, float(len(SEVERITIES) - 1),
                       f"a level 0–{len(SEVERITIES) - 1} ({', '.join(f'{i} {s}' for i, s in enumerate(SEVERITIES))})"),
    "parity": (0.0, 1.0, "a relative standard deviation of two rates, |a − b| / (a + b), 0–1"),
    "mean_count": (0.0, math.inf, "a mean training popularity (interactions or users per item), never below 0"),
    "novelty": (0.0, math.inf, "a mean self-information −log2(users(i)/n_users) in bits, never below 0"),
    "count": (0.0, math.inf, "a count, never below 0"),
    "angle_degrees": (0.0, 180.0, "an angle in degrees, 0–180"),
    "non_negative": (0.0, math.inf, "a non-negative figure, never below 0"),
}
"""Every bounded figure's range and unit in words: the fractions (:data:`~auditor.flat.FRACTIONS`
and each user group's NDCG), the correlations (:data:`~auditor.flat.CORRELATION_FIGURES`),
every ``_ratio``, the miscalibrations, the ΔGAPs, PopRSP and PopREO (parities), ARP and novelty
(never below 0), ACLT@K (0 to K, :func:`figure_range`), ``unsafe_globals`` (a count), the verdict's ``severity_level`` and the
training monitor's figures (:data:`~auditor.trace_schema.FIGURE_RANGE_KINDS`). Unbounded: the
log–log slopes; unknown: a plugin's measure."""
_GROUP_RANGES = {**{f"ndcg_{g}": "fraction" for g in USER_GROUP_NAMES},
                 **{f"miscalibration_{g}": "divergence" for g in USER_GROUP_NAMES}, "miscalibration": "divergence",
                 **{f"gap_delta_{g}": "relative_change" for g in USER_GROUP_NAMES},
                 "pop_rsp": "parity", "pop_reo": "parity", "arp": "mean_count", "novelty": "novelty"}
"""The per-K measures (the user groups', and the list measures that are no fraction) and their
range in :data:`FIGURE_RANGES` (ACLT's depends on K: :func:`figure_range`)."""
_NAME_RANGES = {"severity_level": "severity_level", "unsafe_globals": "count"}
"""The names alone (no K) that are no fraction or correlation, and their range."""
UNBOUNDED = frozenset({"loglog_slope", "served_loglog_slope"})
"""The built-in figures with no range: a slope of log norm on log frequency may take any sign."""


def figure_range(name: str, list_measures: Iterable[str] | None = None) -> tuple[float, float, str] | None:
    """The range of the flat figure ``name`` and its unit in words (:data:`FIGURE_RANGES`);
    None where it is unbounded or unknown."""
    parsed = per_k_name(name, list_measures)
    measure = name if parsed is None else parsed.measure
    if parsed is not None and parsed.scoring == RATIO:
        return FIGURE_RANGES["ratio"]
    if measure in FRACTIONS:
        return FIGURE_RANGES["fraction"]
    if parsed is not None and measure == "aclt":  # a mean count of long-tail items in K-item lists
        return 0.0, float(parsed.k), f"a mean number of long-tail items per {parsed.k}-item list, 0–{parsed.k}"
    if parsed is not None and measure in _GROUP_RANGES:
        return FIGURE_RANGES[_GROUP_RANGES[measure]]
    if parsed is None and measure in CORRELATION_FIGURES:
        return FIGURE_RANGES["correlation"]
    return FIGURE_RANGES[_NAME_RANGES[name]] if name in _NAME_RANGES else None


def _number(threshold: float) -> str:
    """``threshold`` as ``%g`` writes it, or every digit where that would round it."""
    short = f"{threshold:g}"
    return short if float(short) == threshold else repr(threshold)


def change_range(bounds: tuple[float, float, str] | None, change: str) -> tuple[float, float, str] | None:
    """The range of a change of a figure in ``bounds`` (:func:`figure_range`), as ``diff``
    gates read it: ``delta`` (new − base) of a figure in [a, b] lies in [a − b, b − a];
    ``rel`` ((new − base) / |base|) of a figure never below 0 is never below -1; "" is the
    figure itself. None where the change is unbounded (a ratio's delta, a ΔGAP's rel)."""
    if bounds is None or not change:
        return bounds
    low, high, unit = bounds
    if change == "delta":
        return None if math.isinf(high - low) else (low - high, high - low, f"a change of {unit}, so from "
                                                                           f"{_number(low - high)} to {_number(high - low)}")
    if low < 0:
        return None
    kind = unit.removesuffix(", never below 0")  # said once, as the reason for the bound
    return (-1.0, math.inf, f"the relative change of a figure never below 0 ({kind}), so never below -1 (-100%)")


def out_of_range(name: str, op: str, threshold: float, list_measures: Iterable[str] | None = None,
                 change: str = "", kind: str | None = None, bounds: tuple[float, float, str] | None = None) -> str:
    """Why ``name OP threshold`` is no gate (:func:`figure_range`; ``change``: ``delta`` or
    ``rel`` of ``name``, a ``diff`` gate, :func:`change_range`): a threshold outside the range,
    or one on its edge where the gate could never trip (``>1`` on a fraction, meant as 1%;
    ``<0`` on a ratio), with the fraction a percentage share may have meant; "" otherwise. A
    gate that trips on every run (``>=0``) is loud, not silent, and is taken. ``kind``: the
    figure's key in :data:`FIGURE_RANGES` where the caller names it (the training monitor's
    figures; a kind not in the table is unbounded), its fractions taken as percentage shares;
    ``bounds``: the range itself where the data sets it (a count of the monitor's item rows)."""
    if bounds is None:
        bounds = change_range(figure_range(name, list_measures) if kind is None else FIGURE_RANGES.get(kind), change)
    if bounds is None:
        return ""
    low, high, unit = bounds
    outside = not low <= threshold <= high
    whole = name == "severity_level" and change != "rel"  # a level, and its change, is a whole number
    never = (op == ">" and threshold == high) or (op == "<" and threshold == low) \
        or (op == "==" and whole and not threshold.is_integer())
    if not (outside or never):
        return ""
    parsed = per_k_name(name, list_measures)
    shown_as_pct = change == "rel" or (kind == "fraction" if kind is not None else  # as printed
                                       parsed is not None and parsed.scoring != RATIO and parsed.measure in PERCENT_SHARES)
    meant = f": {_number(threshold)}% is {threshold / 100:g}" if shown_as_pct and abs(threshold) >= 1 else ""
    shown = f"{name}.{change}" if change else name
    if outside:
        return f"{shown} is {unit}{meant}; the threshold {_number(threshold)} is outside that range"
    return f"{shown} is {unit}{meant}; it is never {op} {_number(threshold)}, so the gate could never trip"
