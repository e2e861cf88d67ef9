"""The verdict of a lists-only audit (served lists, no model; docs/served-lists.md, "Severity").

Without a model there is no cosine baseline and no mechanism to test: the question left is
whether the served lists *amplify* popularity, i.e. give the most popular items more of
the users' slots than those items hold of the training interactions. The top-1% items'
share of the served top-K slots is compared with their share of the training
popularity (interactions, or distinct users with ``popularity`` ``users``), over every list
of the file at each K asked, a K past the lists' length at their length
(``served.head_share_every_list``, :func:`auditor.retrieval.served.graded_shares`: one policy
with a model or without), with the same bands as dot vs cosine (:func:`auditor.harm.harm_band`:
ratio and absolute excess both count). The worst K (highest band, then larger ratio)
decides and is quoted (``graded_by`` ``served``: the lists graded it, there being no model). The
most-popular list's share of the same head (``served.head_share_popular``) is quoted beside it as a
reference, not a ceiling: the served lists are measured as served, so they may hold head items a user
trained on, which the most-popular list skips.

Beside a model (:func:`with_served_lists`) the same rule grades the served scoring: the
lists are what users met, so the severity is the worse of the model's and the served
lists'; the summary opens with the served lists when they graded it (``graded_by``
``served``) and quotes their figures otherwise, the most-popular reference counting the grade's head over
the queried users' lists (``served.head_share_popular``), said so where the grade covers more lists.
"""

from __future__ import annotations

import math

from dataclasses import replace

from auditor.errors import setting
from auditor.result import SEVERITIES, MeasuredSections, Severity, Verdict
from auditor.sections import share_ratio
from auditor.served_section import ServedSection
from auditor.harm import SEVERITY_GATE, harm_band
from auditor.wording import SKEW_EDGES, pct_pair, percent_text, ratio_figure

LISTS_SEVERITY_RULE = (
    "lists only (no model): severity = amplification: the top-1% items' share of the served top-K slots vs their "
    "share of the training popularity, at the worst measured K (highest band, then larger ratio): high from 2x and "
    "+5 points, moderate from 1.25x and +2 points, low from 1.1x and +0.5 points; below that none "
    "(docs/served-lists.md, \"Severity\")"
)


def amplification(served: float | None, log: float | None) -> tuple[Severity, float | None]:
    """The band and ratio of a served head share against the log's."""
    ratio = share_ratio(served, log)
    if served is None or log is None or ratio is None:
        return "none", None
    return harm_band(ratio, served - log), ratio


def amplification_figures(served: float | None, log: float | None, ratio: float | None) -> tuple[str, str, str]:
    """The served share, the log's and ``", RATIO×"`` for a sentence, worded as the model's
    dot/cosine skew is (:func:`~auditor.wording.pct_pair` with the bands' edges,
    :func:`~auditor.wording.ratio_figure`): a pair below a band never prints its edges
    (9.98% vs 7.99%, 1.249×, never 10.0% vs 8.0%, 1.25×), a small share never reads 0.0%."""
    served_text, log_text = pct_pair(served, log, SKEW_EDGES)
    times = "" if ratio is None else f", {ratio_figure(ratio)}×" if math.isfinite(ratio) else ", from none"
    return served_text, log_text, times


def share_text(share: float | None) -> str:
    """One share with the decimals its size needs (``0.036%``, never ``0.0%``)."""
    return "n/a" if share is None or not math.isfinite(share) else percent_text(100 * share)


def graded_worst(section: ServedSection) -> tuple[int, Severity, float | None] | None:
    """(K, severity, ratio) of the K that decides the served lists' severity, with a model or without
    (None: nothing graded): the lists-only rule over their grade, every list of the file at each K
    asked, at most their length (``head_share_every_list``, :func:`auditor.retrieval.served.graded_shares`)."""
    judged = [(k, *amplification(share, section.head_share_log)) for k, share in section.head_share_every_list.items()]
    return max(judged, key=_worst) if judged else None


def _worst(judged: tuple[int, Severity, float | None]) -> tuple[int, float, int]:
    """The order of :func:`graded_worst`: the highest band, then the larger ratio, then the smaller K."""
    return SEVERITIES.index(judged[1]), -math.inf if judged[2] is None else judged[2], -judged[0]


def served_beside_model(sections: MeasuredSections) -> tuple[int, Severity, float | None] | None:
    """Beside a model: (K, severity, ratio) of the served lists' worst K, graded as lists alone
    (:func:`graded_worst`; None: not graded, e.g. no training log)."""
    served = sections.served
    return None if served is None or served.head_share_log is None else graded_worst(served)


def _unit(sections: MeasuredSections) -> str:
    return "users (distinct per item)" if sections.settings.get("popularity") == "users" else "interactions"


def decide_lists_verdict(sections: MeasuredSections) -> Verdict:
    """The verdict of a lists-only audit (module docstring)."""
    section = sections.served
    worst = None if section is None else graded_worst(section)
    if section is None or worst is None or worst[0] not in section.at:
        return Verdict(False, "none", "Served lists not measured.", rule=LISTS_SEVERITY_RULE, assessed=False,
                       graded_by="served")
    k, severity, ratio = worst
    share, log_text, times = amplification_figures(section.head_share_every_list[k], section.head_share_log, ratio)
    popular = section.head_share_popular.get(k)  # the grade's head, as beside a model (QA "Served N4")
    summary = (
        f"The served lists give the top-1% most popular items {share} of their top-{k} slots, against "
        f"{log_text} of the training {_unit(sections)}{times} (the most-popular list: {share_text(popular)})."
    )
    if severity == "none":
        summary += " They do not amplify popularity beyond the training log."
        recommendations: list[str] = []
    else:
        summary += " The lists amplify popularity."
        recommendations = [
            "Audit the model that served these lists with the lists beside it (popaudit check MODEL "
            f"{setting('recommendations')} FILE): its dot, cosine and norm-aware scorings show whether item norms "
            "cause the skew, and what serving by another scoring would change.",
            "Compare the head share per K above with the most-popular list's: lists close to it serve little "
            "personalisation.",
        ]
    return Verdict(bias_detected=severity != "none", severity=severity, summary=summary,
                   recommendations=recommendations, quoted_k=k, rule=LISTS_SEVERITY_RULE,
                   gate=SEVERITY_GATE, graded_by="served")  # no model: the lists graded it


SERVED_BESIDE_MODEL_RULE = (
    "; with served lists beside the model (recommendations), severity is the worse of that and the served lists' "
    "amplification by the lists-only rule (the top-1% items' share of the served top-K slots vs their share of the "
    "training popularity, over every list of the file at the worst K asked, a K past their length at their length, "
    "as lists alone grade them), and graded_by names which one graded it "
    "(docs/served-lists.md, \"Beside a model\")"
)


def with_served_lists(verdict: Verdict, sections: MeasuredSections) -> Verdict:
    """A model's verdict with the served lists beside it graded too (module docstring):
    the worse severity wins; the served figures are quoted either way."""
    worst = served_beside_model(sections)
    if worst is None:
        return verdict
    k, severity, ratio = worst
    assert sections.served is not None
    retrieval = sections.retrieval
    served = sections.served
    share, log_text, times = amplification_figures(served.head_share_every_list[k], served.head_share_log, ratio)
    over = " over the queried users' lists" if served.n_graded_apart else ""  # not the grade's every list
    popular = [f"the most-popular list{over}: {share_text(served.head_share_popular[k])}"] if (
        k in served.head_share_popular) else []
    scope = "; ".join(popular + _grade_scope(served, k, k in sections.settings.get("ks", ()), retrieval is not None))
    figures = (f"the served lists give the top-1% most popular items {share} of their top-{k} slots, against "
               f"{log_text} of the training {_unit(sections)}{times}{f' ({scope})' if scope else ''}")
    rule = verdict.rule + SERVED_BESIDE_MODEL_RULE
    if SEVERITIES.index(severity) <= SEVERITIES.index(verdict.severity):
        graded = "they amplify popularity" if severity != "none" else "they do not amplify popularity beyond the log"
        return replace(verdict, summary=f"{verdict.summary} Served lists: {figures}; {graded} (severity {severity} "
                                         "by themselves).", rule=rule, served_k=k)
    own = "the model's own serving grades" if retrieval is not None else "the model, its serving not measured, grades"
    lead = f"The served lists amplify popularity: {figures}; severity {severity} is theirs ({own} {verdict.severity})."
    advice = ("The served lists skew more than the model's own dot-product serving: look at what the serving system "
              "adds after the model's scores (re-ranking, business rules, popularity boosts, candidate filters)."
              if retrieval is not None else "The served lists amplify popularity and the model's own serving was not "
              "measured: audit with retrieval to tell whether its scores or the serving system cause the skew.")
    return replace(verdict, bias_detected=True, severity=severity, summary=f"{lead} The model itself: {verdict.summary}",
                   recommendations=[advice, *verdict.recommendations], rule=rule, assessed=True, gate=SEVERITY_GATE,
                   graded_by="served", served_k=k,
                   quoted_k=k if verdict.quoted_k is None else verdict.quoted_k)  # the model graded no K: theirs is quoted


def _grade_scope(served: ServedSection, k: int, asked: bool, retrieved: bool) -> list[str]:
    """Where the grade covers more than the served scoring's per-K figures (``retrieved``: measured at
    all): how many lists, and the lists' length standing for the K asked (the verdict's reason says so)."""
    parts = []
    if served.n_graded_apart:
        apart = f", {served.n_graded_apart:,} of them in none of the served scoring's per-K figures" if retrieved else ""
        parts.append(f"graded over all {served.n_users:,} lists of the file{apart}")
    if not asked:
        parts.append(f"at K={k}, their length, which no K asked fits")
    return parts
