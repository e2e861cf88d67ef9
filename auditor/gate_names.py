"""Gate names taken apart: the per-K flat names some run would produce (:func:`per_k_name`,
:func:`well_formed`) and which of them compare two scorings' lists (:func:`compares_scorings`)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from auditor.alpha import ALPHA_PREFIX, alpha_scoring, scoring_alpha
from auditor.flat import BASE_METRICS, CORRELATION_FIGURES, FRACTIONS, RATIO
from auditor.sections import (
    ACCURACY_MEASURES, BUILTIN_LIST_MEASURES, GROUP_LIST_MEASURES, OVERLAP_SERVED, SCORINGS, SERVED, USER_GROUP_NAMES,
)

PERCENT_SHARES = frozenset(name for name, info in BUILTIN_LIST_MEASURES.items() if info.display == "pct")
"""The fractions the reports print as percentages (3.6%): a threshold above 1 on one was meant
as a percentage, and the refusal says the fraction."""
_PER_K = re.compile(r"^(?P<stem>[A-Za-z_][\w.]*)@(?P<k>[1-9]\d*)$")
_UNSCORED = ("overlap_dot_cosine", "recall", *(f"overlap_served_{s}" for s in OVERLAP_SERVED))
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
    construction. A ratio of NDCG or MRR (:func:`order_dependent`) still compares the rankings."""
    return (name.scoring == RATIO or name.measure.startswith("overlap_")) and not order_dependent(name)


def figure_range(name: str, list_measures: Iterable[str] | None = None) -> tuple[float, float, str] | None:
    """The range of the flat figure ``name`` and its unit in words, from :data:`~auditor.flat.FRACTIONS`
    and :data:`~auditor.flat.CORRELATION_FIGURES` (a ratio, a count, a slope, a plugin's
    measure: None, unbounded or unknown)."""
    parsed = per_k_name(name, list_measures)
    measure = name if parsed is None else parsed.measure
    if parsed is not None and parsed.scoring == RATIO:
        return None
    if measure in FRACTIONS:
        return 0.0, 1.0, "a fraction 0–1"
    return (-1.0, 1.0, "a correlation from -1 to 1") if parsed is None and measure in CORRELATION_FIGURES else None


def out_of_range(name: str, threshold: float, list_measures: Iterable[str] | None = None) -> str:
    """Why ``threshold`` is no threshold for ``name`` (outside :func:`figure_range`: a gate on it
    never trips, or always does), with the fraction it may have meant; "" when it is within."""
    bounds = figure_range(name, list_measures)
    if bounds is None or bounds[0] <= threshold <= bounds[1]:
        return ""
    parsed = per_k_name(name, list_measures)
    shown_as_pct = parsed is not None and parsed.measure in PERCENT_SHARES  # as the reports print them
    meant = f": {threshold:g}% is {threshold / 100:g}" if shown_as_pct and threshold > 1 else ""
    return f"{name} is {bounds[2]}{meant}"
