"""The verdict: does dot-product serving over-serve popular items here, how much, and why.

Two questions, kept apart:

* **Mechanism**: do item norms track training frequency? Spearman ρ > 0 with a 95% CI
  that excludes 0 (the p-value stands in when no bootstrap ran), graded by |ρ|:
  weak from :data:`RHO_WEAK`, moderate from :data:`RHO_MODERATE`, strong from
  :data:`RHO_STRONG`.
* **Harm** (:mod:`auditor.harm`): how much more of the served slots the top-1% items get
  under dot-product than under cosine retrieval, measured at every cut-off K a user is
  served (K at most 10% of the catalogue; the smallest K when none is; never a K that reaches
  every query's candidate count, where every list holds every candidate); the top-10% items
  grade it moderate where they reach that band and the top 1% grade lower (the top-1%
  items are often in most queried users' histories, so never candidates). Both the ratio and the absolute excess
  count: 0.7% vs 0.5% is 1.4× but harms nobody.

Severity is the harm (:data:`~auditor.harm.HARM_BANDS`, the worst K decides and is the one quoted;
the smallest served K, what a user sees first, is quoted beside it when it differs).
A skew below every band is negligible: then severity is "none" even when norms follow
popularity, and the headline says so (norms follow popularity, serving is not skewed).
Without a retrieval measurement, or when neither scoring gives the top-1% items a slot
(0 vs 0: the queried users trained on them), the harm is unknown: the mechanism gives at
most "moderate". ``bias_detected`` is severity above "none". When the model's own
dot-product accuracy is below the most-popular list's, the verdict says the model is
weak before any advice about bias. Recommendations are chosen from the evidence
(conditions, retrieval, probes, accuracy), each with its caveat.
"""

from __future__ import annotations

from auditor.advice import serving_recommendations, training_recommendations
from auditor.errors import setting
from auditor.harm import (
    HARM_BANDS, SEVERITY_GATE, Skew, approximate_lead, dot_serves_cosine, first_seen_skew, saturated_text, worst_skew,
)
from auditor.lists_verdict import with_served_lists
from auditor.mechanism import graded_correlation
from auditor.protocol import protocol_lead
from auditor.result import ORTHOGONALITY_IDS, MeasuredSections, Condition, Verdict
from auditor.sections import finite_figure
from auditor.verdict_text import Strength, summary_text, unseen_head
from auditor.wording import SKEW_EDGES, compared_figures, correlation_figures, pct, pct_pair, ratio_figure

RHO_WEAK = 0.1
RHO_MODERATE = 0.3
RHO_STRONG = 0.5
SEVERITY_RULE = (
    "severity = the harm: the top-1% items' share of "
    "dot-product vs cosine top-K slots (moderate where the top-10% items' reaches that band and the top 1%'s is "
    "graded lower) at the worst served K (K <= 10% of the catalogue, else the smallest K; "
    "worst: the highest band, then the larger ratio): high from 2x and +5 points, moderate "
    "from 1.25x and +2 points, low from 1.1x and +0.5 points; below that the skew is negligible "
    "and severity is none, even when norms track popularity; without retrieval, or when neither scoring "
    "gives the top-1% items a slot, or at a K that reaches every query's candidate count (every list holds every "
    "candidate: the harm is not measured there), the correlation alone gives at most moderate (docs/report.md, "
    "\"Severity\")"
)


def decide_verdict(result: MeasuredSections) -> Verdict:
    """The verdict of one audit; sections that are None count as not measured."""
    fn = graded_correlation(result).figures  # the served vectors' where they stand in for the stored table
    rho = finite_figure(fn.spearman) if fn is not None else None
    lo, hi = (finite_figure(fn.spearman_ci[0]), finite_figure(fn.spearman_ci[1])) if fn is not None else (None, None)
    p = finite_figure(fn.spearman_p) if fn is not None else None
    if lo is not None and hi is not None:
        significant = lo > 0 or hi < 0
    else:
        significant = p is not None and p < 0.05
    strength = _strength(rho) if rho is not None and significant else None
    rises = strength is not None and strength != "negligible" and rho is not None and rho > 0
    skew = worst_skew(result)
    # Neither scoring serves the top-1% items (0 vs 0): the harm rule has nothing to grade.
    graded, unseen = (skew, None) if skew is None or skew.ratio is not None else (None, skew)
    conditions = result.conditions or {}

    if graded is not None:
        severity = graded.severity  # a negligible skew is no harm, whatever the norms do
    elif rises:
        severity = "moderate" if strength in ("moderate", "strong") else "low"
    else:
        severity = "none"
    detected = severity != "none"
    # Neither list serves the head, and the lists are the same: dot serving is cosine
    # serving, no harm by construction (not unknown), even where ρ is undefined (equal norms).
    same = (unseen is not None and unseen.dot is not None and unseen.cosine is not None and rho is None
            and dot_serves_cosine(result))
    assessed = graded is not None or rho is not None or same
    summary = summary_text(result, severity, rho, lo, hi, p, significant, strength, graded, conditions, unseen, assessed,
                       rises, same)
    recommendations = _recommendations(result, detected, graded, conditions, rises, unseen)
    weak = weak_model(result)
    stand_in = _stand_in(result)
    if weak is not None:
        summary = f"{weak} {summary}"
        if stand_in is None:
            recommendations.insert(0, weak + " Improve the model before tuning its serving: a fix for popularity bias "
                                   "cannot make it useful.")
    led = int(weak is not None and stand_in is None)  # the weak-model advice stays first
    summary, recommendations = _with_item_bias(result, summary, recommendations, rises, led)
    population = result.retrieval.population if result.retrieval is not None else None
    summary = (approximate_lead(result) + protocol_lead(population.seen_items if population else None, graded is not None)
               + _with_served(result, summary, recommendations, stand_in))
    first = first_seen_skew(result)
    return with_served_lists(Verdict(
        bias_detected=detected,
        severity=severity,
        summary=summary,
        recommendations=recommendations,
        quoted_k=skew.k if skew is not None else None,
        rule=SEVERITY_RULE,
        first_seen_k=first.k if first is not None else None,
        gate=SEVERITY_GATE if assessed else None,
        assessed=assessed,
        weak=weak,
        graded_head=skew.head if skew is not None else 1,
    ), result)


def _with_served(result: MeasuredSections, summary: str, recommendations: list[str], stand_in: str | None) -> str:
    """The summary led by what the audited vectors are: a model that scores by cosine (its
    own lists are the cosine lists), or tables that stand in for vectors the model does
    not serve (said before anything else, with a recommendation first)."""
    served = result.served_vectors
    if served is not None and served.as_served and served.scoring == "cosine" and result.retrieval is not None:
        summary = (f"{_sentence_start(served.model)} scores by cosine, so its own lists are the cosine "
                   f"lists; the severity grades what serving its vectors by dot product (an inner-product index) would "
                   f"do. {summary}")
    if stand_in is not None:  # every figure is of vectors the model does not serve
        assert served is not None
        summary = f"This audit is of {served.description}, not of the vectors {served.model} serves with. {summary}"
        recommendations.insert(0, f"Audit the vectors {served.model} serves: {stand_in}.")
    return summary


def _with_item_bias(
    result: MeasuredSections, summary: str, recommendations: list[str], norms_rise: bool, led: int = 0,
) -> tuple[str, list[str]]:
    """A model that adds an item bias to every score: the summary says that retrieval
    serves with it and how the bias follows popularity; where it rises with popularity, a
    recommendation names the bias as a channel of its own (first after the ``led``
    entries when the norms do not rise: then the bias is what serves popularity)."""
    served = result.served_vectors
    if served is None or served.source != "bias":
        return summary, recommendations
    rho = finite_figure(served.item_bias_spearman)
    if rho is None:
        follows = "its correlation with training frequency is undefined or not measured"
    else:
        trend = "rises" if rho >= RHO_WEAK else "falls" if rho <= -RHO_WEAK else "barely varies"
        follows = f"it {trend} with training frequency, Spearman ρ = {correlation_figures(rho)[0]}"
    model, how = _sentence_start(served.model), "as the model scores" if served.as_served else "in place of a score popaudit cannot place"
    summary += (
        f" {model} adds a per-item bias to every score ({follows}): retrieval serves, {how}, its "
        f"factors plus that bias (the 'dot' lists, {served.score or 'u·i + b_i'}); the frequency–norm correlation is "
        "of the factors alone, and cosine and norm-aware serving rescale the served vectors, bias included."
    )
    if rho is not None and rho >= RHO_MODERATE:  # a channel of its own, whatever the top-1% skew's band
        recommendations.insert(led if not norms_rise else len(recommendations), (
            f"The item bias of {served.model} rises with popularity (ρ = {correlation_figures(rho)[0]}) and adds to "
            "every score, a channel for popularity apart from the norms: regularise it more in training, or weigh it "
            "down at serving (u·i + w·b_i with w < 1), and re-audit."
        ))
    return summary, recommendations


def _sentence_start(model: str) -> str:
    """A model's name opening a sentence: "the model in m.pt" capitalised, a name as it is spelled."""
    return "T" + model[1:] if model.startswith("the ") else model


def weak_model(result: MeasuredSections) -> str | None:
    """The warning when dot-product serving is less accurate than the most-popular list at
    the trade-off's K (None: not so, or accuracy not measured)."""
    accuracy = result.accuracy
    k = accuracy.quoted_k if accuracy is not None else None
    if accuracy is None or k is None or k not in accuracy.at:
        return None
    own = accuracy.incumbent  # the model's own scoring: cosine for a model that scores by cosine
    if own is None:  # no model: served lists alone
        return None
    dot, popular = accuracy.at[k].get(own), accuracy.at[k].get("popular")
    if dot is None or popular is None or not dot.ndcg < popular.ndcg:
        return None
    served = result.served_vectors
    if served is not None and not served.as_served:
        return (f"Dot-product serving of {served.description} reaches a held-out NDCG@{k} of {dot.ndcg:.4f}, below "
                f"the most-popular list's {popular.ndcg:.4f}; these are not the vectors {served.model} serves with, so "
                "this is not the model's own accuracy.")
    # Held-out accuracy reads the retrieval lists: an approximate index's NDCG is approximate too.
    approximate = result.retrieval.approximate(k) if result.retrieval is not None else ""
    return (
        f"The model itself is weak: its {'dot-product' if own == 'dot' else own} serving reaches a held-out "
        f"NDCG@{k} of {dot.ndcg:.4f}{f', {approximate}' if approximate else ''}, "
        f"below the most-popular list's {popular.ndcg:.4f}."
    )


def _stand_in(result: MeasuredSections) -> str | None:
    """Why the audited vectors are not the ones the model serves with, and what to give to
    audit those (None: they are)."""
    served = result.served_vectors
    if served is None or served.as_served:
        return None
    return (served.not_served or "popaudit could not rebuild them").rstrip(".")


def _strength(rho: float) -> Strength:
    size = abs(rho)
    if size >= RHO_STRONG:
        return "strong"
    if size >= RHO_MODERATE:
        return "moderate"
    return "weak" if size >= RHO_WEAK else "negligible"


def _optional_change(result: MeasuredSections) -> str:
    """Where the trade-off still recommends another scoring below every harm band: that it
    is an option (less head share within the accuracy tolerance), not a fix."""
    accuracy = result.accuracy
    chosen = None if accuracy is None else accuracy.recommended
    if accuracy is None or chosen is None or chosen == accuracy.incumbent:  # the model's own scoring stays
        return ""
    return (f" (the accuracy trade-off still finds that {chosen} serves the top-{accuracy.head_percent}% items less "
            "within the accuracy tolerance: an option, not a fix)")


def _band_shortfall(skew: Skew) -> str:
    """What keeps a skew out of the lowest band, in figures: the band needs both its
    ratio and its excess, so a large ratio of tiny shares is not harm."""
    _, ratio, excess = HARM_BANDS[-1]
    need = f"it needs both {ratio:g}x and +{100 * excess:g} points"
    if skew.ratio is None or skew.excess is None:
        return f"{need}; neither list serves the top-1% items here"
    times = ratio_figure(skew.ratio)
    shown, _edge = compared_figures(100 * skew.excess, 100 * excess, 2)  # never "+0.50" beside a +0.5 it misses
    return f"{need}; here {times}x and {'+' if skew.excess >= 0 else ''}{shown} points"


def _recommendations(
    result: MeasuredSections, detected: bool, skew: Skew | None, conditions: dict[str, Condition], rises: bool,
    unseen: Skew | None,
) -> list[str]:
    recs: list[str] = []
    status = {k: c.status for k, c in conditions.items()}
    skewed = skew is not None and skew.severity != "none"
    if result.frequency_norm is None:
        recs.append(
            f"Give the training interactions ({setting('interactions')}) so the frequency–norm correlation and the "
            "popularity of retrieved items can be measured; without them this audit cannot claim or rule out bias."
        )
    if detected or skewed:
        if skew is not None and skew.ratio is not None:
            overlap = f", and the two lists overlap {pct(skew.overlap)}" if skew.overlap is not None else ""
            dot, cosine = pct_pair(skew.dot, skew.cosine, SKEW_EDGES)
            measured = (f"here the top-{skew.head}% items' share of the top-{skew.k} slots goes from {dot} (dot) to "
                        f"{cosine} (cosine){overlap}")
        elif unseen is not None:
            measured = f"here {unseen_head(result, unseen)}"
        elif saturated := saturated_text(result):
            measured = f"here {saturated}: the change shows only at a K that grades"
        else:
            measured = "retrieval was not measured in this audit (give queries or a user table to see the change)"
        recs += serving_recommendations(result, measured)
    if detected:
        recs += training_recommendations(conditions)
    elif rises and skew is not None:
        recs.append(
            f"Item norms follow popularity, but dot-product serving stays below the lowest harm band at K={skew.k} "
            f"({_band_shortfall(skew)}): nothing to fix in serving now{_optional_change(result)}. Norms keep growing "
            f"while such a model trains, so re-audit after retraining ({setting('fail_on')} '{SEVERITY_GATE}' in CI "
            "trips when serving reaches that band)."
        )
    elif result.frequency_norm is not None and all(status.get(k) == "holds" for k in ORTHOGONALITY_IDS):
        recs.append(
            "The model meets C1–C4, so its updates grow item norms with every appearance; no bias shows now, but "
            "a higher learning rate or longer training can bring it out. Re-audit after retraining "
            f"(e.g. with {setting('fail_on')} in CI)."
        )
    return recs
