"""The retrieval and accuracy sections of the audit result (docs/report.md)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Severity = Literal["none", "low", "moderate", "high"]
HARM_BANDS: tuple[tuple[Severity, float, float], ...] = (
    ("high", 2.0, 0.05),
    ("moderate", 1.25, 0.02),
    ("low", 1.1, 0.005),
)
"""(severity, minimum dot/cosine ratio, minimum excess share) of top-1% head share: the bands
:mod:`auditor.harm` grades with, here so that figures printed beside them keep to their side."""
EDGE_SLACK = 1e-9
"""Relative slack at a band's edges: head shares are ratios of slot counts, and their
quotient and difference carry float rounding (0.06 - 0.01 = 0.04999...), which must not
drop a figure that sits exactly on an edge into the band below."""
SEVERITIES: tuple[Severity, ...] = ("none", "low", "moderate", "high")
"""Every severity, least harmful first: the order verdicts, rankings, diffs and ``severity_level`` compare them in."""
SCORINGS = ("dot", "cosine", "popular")
"""The fixed scorings of every audit (norm-aware ones are named by :func:`auditor.alpha.alpha_scoring`)."""
ACCURACY_MEASURES = ("recall", "ndcg", "hit_rate", "mrr")
SERVED = "served"
"""The scoring of served lists given as ``recommendations`` (docs/served-lists.md)."""
OVERLAP_SERVED = ("dot", "cosine", "popular")
"""``overlap_served_<scoring>@K``: the share of that scoring's top-K found in the served top-K."""
OVERLAP_SERVED_DEFINITION = ("overlap_served_<scoring>: mean over queries with a served list of |served list ∩ "
                             "that scoring's list| / K (dot, cosine, popular)")


def share_ratio(a: Any, b: Any) -> float | None:
    """``a / b`` of two figures that cannot be negative (dot / cosine, served / log): +inf
    when only ``b`` is 0 (the most skew there is: a gate on it trips), None when both are 0,
    either is missing, or either is negative (a ratio of two signed figures, such as two
    negative ΔGAPs, does not say which is larger). The one ratio policy of flat metrics,
    report tables and verdicts."""
    a, b = finite_figure(a), finite_figure(b)
    if a is None or b is None or a < 0 or b < 0:
        return None
    if b == 0:
        return math.inf if a > 0 else None
    return a / b


def finite_figure(value: Any) -> float | None:
    """A report figure as a float; None when it is missing, not a number (a bool is not one)
    or not finite (JSON null). The one test of a figure the flat metrics, ratios and
    verdicts read."""
    if value is None or isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


@dataclass(frozen=True)
class ListMeasureInfo:
    """How reports show a list measure: its label and display format (``pct``, or
    ``numN``: N decimals)."""

    label: str
    display: str


BUILTIN_LIST_MEASURES: dict[str, ListMeasureInfo] = {
    "head_share_1pct": ListMeasureInfo("head share, top 1% of items", "pct"),
    "head_share_10pct": ListMeasureInfo("head share, top 10% of items", "pct"),
    "head_share_20pct": ListMeasureInfo("head share, top 20% of items", "pct"),
    "arp": ListMeasureInfo("ARP (mean training frequency of recommended items)", "num1"),
    "aplt": ListMeasureInfo("APLT (long-tail share per list)", "pct"),
    "gini": ListMeasureInfo("Gini index of exposure", "num3"),
    "coverage": ListMeasureInfo("catalogue coverage", "pct"),
    "novelty": ListMeasureInfo("novelty (bits)", "num2"),
}
"""How reports label and show the built-in list measures, in report order (their
definitions and how they are measured: :mod:`auditor.metrics.builtin_measures`)."""


USER_GROUP_NAMES = ("niche", "diverse", "blockbuster")
"""The user groups, in report order (``auditor.metrics.popularity_groups.USER_GROUPS``)."""

GROUP_LIST_MEASURES: dict[str, ListMeasureInfo] = {
    **{name: info for group in USER_GROUP_NAMES for name, info in (
        (f"gap_delta_{group}", ListMeasureInfo(f"ΔGAP, {group} users (list vs profile popularity)", "pct")),
        (f"miscalibration_{group}", ListMeasureInfo(f"popularity miscalibration, {group} users (JS, bits)", "num3")),
        (f"ndcg_{group}", ListMeasureInfo(f"NDCG, {group} users", "num3")),
    )},
    "miscalibration": ListMeasureInfo("popularity miscalibration, all users (JS, bits)", "num3"),
    "pop_rsp": ListMeasureInfo("PopRSP (short-head vs long-tail statistical parity)", "num3"),
    "pop_reo": ListMeasureInfo("PopREO (short-head vs long-tail equal opportunity)", "num3"),
    "aclt": ListMeasureInfo("ACLT (long-tail items per list)", "num2"),
}  # fmt: skip
"""How reports label and show the built-in user- and item-side list measures, in report
order, after :data:`BUILTIN_LIST_MEASURES` (how they are measured:
:mod:`auditor.metrics.group_measures`)."""

WHO_PAYS = "who_pays"
"""The ``not_measured`` key of the user- and item-side measures (the Who-pays table, ΔGAP,
miscalibration, the group NDCG, PopRSP and PopREO) when each user's training items are
unknown: the one reason the report and every gate on those measures quote."""

TIED_GROUPS = "share one popular ratio"
"""The words of the warning that every user ties at one popular ratio (niche and blockbuster
groups undefined, their figures null), by which a gate on those figures finds and quotes it."""



def builtin_list_measures() -> dict[str, ListMeasureInfo]:
    """The built-in list measures' labels, in report order (a copy)."""
    return dict(BUILTIN_LIST_MEASURES)


@dataclass(frozen=True)
class ListMeasures(Mapping[str, "float | None"]):
    """The list measures (docs/measures.md, and plugins') of one set of top-K lists:
    measure name -> value (None: not measurable, e.g. novelty without user counts).

    The measures are those registered through ``popaudit_measures`` (built-ins:
    :mod:`auditor.metrics.builtin_measures`), in report order.
    """

    data: Mapping[str, float | None]

    def __getitem__(self, name: str) -> float | None:
        return self.data[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)

    def number(self, name: str) -> float:
        """The value of ``name`` as a float: NaN when not measured (or not registered)."""
        value = self.data.get(name)
        return math.nan if value is None else float(value)


@dataclass
class CutoffMeasures:
    """The measures of each scoring at one cut-off K, and the dot/cosine overlap."""

    dot: ListMeasures
    cosine: ListMeasures
    popular: ListMeasures
    overlap_dot_cosine: float
    norm_aware: dict[str, ListMeasures] = field(default_factory=dict)
    """``alpha_<a>`` -> measures of the norm-aware scoring (only with ``alphas`` measured);
    ``served`` -> the measures of the served lists given as ``recommendations``."""
    overlap_served: dict[str, float] = field(default_factory=dict)
    """Scoring (dot, cosine, popular) -> mean share of its top-K found in the served top-K
    (only with served lists; JSON ``overlap_served_<scoring>``)."""

    def scorings(self) -> dict[str, ListMeasures]:
        """Every scoring measured at this cut-off, by name: dot, cosine, popular, alpha_<a>."""
        return {"dot": self.dot, "cosine": self.cosine, "popular": self.popular, **self.norm_aware}


@dataclass
class Population:
    """Who retrieval served (docs/measures.md, "Query population"): every exposure figure,
    gate and the verdict are over these queries, with or without a holdout."""

    source: str
    """``users`` (user-table rows), ``history`` (mean of training items) or ``file``."""
    n_queries: int
    n_eligible: int
    """Users (or file rows) the queries were drawn from."""
    sampled: bool
    seed: int
    n_zero_queries: int
    seen_items: str
    """``excluded`` (each user's training items never served), ``kept`` or ``unknown``."""
    n_user_rows: int | None
    n_untrained_user_rows: int | None
    """User-table rows of users who never appear in the training log: not queried."""
    n_unmatched_log_users: int
    """Training-log users without a user-table row: cannot be queried."""
    description: str


RECALL_FLOOR = 0.9
"""The recall@K of an approximate index below which the audit warns that its lists miss
much of exact search's (their figures can then be far off, either way: :data:`APPROXIMATE_ERROR`)."""
APPROXIMATE_ERROR = (
    "an approximate index's figures can err either way: IVF misses high-norm (popular) items first and "
    "understates the dot skew, HNSW's graph search favours high-norm hub items and can overstate it"
)
"""Why an approximate index's figures are no bound in either direction (the one wording of
the warnings, the verdict and the gate lines; QA measured IVF at a top-1% share of 0.635
against exact 0.783, HNSW at 0.804 against 0.783)."""


@dataclass
class Retrieval:
    """The retrieval section: measures per K, index, recall and the definitions used."""

    n_queries: int
    index: str
    at: dict[int, CutoffMeasures]
    recall: dict[int, float] | None = None
    queries: str = ""
    popularity: str = "interactions"
    n_zero_queries: int = 0
    definitions: dict[str, str] = field(default_factory=dict)
    list_measures: dict[str, ListMeasureInfo] = field(default_factory=builtin_list_measures)
    """The list measures measured, in report order, with their labels (not in the JSON)."""
    population: Population | None = None
    """Who was queried (None only for results built by hand)."""
    user_groups: dict[int, dict[str, list[dict[str, Any]]]] = field(default_factory=dict)
    """K -> scoring -> one JSON-ready row per user group (niche, diverse, blockbuster):
    ``group``, ``n_users``, ``gap_profile``, ``gap_list``, ``gap_delta``, ``miscalibration``,
    ``n_evaluated``, ``ndcg`` (docs/report.md); empty without each user's training items."""
    tied_ratio: float | None = None
    """The one popular ratio every grouped user shares, when they all do: the user groups are then undefined
    (niche and blockbuster empty, every user diverse); None otherwise. Not in the JSON (the warnings say it)."""
    exposure_shift: dict[int, dict[str, Any]] = field(default_factory=dict)
    """K -> the items dot serving raises and lowers most over cosine, JSON-ready (docs/report.md)."""
    saturated: dict[int, bool] = field(default_factory=dict)
    """K -> whether the harm is not measured at K (:func:`auditor.harm.saturated_at` of ``n_saturated``)."""
    n_saturated: dict[int, int] = field(default_factory=dict)
    """K -> queries K saturates: it reaches their candidate count (the catalogue less their excluded
    training items, at least 1): every scoring's list holds every candidate (empty: not known)."""
    n_no_candidates: int = 0
    """Queries trained on every item: empty lists under any scoring, in no K's saturated count or share."""
    graded_up_to: int | None = None
    """The largest K that would grade (not saturated: :func:`auditor.harm.saturated_at`); None: none would."""

    def approximate(self, k: int | None = None) -> str:
        """How figures from these lists are said when an approximate index found them,
        e.g. ``approximate (ivf, recall@10 0.649)``: recall at ``k`` (None: the lowest over
        every K); "" for exact lists."""
        recall = self.recall
        if not recall:
            return ""
        at = k if k is not None and k in recall else min(recall, key=recall.__getitem__)
        value = f"{recall[at]:.3f}" if math.isfinite(recall[at]) else "n/a"  # a sample without exact neighbours
        return f"approximate ({self.index}, recall@{at} {value})"


@dataclass(frozen=True)
class RankingAccuracy:
    """Held-out accuracy of one scoring at one K (RecBole's definitions, docs/measures.md)."""

    recall: float
    ndcg: float
    hit_rate: float
    mrr: float


@dataclass(frozen=True)
class ScoringChange:
    """One scoring against dot at the trade-off's K: its NDCG@K and head share (``Accuracy.head_percent``)
    minus dot's, with paired bootstrap 95% intervals over users (None: no bootstrap ran)."""

    ndcg_delta: float
    head_share_delta: float
    ndcg_delta_ci: tuple[float, float] | None = None
    head_share_delta_ci: tuple[float, float] | None = None

    @property
    def clearly_less_head(self) -> bool:
        """The head share falls, and its interval excludes 0 (the point alone without one)."""
        if self.head_share_delta_ci is not None:
            return self.head_share_delta_ci[1] < 0
        return self.head_share_delta < 0


@dataclass
class Accuracy:
    """The accuracy section: held-out accuracy per K and scoring, and the trade-off's choice."""

    protocol: str
    n_users_evaluated: int
    n_dropped: int
    """Held-out interactions left out: item without a table row, or user without a query."""
    at: dict[int, dict[str, RankingAccuracy]]
    holdout: str = ""
    holdout_fingerprint: str | None = None  # the held-out pairs' content (docs/report.md); None: not recorded
    n_holdout_interactions: int = 0
    n_dropped_users: int = 0
    seen_excluded: bool = True
    """Whether the user's training items were kept out of the lists evaluated (false for served lists
    alone: they are evaluated as served; ``popular_seen_excluded`` says the most-popular list's)."""
    tolerance: float | None = 0.98
    """The share of dot's NDCG a recommended scoring keeps (None: no dot, served lists alone)."""
    quoted_k: int | None = None
    """The K the trade-off is judged at (the verdict's quoted K, where measured)."""
    head_percent: int = 1
    """The head whose share the trade-off judges (``head_share_<x>pct``): the one that graded the severity."""
    recommended: str | None = None
    """The scoring the trade-off recommends (dot, cosine or alpha_<a>); None: not decided, or a mitigate output."""
    picked_on_output: str | None = None  # a mitigate output's pick against its own dot: named, never recommended
    recommendation: str = ""
    pareto: list[str] = field(default_factory=list)
    """Scorings on the accuracy/head-share Pareto front at ``quoted_k``."""
    n_users_not_in_training: int = 0
    """Held-out users absent from the training log (no trained vector): not evaluated."""
    n_users_not_sampled: int = 0
    """Held-out users who trained but were not queried (sampled out, zero vector, no training item on a table row)."""
    changes: dict[str, ScoringChange] = field(default_factory=dict)
    """Each other scoring against dot at ``quoted_k``, with paired bootstrap intervals."""
    n_bootstrap: int = 0
    """Resamples of the paired bootstrap over users behind ``changes`` (0: none ran)."""
    ci_undefined_reason: str | None = None
    """Why ``changes`` lack intervals though ``--bootstrap`` asked (one queried or evaluated user); else None."""
    best_alternative: str | None = None
    """The personalised scoring other than the incumbent with the best trade-off, recommended or not."""
    incumbent: str | None = "dot"
    """The model's own scoring, which the trade-off's choice is judged against: ``dot``, or
    ``cosine`` for a model that scores by cosine (SimpleX, ``Dot(normalize=True)``, an
    L2-normalising graph); ``changes`` stay against dot. None: no model (served lists alone)."""
    repeats: str = ""
    """How held-out pairs repeating a training pair count (:func:`auditor.evaluation.repeats_convention`)."""
    n_repeats_dropped: int = 0
    """Of ``n_holdout_interactions``, those a checkpoint's recorded split dropped as repeats of a training
    pair (or of an earlier held-out one) before storing its pairs: not evaluated (0 for a held-out file)."""
    n_pairs_evaluated: int = 0
    """The distinct (user, item) held-out pairs of the evaluated users: what recall and NDCG average over (|H_u| summed)."""
    popular_seen_excluded: bool | None = None
    """Served lists alone: whether the most-popular list left out each user's training items (None beside a model)."""

    @property
    def n_dropped_all(self) -> int:
        """Held-out interactions not evaluated for any reason the section counts: no table
        row (``n_dropped``) or a recorded split's repeat (``n_repeats_dropped``)."""
        return self.n_dropped + self.n_repeats_dropped
