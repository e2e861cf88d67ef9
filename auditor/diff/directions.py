"""Which way is better for each metric family: the one table the diff reads (docs/diff.md).

Each rule names a family of measures (shell-style patterns over the measure's name), the
aspect it speaks to (``bias`` or ``accuracy``), which way is better, and whether its
figures depend on the popularity definition (``retrieval.popularity``: interactions or
distinct users per item). A measure no rule names (a plugin's) has no direction
(``unknown``) and is taken to depend on popularity (the cautious side).

Two exceptions hold for every family: the ``popular`` scoring is a reference baseline
(most popular items, whatever the model), so its figures have no direction and always
depend on popularity; and accuracy ratios (dot / cosine) say which scoring is more
accurate, not whether the model improved, so they have none either. A bias measure's
ratio keeps the measure's direction (a lower head-share ratio is less skew).
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Literal, cast

from auditor.flat import RATIO, FlatEntry
from auditor.wording import CHANGE_WORDS

Aspect = Literal["bias", "accuracy", "none"]
Better = Literal["lower", "higher", "none"]
"""Which way is better."""
Direction = Literal["less bias", "more bias", "more accuracy", "less accuracy", "smaller gap", "larger gap",
                   "better fit", "worse fit", "less concentrated", "more concentrated", "unchanged", "neutral",
                   "unknown"]


@dataclass(frozen=True)
class Rule:
    """One family of measures and which way is better for it."""

    patterns: tuple[str, ...]
    aspect: Aspect
    better: Better
    popularity: bool
    """Its figures change meaning when the popularity definition changes."""
    words: str | None = None
    """How a change is worded (a key of :data:`auditor.wording.CHANGE_WORDS`; None: the
    aspect's own, "less/more bias" or "more/less accuracy")."""


RULES: tuple[Rule, ...] = (
    Rule(("head_share_*pct", "arp"), "bias", "lower", True),
    # A gap and a fit have no direction of popularity: head-only and tail-only lists both widen them.
    Rule(("pop_rsp", "pop_reo"), "bias", "lower", True, "gap"),
    Rule(("miscalibration", "miscalibration_*"), "bias", "lower", True, "fit"),
    # ΔGAP is the popularity lift of lists over profiles: a higher one serves more popular items. Its distance
    # from 0 is no fit: excluding training items alone lowers it most for head-heavy profiles (docs/measures.md).
    Rule(("gap_delta_*",), "bias", "lower", True),
    Rule(("aplt", "aclt"), "bias", "higher", True),
    Rule(("gini",), "bias", "lower", False, "spread"),
    Rule(("coverage",), "bias", "higher", False, "spread"),
    Rule(("novelty",), "bias", "higher", False),
    Rule(("spearman", "spearman_ci_lo", "spearman_ci_hi", "kendall", "loglog_slope",
          "served_spearman", "served_loglog_slope", "training_spearman", "item_bias_spearman"), "bias", "lower", False),
    Rule(("recall", "ndcg", "hit_rate", "mrr"), "accuracy", "higher", False),
    Rule(("ndcg_niche", "ndcg_diverse", "ndcg_blockbuster"), "accuracy", "higher", True),
    Rule(("index_recall",), "accuracy", "higher", False),
    # Pearson of norm and log(1 + f) moves with the norms' shape, not only their tie to popularity: a monotone
    # rescaling (mitigate's ‖v‖^α, the cure) keeps ρ and τ, halves the slope, yet raised it 0.974 → 0.987 (QA9 F6).
    Rule(("pearson_log",), "bias", "none", False),
    Rule(("overlap_dot_cosine", "overlap_served_dot", "overlap_served_cosine", "spearman_p",
          "training_angle_share_90_1"), "none", "none", False),
    # The served lists' overlap with the most-popular list: that list changes with the popularity definition.
    Rule(("overlap_served_popular",), "none", "none", True),
    # The training log's own top-1% share (served lists' reference) describes the data, not what was served.
    Rule(("head_share_log",), "none", "none", True),
)  # fmt: skip
"""The direction table (module docstring); every family the built-in reports hold."""
_UNKNOWN = Rule((), "none", "none", True)


def rule_for(entry: FlatEntry) -> Rule:
    """The rule of one flat metric (a measure no rule names: no direction, popularity-dependent)."""
    for rule in RULES:
        if any(fnmatchcase(entry.measure, pattern) for pattern in rule.patterns):
            return rule
    return _UNKNOWN


def has_direction(entry: FlatEntry) -> bool:
    """Whether a change of this figure is better or worse (module docstring's exceptions)."""
    rule = rule_for(entry)
    if rule.better == "none" or entry.scoring == "popular":
        return False
    return not (rule.aspect == "accuracy" and entry.scoring == RATIO)


def depends_on_popularity(entry: FlatEntry) -> bool:
    """Whether the figure changes meaning with the popularity definition."""
    return entry.scoring == "popular" or rule_for(entry).popularity


def direction(entry: FlatEntry, delta: float | None) -> Direction:
    """Which way ``delta`` (new − base) moved the figure."""
    rule = rule_for(entry)
    if delta is None:
        return "unknown"
    if delta == 0:
        return "unchanged"
    if not has_direction(entry):
        return "unknown" if rule is _UNKNOWN else "neutral"
    improved = (delta < 0) == (rule.better == "lower")
    better, worse = CHANGE_WORDS[rule.words or rule.aspect]
    return cast(Direction, better if improved else worse)
