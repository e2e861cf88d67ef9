"""The harm to serving: how much more of the top-K slots the popular items (the top 1%,
and the top 10%) get under dot-product than under cosine retrieval, per cut-off K
(:class:`Skew`), the bands that grade it (:func:`harm_band`), the K and head that decide
(:func:`worst_skew`), the harm in words, and the gate that trips on a run graded low or
worse (:data:`SEVERITY_GATE`). :mod:`auditor.verdict` turns it into the severity;
:mod:`auditor.lists_verdict` grades served lists in the same bands."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from auditor.errors import setting
from auditor.result import SEVERITIES, MeasuredSections, Severity
from auditor.retrieval.serving import SATURATED_SHARE as SATURATED_SHARE  # the one saturation policy
from auditor.retrieval.serving import saturated_at as saturated_at
from auditor.sections import EDGE_SLACK as EDGE_SLACK  # the bands live at the bottom, for the wording
from auditor.sections import HARM_BANDS as HARM_BANDS
from auditor.sections import Retrieval, finite_figure, share_ratio
from auditor.wording import SKEW_EDGES, partly_saturated, pct_pair, ratio_figure, saturated_said_at

SERVED_SHARE = 0.1
"""Cut-offs K up to this share of the catalogue are the lists a user is served."""
HEADS = (1, 10)
"""The heads the harm is graded on (the top x% of items by popularity, ``head_share_<x>pct``):
the top 1%, and the top 10%, which grade :data:`WIDE_HEAD_CAP` where they reach that band
and the top 1% grade lower. The top-1% items are often in most queried users' training items, which are never
candidates: their share of the slots is then small under any scoring, however strongly dot
serving favours popular items, and the skew shows one head wider (docs/report.md, "Severity")."""
WIDE_HEAD_CAP: Severity = "moderate"
"""The one grade the top 10% give: the bands are drawn for the top 1%'s shares, and a head
ten times wider passes the same excess in points more easily, so it shows that serving is
skewed when it reaches this band (never *none* or *low* beside such a top 10%) and then
grades exactly this, the most the correlation gives without a measured harm; below it,
the top 10% grade nothing (the top 1% decide)."""


@dataclass(frozen=True)
class Skew:
    """The top-``head``% head share of dot vs cosine lists at one cut-off K, and its harm band."""

    k: int
    dot: float | None
    cosine: float | None
    overlap: float | None
    head: int = 1
    """The head measured: the top ``head``% of items (one of :data:`HEADS`)."""

    @property
    def ratio(self) -> float | None:
        return share_ratio(self.dot, self.cosine)

    @property
    def excess(self) -> float | None:
        return None if self.dot is None or self.cosine is None else self.dot - self.cosine

    @property
    def severity(self) -> Severity:
        band = harm_band(self.ratio, self.excess)
        if self.head == HEADS[0]:
            return band
        return WIDE_HEAD_CAP if SEVERITIES.index(band) >= SEVERITIES.index(WIDE_HEAD_CAP) else "none"


def harm_band(ratio: float | None, excess: float | None) -> Severity:
    """The band of :data:`HARM_BANDS` a ratio and an excess share reach (``none``: below
    every band, or not measured); a figure on an edge reaches it (:data:`EDGE_SLACK`)."""
    if ratio is None or excess is None:
        return "none"
    low = 1 - EDGE_SLACK
    return next((name for name, r, e in HARM_BANDS if ratio >= r * low and excess >= e * low), "none")


SEVERITY_GATE = "severity_level>=1"
"""The CI gate ``check`` suggests: the verdict's own grade (flat ``severity_level``, the
severity's rank), so it trips exactly on a run graded low or worse, whichever rule graded
it (the harm bands against this run's cosine share, or the correlation and its interval).
A threshold on a head share could not: it fixes this run's cosine share, rounds across
a band's edge, and cannot say "and the interval excludes 0"."""


def served_ks(ks: Iterable[int], n_items: int | None) -> list[int]:
    """Of ``ks``, ascending, those whose lists are the size a user is served: K at most
    :data:`SERVED_SHARE` of the catalogue (the smallest K when none is; a list covering a
    large part of a small catalogue shows no skew; every K when the size is unknown)."""
    ks = sorted(ks)
    if n_items is None or n_items < 1:
        return ks
    return [k for k in ks if k <= SERVED_SHARE * n_items] or ks[:1]


def saturation_flags(retrieval: Retrieval) -> dict[int, bool]:
    """K -> :func:`saturated_at` of the retrieval's saturated-query counts among the queries
    with a candidate (``Retrieval.saturated``)."""
    return {k: saturated_at(n, candidate_queries(retrieval)) for k, n in retrieval.n_saturated.items()}


def candidate_queries(retrieval: Retrieval) -> int:
    """The queries with at least one candidate: a query trained on every item has an empty
    list under every scoring, so no K saturates it and no share counts it."""
    return retrieval.n_queries - retrieval.n_no_candidates


def measured_cutoffs(result: MeasuredSections) -> list[int]:
    """The measured cut-offs K whose lists can tell scorings apart (not saturated, see
    :data:`SATURATED_SHARE`), ascending."""
    if result.retrieval is None:
        return []
    return sorted(k for k in result.retrieval.at if not result.retrieval.saturated.get(k, False))


def saturated_cutoffs(result: MeasuredSections) -> list[int]:
    """The measured cut-offs K at which the harm is not measured (:data:`SATURATED_SHARE`), ascending."""
    retrieval = result.retrieval
    return [] if retrieval is None else sorted(k for k in retrieval.at if retrieval.saturated.get(k, False))


def saturated_text(result: MeasuredSections) -> str:
    """The harm not measured at the saturated K, in words ("" when none is)."""
    retrieval = result.retrieval
    said = saturated_said_at(retrieval, saturated_cutoffs(result), result.inputs.n_items)
    if not said or measured_cutoffs(result):
        return said
    assert retrieval is not None
    graded = retrieval.graded_up_to  # every measured K saturated: the K that would grade
    return said + (f"; K={graded} is the largest K that grades it ({setting('ks')} {graded})" if graded else
                   "; no K grades it: K=1 already holds every candidate for at least half the queries with one")


def partly_saturated_text(result: MeasuredSections, ks: Iterable[int | None]) -> str:
    """Of the graded ``ks``, those that saturate some queries, in words ("" when none does):
    their figures come from fewer queries than the lists count."""
    retrieval = result.retrieval
    if retrieval is None:
        return ""
    counts = retrieval.n_saturated
    said = [partly_saturated(k, counts[k], retrieval.n_queries, retrieval.n_no_candidates)
            for k in dict.fromkeys(ks) if k and counts.get(k)]
    return (f"{'; '.join(said)} (any scoring serves those the same items, which draws the ratio toward 1)"
            if said else "")


def served_cutoffs(result: MeasuredSections) -> list[int]:
    """The measured cut-offs K the verdict may quote (:func:`served_ks` of :func:`measured_cutoffs`)."""
    ks = measured_cutoffs(result)
    return served_ks(ks, result.inputs.n_items) if ks else []


def skew_at(result: MeasuredSections, k: int, head: int = 1) -> Skew:
    """The top-``head``% head-share skew of the lists at cut-off ``k`` (which must be measured)."""
    assert result.retrieval is not None
    cut, name = result.retrieval.at[k], f"head_share_{head}pct"
    return Skew(k, finite_figure(cut.dot.get(name)), finite_figure(cut.cosine.get(name)),
                finite_figure(cut.overlap_dot_cosine), head)


def worst_skew(result: MeasuredSections) -> Skew | None:
    """The served cut-off and head with the most harm: the highest band, the top 1% on an
    equal band (ties: the larger ratio, then the smaller K); the one severity follows and
    reports quote."""
    skews = [skew_at(result, k, head) for k in served_cutoffs(result) for head in HEADS]
    if not skews:
        return None

    def weight(skew: Skew) -> tuple[int, bool, float, int]:
        ratio = skew.ratio if skew.ratio is not None else -1.0
        return (SEVERITIES.index(skew.severity), skew.head == HEADS[0], ratio, -skew.k)

    return max(skews, key=weight)


def graded_head(result: MeasuredSections) -> int:
    """The head that graded the severity (the top 10% where they reached their band and the
    top 1% graded lower, else the top 1%): the head the accuracy trade-off judges a serving
    change on too, so that its advice is about the head share the verdict quotes."""
    skew = worst_skew(result)
    return HEADS[0] if skew is None else skew.head


def narrow_skew(result: MeasuredSections, skew: Skew) -> Skew | None:
    """The top-1% skew at ``skew``'s K when a wider head graded it (what the verdict quotes
    beside it: the narrow head's smaller figures), else None."""
    return None if skew.head == HEADS[0] else skew_at(result, skew.k, HEADS[0])


def dot_serves_cosine(result: MeasuredSections) -> bool:
    """Whether dot-product and cosine retrieval served the same items to every query at
    every served K (overlap 1): dot serving then has no skew of its own, whatever the
    head shares are (an equal-norm table, such as ``mitigate --alpha 0``'s output)."""
    skews = [skew_at(result, k) for k in served_cutoffs(result)]
    return bool(skews) and all(skew.overlap == 1.0 for skew in skews)


def quoted_cutoff(result: MeasuredSections) -> int | None:
    """The K that verdicts and headlines quote (see :func:`worst_skew`)."""
    skew = worst_skew(result)
    return None if skew is None else skew.k


def first_seen_skew(result: MeasuredSections) -> Skew | None:
    """The skew at the smallest served K (the first slots a user sees) when it is not the
    quoted K: reports quote it beside the worst K (it never changes the severity)."""
    served, worst = served_cutoffs(result), worst_skew(result)
    if not served or worst is None or served[0] == worst.k:
        return None
    return skew_at(result, served[0], worst.head)


def skew_text(skew: Skew) -> str:
    """The skew in figures, naming the head measured."""
    assert skew.ratio is not None  # quoted only where a ratio was measured
    times = ratio_figure(skew.ratio)
    dot, cosine = pct_pair(skew.dot, skew.cosine, SKEW_EDGES)  # beside its band: never onto an edge
    return (
        f"dot-product retrieval gives the top-{skew.head}% items {times}× the slots cosine retrieval does at "
        f"K={skew.k} ({dot} vs {cosine})"
    )


def narrow_text(result: MeasuredSections, skew: Skew) -> str:
    """Where the top 10% graded the harm: the top-1% items' smaller figures beside it, and why."""
    narrow = narrow_skew(result, skew)
    if narrow is None:
        return ""
    dot, cosine = pct_pair(narrow.dot, narrow.cosine, SKEW_EDGES)
    times = f"{ratio_figure(narrow.ratio)}×, " if narrow.ratio is not None else ""
    return (f" (the top-1% items: {times}{dot} vs {cosine}, band {narrow.severity}: the top 10% reach the "
            f"{WIDE_HEAD_CAP} band and grade the harm)")


def harm_words(skew: Skew, harm: Severity) -> str:
    """What dot-product serving does to popular items, in the words of its band; below
    every band, which way and by how much (a ratio of tiny shares is not harm, and a
    ratio below 1 is the opposite of over-serving)."""
    if harm != "none":
        return {"high": "serving by dot product strongly over-serves popular items",
                "moderate": "serving by dot product over-serves popular items",
                "low": "serving by dot product slightly over-serves popular items"}[harm]
    assert skew.excess is not None
    if skew.dot == skew.cosine == 1.0:
        return f"the top-{skew.head}% items (ties at the cut included) fill every slot, so serving has no popularity order to skew"
    items = f"the top-{skew.head}% items"
    if skew.excess < 0:
        return f"serving by dot product gives {items} fewer slots than cosine ({100 * skew.excess:+.2f} points)"
    if skew.excess == 0:
        return f"serving by dot product gives {items} as many slots as cosine"
    return (f"serving by dot product gives {items} {100 * skew.excess:+.2f} points more of the slots than "
            "cosine, below every harm band")


def approximate_lead(result: MeasuredSections) -> str:
    """The verdict's first words when an approximate index found the lists: every
    retrieval figure it quotes is then approximate, at the quoted K's recall ("" when exact)."""
    retrieval = result.retrieval
    if retrieval is None or not retrieval.recall:
        return ""
    skew = worst_skew(result)
    said = retrieval.approximate(skew.k if skew is not None else None)
    return (f"{said[0].upper()}{said[1:]}: the retrieval figures come from an approximate index's lists, not exact "
            "search's, and can be higher or lower than exact search's. ")
