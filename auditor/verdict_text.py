"""The verdict's headline in words: its lead (detected, not assessed, norms follow popularity
but serving is not skewed), what the frequency–norm correlation says with its statistic,
the harm at the quoted K, and the conditions C1–C5. :mod:`auditor.verdict` decides the
severity and passes its figures here; nothing here decides."""

from __future__ import annotations

from typing import Literal

from auditor.errors import setting
from auditor.harm import Skew, first_seen_skew, harm_words, narrow_text, partly_saturated_text, saturated_text, skew_text
from auditor.mechanism import graded_correlation
from auditor.result import ORTHOGONALITY_IDS, Condition, MeasuredSections, Severity
from auditor.sections import finite_figure
from auditor.wording import SKEW_EDGES, correlation_figures, no_list_served, pct, pct_pair, ratio_figure

Strength = Literal["strong", "moderate", "weak", "negligible"]


def summary_text(
    result: MeasuredSections, severity: Severity, rho: float | None, lo: float | None, hi: float | None,
    p: float | None, significant: bool, strength: Strength | None, skew: Skew | None,
    conditions: dict[str, Condition], unseen: Skew | None, assessed: bool, rises: bool, same: bool = False,
) -> str:
    harm = skew.severity if skew is not None else None
    mechanism = mechanism_text(result, rho, lo, hi, p, significant, strength)
    if not assessed:
        lead = f"Popularity bias not assessed: {mechanism}"
    elif severity == "none" and skew is not None and rises:
        lead = f"Norms follow popularity, but serving is not skewed: {mechanism}"
    elif severity == "none":
        lead = f"No popularity bias detected: {mechanism}"
    elif rho is not None and not rises:  # the harm graded it; the correlation speaks against the mechanism
        lead = f"Popularity bias detected ({severity}) in dot-product serving, although {mechanism}"
    else:
        lead = f"Popularity bias detected ({severity}): {mechanism}"
    parts = [lead]
    if skew is not None and skew.ratio is not None:
        parts.append(f"{harm_words(skew, harm or 'none')}: {skew_text(skew)}{narrow_text(result, skew)}")
        first = first_seen_skew(result)
        if first is not None and first.ratio is not None:
            times = ratio_figure(first.ratio)
            dot, cosine = pct_pair(first.dot, first.cosine, SKEW_EDGES)
            parts[-1] += f" (at K={first.k}, the first slots a user sees: {times}×, {dot} vs {cosine})"
        if partly := partly_saturated_text(result, (skew.k, first.k if first is not None else None)):
            parts.append(partly)
    elif unseen is not None and same:
        parts.append(f"{unseen_head(result, unseen)}, and dot-product retrieval serves the same items as cosine "
                     "at every K (overlap 1), so dot serving adds no popularity skew of its own")
    elif unseen is not None:
        parts.append(f"{unseen_head(result, unseen)}, so the harm rule has nothing to grade and severity rests on "
                     "the correlation")
    elif saturated := saturated_text(result):  # every measured K holds every candidate
        parts.append(f"{saturated}, so severity rests on the correlation")
    else:
        parts.append("the harm to serving was not measured (no retrieval), so severity rests on the correlation")
    if result.inputs.row_ids_assumed:
        parts.append("item ids were taken as table rows (no id mapping was given)")
    parts.append(conditions_text(conditions))
    if severity != "none" and any(conditions.get(k) is not None and conditions[k].status == "violated"
                                  for k in ORTHOGONALITY_IDS):
        parts.append("the conditions are sufficient, not necessary, so the bias can appear without them")
    return "; ".join(parts) + "."


def mechanism_text(
    result: MeasuredSections, rho: float | None, lo: float | None, hi: float | None, p: float | None,
    significant: bool, strength: Strength | None,
) -> str:
    """What the frequency–norm correlation says, with its statistic (or why it is missing)."""
    correlation = graded_correlation(result)
    fn = correlation.figures
    if fn is None:
        why = result.not_measured.get("frequency_norm", f"no item frequencies (give {setting('interactions')})")
        mechanism = f"the frequency–norm correlation was not measured ({why})"
    elif rho is None:
        why = (fn.undefined_reason or "").removesuffix(": the correlation is undefined") or "for this table"
        mechanism = f"the frequency–norm correlation is undefined: {why}"
    else:
        rho_text, *bounds = correlation_figures(rho, *((lo, hi) if lo is not None and hi is not None else ()))
        ci = f"95% CI [{bounds[0]}, {bounds[1]}]" if bounds else (
            ("p < 1e-300" if p == 0 else f"p = {p:.2g}") if p is not None else "no CI")  # 0: below float range
        stat = f"Spearman ρ = {rho_text}, {ci}, over {fn.n_items} items{correlation.whose()}"
        if not significant:
            mechanism = (f"the CI of the frequency–norm correlation includes 0 ({stat})" if lo is not None else
                         f"the frequency–norm correlation is not significant at the 5% level ({stat}; no interval)")
        elif strength == "negligible":
            mechanism = f"item norms and training frequency are not materially related ({stat})"
        elif rho < 0:
            mechanism = (f"item norms fall with training frequency ({stat}), so dot-product scores "
                         "favour less popular items")
        elif strength == "weak":
            mechanism = f"item norms rise slightly with training frequency ({stat})"
        else:
            mechanism = f"item norms grow with training frequency ({stat})"
    return mechanism


def conditions_text(conditions: dict[str, Condition]) -> str:
    if not conditions:
        return "conditions C1–C5 not assessed"
    groups: dict[str, list[str]] = {"holds": [], "violated": [], "unknown": []}
    for key in sorted(conditions):
        groups.setdefault(conditions[key].status, []).append(key)
    parts = []
    for status in ("holds", "violated", "unknown"):
        keys = groups[status]
        if keys:
            word = ("holds" if len(keys) == 1 else "hold") if status == "holds" else status
            parts.append(f"{', '.join(keys)} {word}")
    text = "conditions: " + "; ".join(parts)
    if all(conditions.get(k) is not None and conditions[k].status == "holds" for k in ORTHOGONALITY_IDS):
        text += " (C1–C4 make norm growth structural: every update is orthogonal to the embedding)"
    return text


def unseen_head(result: MeasuredSections, unseen: Skew) -> str:
    """Neither scoring serves the top-1% items at the quoted K, in words, with the top 10%'s
    shares (where the skew shows instead); where every list is empty, why (no_list_served)."""
    assert result.retrieval is not None
    cut = result.retrieval.at[unseen.k]
    dot, cosine = pct_pair(finite_figure(cut.dot.get("head_share_10pct")), finite_figure(cut.cosine.get("head_share_10pct")))
    popular = finite_figure(cut.popular.get("head_share_1pct"))
    population = result.retrieval.population
    if popular:  # the most-popular list, with the same exclusions, does serve them: they were there to rank
        why = f" (the most-popular list gives them {pct(popular)} of its slots, so they were there to rank)"
    elif population is not None and population.seen_items == "excluded":
        why = " (the queried users trained on them, and training items are not served)"
    else:
        why = ""
    return no_list_served(result.retrieval) or (f"neither dot-product nor cosine retrieval gives the top-1% items a "
                                                f"slot at K={unseen.k}{why}, while the top-10% items get {dot} vs {cosine}")
