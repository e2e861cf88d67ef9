"""The verdict: bias claimed only with a CI that excludes 0, severity bands, advice."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from auditor.result import (
    Accuracy,
    RankingAccuracy,
    AuditResult,
    Condition,
    CutoffMeasures,
    FrequencyNorm,
    Inputs,
    ListMeasures,
    Retrieval,
    Verdict,
)
from auditor.lists_verdict import amplification
from auditor.flat import metric_names
from auditor.gate import evaluate_gates, parse_gates
from auditor.verdict import decide_verdict
from auditor.wording import correlation_figures


def _fn(rho: float, lo: float, hi: float, p: float = 1e-6) -> FrequencyNorm:
    return FrequencyNorm(spearman=rho, spearman_ci=(lo, hi), spearman_p=p, pearson_log=rho, kendall=rho * 0.7,
                         loglog_slope=0.2, n_items=1000, n_cold=10, deciles=[], n_bootstrap=1000)


def _measures(head: float) -> ListMeasures:
    return ListMeasures(dict(head_share_1pct=head, head_share_10pct=0.5, head_share_20pct=0.6, arp=100.0,
                             aplt=0.1, gini=0.8, coverage=0.2, novelty=3.0))


def _cut(dot: float, cos: float) -> CutoffMeasures:
    return CutoffMeasures(dot=_measures(dot), cosine=_measures(cos), popular=_measures(1.0), overlap_dot_cosine=0.35)


def _retrieval(dot: float, cos: float) -> Retrieval:
    """K=10 with a 9x skew beside K=100 with the given head shares."""
    return Retrieval(n_queries=500, index="exact", at={10: _cut(0.9, 0.1), 100: _cut(dot, cos)})


def _single(dot: float, cos: float, k: int = 100) -> Retrieval:
    return Retrieval(n_queries=500, index="exact", at={k: _cut(dot, cos)})


def _conds(**status: str) -> dict[str, Condition]:
    out = {f"C{i}": Condition(f"c{i}", "holds", f"evidence {i}") for i in range(1, 6)}
    for key, value in status.items():
        out[key] = Condition(out[key].name, value, f"evidence {key}")  # type: ignore[arg-type]
    return out


def _result(fn: FrequencyNorm | None, retrieval: Retrieval | None = None,
            conditions: dict[str, Condition] | None = None, **kw: Any) -> AuditResult:
    inputs = Inputs(model="m.pt", interactions="log.parquet", item_table="item", user_table="user",
                    n_items=1000, dim=32, n_interactions=50000)
    return AuditResult(inputs=inputs, frequency_norm=fn, verdict=Verdict(False, "none", ""), retrieval=retrieval,
                       conditions=conditions, **kw)


@pytest.mark.parametrize(
    ("rho", "lo", "hi", "detected", "severity"),
    [
        (0.62, 0.58, 0.66, True, "moderate"),  # no retrieval: the harm is unknown, so at most moderate
        (0.40, 0.35, 0.45, True, "moderate"),
        (0.15, 0.05, 0.25, True, "low"),
        (0.05, 0.02, 0.08, False, "none"),     # significant but negligible
        (0.35, -0.02, 0.70, False, "none"),    # CI includes 0: never claim the mechanism
        (-0.40, -0.45, -0.35, False, "none"),  # norms fall with popularity
    ],
)
def test_without_retrieval_severity_rests_on_rho_and_its_ci(
    rho: float, lo: float, hi: float, detected: bool, severity: str
) -> None:
    v = decide_verdict(_result(_fn(rho, lo, hi)))
    assert (v.bias_detected, v.severity) == (detected, severity)
    assert f"ρ = {rho:.2f}" in v.summary and f"[{lo:.2f}, {hi:.2f}]" in v.summary
    assert "harm to serving was not measured" in v.summary
    assert v.quoted_k is None and "severity = the harm" in v.rule


def test_ci_includes_zero_summary_says_so() -> None:
    v = decide_verdict(_result(_fn(0.35, -0.02, 0.70)))
    assert "includes 0" in v.summary
    v = decide_verdict(_result(_fn(-0.40, -0.45, -0.35)))
    assert "fall with training frequency" in v.summary


def test_a_negligible_correlation_is_not_read_as_norms_falling() -> None:
    # The 1M-item report: rho = -0.0005 with a CI excluding 0 must not say "norms fall".
    v = decide_verdict(_result(_fn(-0.0005, -0.002, -0.0001)))
    assert not v.bias_detected and "fall" not in v.summary and "not materially related" in v.summary


def test_no_bootstrap_falls_back_to_p_value() -> None:
    assert decide_verdict(_result(_fn(0.4, math.nan, math.nan, p=1e-4))).bias_detected
    assert not decide_verdict(_result(_fn(0.4, math.nan, math.nan, p=0.2))).bias_detected


@pytest.mark.parametrize(
    ("dot", "cos", "severity"),
    [
        (0.30, 0.15, "high"),       # 2.00x and +15 points: the high band's edge
        (0.299, 0.15, "moderate"),  # just under 2x
        (0.10, 0.05, "high"),       # 2x and +5 points exactly
        (0.09, 0.045, "moderate"),  # 2x but only +4.5 points
        (0.125, 0.10, "moderate"),  # 1.25x and +2.5 points
        (0.025, 0.020, "low"),      # 1.25x but only +0.5 points
        (0.124, 0.10, "low"),       # under 1.25x
        (0.011, 0.010, "none"),     # 1.1x but +0.1 points: no harm
        (0.015, 0.005, "low"),      # 3x of tiny shares: +1 point, low
        (0.107, 0.10, "none"),      # 1.07x: no harm
        # On an edge in float arithmetic (0.06 - 0.01 = 0.04999..., 0.055 / 0.05 = 1.0999...): it reaches the band.
        (0.06, 0.01, "high"),       # 6x and +5 points exactly
        (0.03, 0.01, "moderate"),   # 3x and +2 points exactly
        (0.055, 0.05, "low"),       # 1.1x and +0.5 points exactly
        (0.041, 0.0, "moderate"),   # cosine never serves the head: an infinite ratio, +4.1 points
        (0.0, 0.0, "none"),         # neither serves it: no skew to grade
    ],
)
def test_severity_is_the_harm_to_serving(dot: float, cos: float, severity: str) -> None:
    v = decide_verdict(_result(_fn(0.05, -0.02, 0.12), _single(dot, cos)))  # no mechanism evidence
    assert v.severity == severity and v.bias_detected == (severity != "none")
    assert v.quoted_k == 100


def test_norms_tracking_popularity_without_harm_is_no_bias() -> None:
    # The Adam model: rho high but dot barely changes what the head gets (1.07x): a negligible skew.
    v = decide_verdict(_result(_fn(0.62, 0.58, 0.66), _single(0.107, 0.10), _conds(C1="violated")))
    assert (v.bias_detected, v.severity) == (False, "none")
    assert v.summary.startswith("Norms follow popularity, but serving is not skewed: item norms grow with training")
    assert "+0.70 points more of the slots than cosine, below every harm band" in v.summary
    assert "1.07×" in v.summary and "detected" not in v.summary
    assert any(r.startswith("Item norms follow popularity, but dot-product serving stays below the lowest harm "
                            "band at K=100 (it needs both 1.1x and +0.5 points; here 1.07x and +0.70 points)")
               and "severity_level>=1" in r for r in v.recommendations)
    assert not any(r.startswith("Serve with cosine") for r in v.recommendations)
    # A low-lr model: rho 0.13, no skew: no bias, worded as a slight rise, not "grow".
    v = decide_verdict(_result(_fn(0.13, 0.06, 0.20), _single(0.10, 0.10)))
    assert v.severity == "none" and "rise slightly" in v.summary and "grow" not in v.summary
    # Without retrieval the harm is unknown: the mechanism alone still counts.
    assert decide_verdict(_result(_fn(0.13, 0.06, 0.20))).severity == "low"


def test_a_model_weaker_than_the_popular_list_is_said_first() -> None:
    at = {10: {"dot": RankingAccuracy(0.05, 0.1151, 0.3, 0.1), "popular": RankingAccuracy(0.1, 0.3400, 0.6, 0.3),
               "cosine": RankingAccuracy(0.01, 0.0403, 0.1, 0.02)}}
    accuracy = Accuracy("p", 100, 0, at, quoted_k=10)
    v = decide_verdict(_result(_fn(0.62, 0.58, 0.66), _single(0.30, 0.10, k=10), _conds(), accuracy=accuracy))
    weak = "The model itself is weak: its dot-product serving reaches a held-out NDCG@10 of 0.1151, below the " \
           "most-popular list's 0.3400."
    assert v.summary.startswith(weak) and v.recommendations[0].startswith(weak)
    # Held-out accuracy reads the retrieval lists: an approximate index's NDCG is said approximate.
    approx = dataclasses.replace(_single(0.30, 0.10, k=10), index="ivf", recall={10: 0.812})
    v = decide_verdict(_result(_fn(0.62, 0.58, 0.66), approx, _conds(), accuracy=accuracy))
    assert ("The model itself is weak: its dot-product serving reaches a held-out NDCG@10 of 0.1151, approximate "
            "(ivf, recall@10 0.812), below the most-popular list's 0.3400.") in v.summary
    better = Accuracy("p", 100, 0, {10: {**at[10], "dot": RankingAccuracy(0.2, 0.5, 0.7, 0.4)}}, quoted_k=10)
    v = decide_verdict(_result(_fn(0.62, 0.58, 0.66), _single(0.30, 0.10, k=10), _conds(), accuracy=better))
    assert "weak" not in v.summary and not v.recommendations[0].startswith("The model itself")


def test_retrieval_skew_is_quoted_with_its_numbers() -> None:
    v = decide_verdict(_result(_fn(0.15, 0.05, 0.25), _single(0.30, 0.10), _conds()))
    assert v.bias_detected and v.severity == "high"
    assert "3.00×" in v.summary and "K=100" in v.summary and "30.0% vs 10.0%" in v.summary
    serve = [r for r in v.recommendations if r.startswith("Serve with cosine")]
    assert len(serve) == 1 and "30.0% (dot) to 10.0% (cosine)" in serve[0] and "overlap 35.0%" in serve[0]
    assert "Caveat" in serve[0]
    # Harm is measured directly, so it counts even when the correlation's CI includes 0.
    v = decide_verdict(_result(_fn(0.15, -0.05, 0.25), _single(0.30, 0.10), _conds()))
    assert v.bias_detected and v.severity == "high" and "includes 0" in v.summary
    assert any(r.startswith("Serve with cosine") for r in v.recommendations)


def test_recommendations_follow_the_conditions() -> None:
    conds = _conds()
    conds["C4"] = Condition("cosine-based loss", "holds", "loss", {"loss": "infonce-cos"})
    conds["C5"] = Condition("lr", "holds", "big", {"growth_per_update": 0.0123, "probe_lr": 0.5})
    v = decide_verdict(_result(_fn(0.6, 0.55, 0.65), None, conds))
    text = "\n".join(v.recommendations)
    assert "retrieval was not measured" in text
    assert "with an adaptive optimizer (Adam, Adagrad) breaks C1" in text and "measure, do not assume" in text
    # QA conditions F6: weight decay raised the skew in popaudit's own runs; never advised as a fix
    assert "weight decay or" not in text.lower() and "Weight decay is no such fix" in text
    assert "c/s² = 0.0123 at lr = 0.5" in text
    assert "‖q‖^α‖k‖^α" in text and "α in (0, 1)" in text
    assert "logQ" in text and "'infonce-cos'" in text
    # QA retrain F1: logQ raised the top-1% head share 11x in popaudit's own runs; never advised as a fix
    assert "apply logQ" not in text and "logQ correction is no cure here" in text
    assert "raises popular items' exposure rather than lowering it" in text
    assert all("Caveat" in r for r in v.recommendations)
    assert "C1, C2, C3, C4, C5 hold" in v.summary and "structural" in v.summary
    # C1 violated (Adam), C5 violated, dot loss: no optimizer/lr/logQ advice.
    conds = _conds(C1="violated", C5="violated")
    conds["C4"] = Condition("cosine-based loss", "violated", "dot", {"loss": "bpr"})
    v = decide_verdict(_result(_fn(0.6, 0.55, 0.65), None, conds))
    text = "\n".join(v.recommendations)
    assert "adaptive optimizer" not in text and "learning rate" not in text and "logQ" not in text
    assert "C1, C4, C5 violated" in v.summary and "sufficient, not necessary" in v.summary


def test_sections_not_measured() -> None:
    v = decide_verdict(_result(None, not_measured={"frequency_norm": "no interaction log"}))
    assert not v.bias_detected and v.severity == "none"
    assert "not assessed" in v.summary and "no interaction log" in v.summary
    assert "C1–C5 not assessed" in v.summary
    assert any("interactions" in r for r in v.recommendations)
    # No bias, all of C1-C4 hold: a warning that it may still appear.
    v = decide_verdict(_result(_fn(0.02, -0.03, 0.07), None, _conds(C5="unknown")))
    assert not v.bias_detected and any("Re-audit" in r for r in v.recommendations)
    assert "C5 unknown" in v.summary


def test_skew_is_quoted_at_the_worst_served_k() -> None:
    # 1000 items: K=10 and K=100 (10% of the catalogue) are both served sizes; K=10
    # (0.9 vs 0.1, 9x) is worse than K=100 (3x), so it decides and is quoted.
    v = decide_verdict(_result(_fn(0.4, 0.3, 0.5), _retrieval(0.30, 0.10)))
    assert v.quoted_k == 10 and "K=10 " in v.summary and "9.00×" in v.summary
    # Same band at both K: the larger ratio is quoted.
    v = decide_verdict(_result(_fn(0.4, 0.3, 0.5), _retrieval(0.95, 0.05)))
    assert v.quoted_k == 100 and "19.00×" in v.summary
    small = _result(_fn(0.4, 0.3, 0.5), _retrieval(0.95, 0.05))
    small.inputs.n_items = 400  # K=100 is a quarter of the catalogue: not a served size
    v = decide_verdict(small)
    assert v.quoted_k == 10 and "9.00×" in v.summary and v.severity == "high"


def test_assumed_row_ids_are_said_in_the_summary() -> None:
    result = _result(_fn(0.4, 0.3, 0.5), _retrieval(0.30, 0.10))
    result.inputs.row_ids_assumed = True
    assert "item ids were taken as table rows" in decide_verdict(result).summary


@pytest.mark.parametrize(("served", "log", "severity"), [(0.06, 0.01, "high"), (0.03, 0.01, "moderate"),
                                                         (0.055, 0.05, "low"), (0.02, 0.0, "moderate")])
def test_lists_amplification_reaches_a_band_on_its_edge(served: float, log: float, severity: str) -> None:
    """Served lists alone share the bands and their edges (6x and +5 points is high)."""
    assert amplification(served, log)[0] == severity


@pytest.mark.parametrize(("dot", "cos", "rho", "lo"), [
    (0.30, 0.15, 0.62, 0.58), (0.06, 0.01, 0.62, 0.58), (0.055, 0.05, 0.62, 0.58), (0.011, 0.010, 0.62, 0.58),
    (0.0233, 0.007, 0.62, 0.58), (0.107, 0.10, 0.62, 0.58), (0.041, 0.0, 0.62, 0.58), (0.0, 0.0, 0.62, 0.58),
    (0.015, 0.005, 0.62, 0.58), (0.054, 0.05, 0.62, 0.58),
    (23 / 600, 20 / 600, 0.62, 0.58),  # exactly on the low band's edge (+0.5 points): low, so the gate trips
    (0.0, 0.0, 0.18, -0.10),           # graded by the correlation, whose CI includes 0: none, so it passes
    (0.0, 0.0, 0.44, 0.21),            # the same with a CI above 0: moderate, so it trips
])
def test_the_suggested_gate_trips_exactly_when_the_verdict_grades_low_or_worse(
    dot: float, cos: float, rho: float, lo: float,
) -> None:
    """The verdict's CI gate (what `Next:` suggests) trips on this very run exactly when its
    severity is above none, whichever rule graded it. The head-share thresholds it replaced
    passed a run on the band's edge (rounded up past it) and tripped a run whose ρ ≥ 0.1
    had a CI including 0 (a conjunction no single threshold expresses)."""
    result = _result(_fn(rho, lo, 0.7), _single(dot, cos, k=10))
    verdict = decide_verdict(result)
    assert verdict.gate == "severity_level>=1"
    result = dataclasses.replace(result, verdict=verdict)
    assert result.flat_metrics()["severity_level"] == ["none", "low", "moderate", "high"].index(verdict.severity)
    (outcome,) = evaluate_gates(parse_gates([verdict.gate], metric_names([10])), result.flat_metrics())
    assert outcome.tripped == (verdict.severity != "none"), (verdict.gate, verdict.severity)
    assert "gate" not in result.to_dict()["verdict"]  # a suggestion, not a figure of the report


def test_nothing_graded_has_no_severity_level_and_no_suggested_gate() -> None:
    """No log: severity none claims nothing, so there is no level to gate (a gate on it is
    not measured, never a pass) and nothing to suggest."""
    result = _result(None)
    verdict = decide_verdict(result)
    assert not verdict.assessed and verdict.gate is None
    assert dataclasses.replace(result, verdict=verdict).flat_metrics()["severity_level"] is None


def test_a_head_no_scoring_serves_leaves_severity_to_the_correlation() -> None:
    """Neither dot nor cosine gives the top-1% items a slot (every user trained on them):
    0 vs 0 is no evidence of no harm. Where the top 10% show no band either, severity
    rests on rho as without retrieval (moderate here, where it said "not skewed, nothing
    to fix"), and the summary quotes the top 10%."""
    dot, cosine = (ListMeasures({**dict(_measures(0.0)), "head_share_10pct": share}) for share in (0.104, 0.1))
    cut = CutoffMeasures(dot=dot, cosine=cosine, popular=_measures(1.0), overlap_dot_cosine=0.35)
    retrieval = Retrieval(n_queries=500, index="exact", at={10: cut})
    v = decide_verdict(_result(_fn(0.62, 0.58, 0.66), retrieval))
    assert (v.severity, v.quoted_k, v.gate, v.graded_head) == ("moderate", 10, "severity_level>=1", 1)
    assert "neither dot-product nor cosine retrieval gives the top-1% items a slot at K=10" in v.summary
    assert "the top-10% items get 10.4% vs 10.0%" in v.summary and "severity rests on the correlation" in v.summary
    # The most-popular list (same exclusions) serves them: they were there to rank, not all trained on.
    assert "(the most-popular list gives them 100.0% of its slots, so they were there to rank)" in v.summary
    assert "trained on them" not in v.summary
    assert not any("nothing to fix" in r for r in v.recommendations)
    assert decide_verdict(_result(_fn(0.05, -0.02, 0.12), retrieval)).severity == "none"


def test_the_top_ten_percent_grade_the_harm_where_they_reach_a_higher_band() -> None:
    """QA F3: the top-1% items in nearly every history fill few slots under any scoring
    (0.79% vs 0.05% here: 15.8x but +0.74 points, low), while the top 10% get 51.7% vs
    9.6% (5.39x, +42.1 points: high, capped at moderate for the wider head). The severity is
    the higher band, and the summary names the head that graded it, with the top 1%'s
    figures beside it."""
    dot, cosine = (ListMeasures({**dict(_measures(one)), "head_share_10pct": ten})
                   for one, ten in ((0.0079, 0.517), (0.0005, 0.096)))
    cut = CutoffMeasures(dot=dot, cosine=cosine, popular=_measures(0.03), overlap_dot_cosine=0.2)
    v = decide_verdict(_result(_fn(0.998, 0.997, 0.999), Retrieval(n_queries=1000, index="exact", at={10: cut})))
    assert (v.severity, v.quoted_k, v.graded_head, v.bias_detected) == ("moderate", 10, 10, True)
    assert ("serving by dot product over-serves popular items: dot-product retrieval gives the top-10% items "
            "5.39× the slots cosine retrieval does at K=10 (51.7% vs 9.6%) (the top-1% items: 15.80×, 0.79% vs "
            "0.050%, band low: the top 10% reach the moderate band and grade the harm)") in v.summary
    assert any("the top-10% items' share of the top-10 slots goes from 51.7% (dot) to 9.6% (cosine)" in r
               for r in v.recommendations)
    # Where the top 1% reach the wider head's band or above, the top 1% grade it, as before:
    # 6x and +10 points is high; 1.5x and +2 points is moderate, as the capped top 10%.
    for one, severity in (((0.12, 0.02), "high"), ((0.06, 0.04), "moderate")):
        cut = CutoffMeasures(dot=ListMeasures({**dict(_measures(one[0])), "head_share_10pct": 0.517}),
                             cosine=ListMeasures({**dict(_measures(one[1])), "head_share_10pct": 0.096}),
                             popular=_measures(0.3), overlap_dot_cosine=0.2)
        v = decide_verdict(_result(_fn(0.998, 0.997, 0.999), Retrieval(n_queries=1000, index="exact", at={10: cut})))
        assert (v.severity, v.graded_head) == (severity, 1) and "the top-1% items" in v.summary
        assert "(the top-1% items:" not in v.summary and "top-10% items" not in v.summary
    # Dot serving below cosine at the top 1% (damped head norms) while the top 10% get 7.9x: moderate, not none.
    damped = CutoffMeasures(dot=ListMeasures({**dict(_measures(0.0022)), "head_share_10pct": 0.7633}),
                            cosine=ListMeasures({**dict(_measures(0.0075)), "head_share_10pct": 0.0962}),
                            popular=_measures(0.633), overlap_dot_cosine=0.1)
    v = decide_verdict(_result(_fn(0.9, 0.88, 0.92), Retrieval(n_queries=1000, index="exact", at={10: damped})))
    assert (v.severity, v.graded_head) == ("moderate", 10) and "not skewed" not in v.summary
    assert "gives the top-10% items 7.93× the slots" in v.summary and "0.22% vs 0.75%, band none" in v.summary


def test_dot_serving_cosine_lists_is_graded_none_even_where_rho_is_undefined() -> None:
    """mitigate --alpha 0 writes unit rows: rho is undefined (equal norms), both top-1%
    shares are 0, and dot serves exactly cosine's lists (overlap 1 at every K). That is no
    harm by construction, not an unknown one: severity none, assessed, the gate check
    suggests evaluates (level 0). Lists that differ somewhere, or shares not measured,
    still grade nothing."""
    def cut(overlap: float, head: float | None = 0.0) -> CutoffMeasures:
        measures = ListMeasures({**dict(_measures(0.0)), "head_share_1pct": head, "head_share_10pct": 0.062})
        return CutoffMeasures(dot=measures, cosine=measures, popular=_measures(0.165), overlap_dot_cosine=overlap)

    undefined = dataclasses.replace(_fn(math.nan, math.nan, math.nan, math.nan),
                                    undefined_reason="every item has the same norm: the correlation is undefined")
    same = _result(undefined, Retrieval(n_queries=300, index="exact", at={10: cut(1.0), 100: cut(1.0)}))
    v = decide_verdict(same)
    assert (v.severity, v.assessed, v.gate, v.bias_detected) == ("none", True, "severity_level>=1", False)
    assert v.summary.startswith("No popularity bias detected: the frequency–norm correlation is undefined")
    assert "dot-product retrieval serves the same items as cosine at every K (overlap 1)" in v.summary
    assert dataclasses.replace(same, verdict=v).flat_metrics()["severity_level"] == 0.0
    for at in ({10: cut(1.0), 100: cut(0.999)}, {10: cut(1.0, None)}):
        other = decide_verdict(_result(undefined, Retrieval(n_queries=300, index="exact", at=at)))
        assert (other.assessed, other.gate) == (False, None)


def test_no_interval_is_not_read_as_an_interval_that_includes_zero() -> None:
    """Without a bootstrap there is no CI: a p-value above 5% is 'not significant', not a CI
    that 'includes 0'."""
    fn = FrequencyNorm(spearman=-0.03, spearman_ci=(None, None), spearman_p=0.76, pearson_log=0.0, kendall=0.0,
                       loglog_slope=0.0, n_items=100, n_cold=0, deciles=[], n_bootstrap=0)
    v = decide_verdict(_result(fn))
    assert "not significant at the 5% level (Spearman ρ = -0.03, p = 0.76, over 100 items; no interval)" in v.summary
    assert "includes 0" not in v.summary


def test_a_verdict_says_when_nothing_graded_it() -> None:
    """No log and no retrieval: severity none claims nothing, and the JSON says so
    (assessed false), where a CI job reading bias_detected alone would pass it."""
    nothing = decide_verdict(_result(None))
    assert (nothing.severity, nothing.bias_detected, nothing.assessed) == ("none", False, False)
    assert nothing.summary.startswith("Popularity bias not assessed")
    assert decide_verdict(_result(None, _single(0.0, 0.0))).assessed is False  # 0 vs 0 grades nothing either
    graded = decide_verdict(_result(None, _single(0.107, 0.10)))
    assert (graded.severity, graded.assessed) == ("none", True)
    result = dataclasses.replace(_result(None), verdict=nothing)
    assert result.to_dict()["verdict"]["assessed"] is False


def test_stored_tables_standing_in_for_served_vectors_are_said_first() -> None:
    """A graph model saved without its cache: the audit is of its stored tables, so the
    summary says so before anything else, a weak NDCG is not called the model's, the first
    recommendation is how to audit what it serves, and served_spearman has no value."""
    from auditor.result import Accuracy, RankingAccuracy, ServedVectorsSection

    served = ServedVectorsSection(model="NGCF", source="tables", description="the stored tables", scoring="dot",
                                  as_served=False, not_served="give a checkpoint saved with its cache.")
    accuracy = Accuracy(protocol="p", n_users_evaluated=10, n_dropped=0, quoted_k=10,
                        at={10: {"dot": RankingAccuracy(0.1, 0.0629, 0.2, 0.1),
                                 "popular": RankingAccuracy(0.2, 0.2361, 0.4, 0.2)}})
    result = _result(_fn(0.62, 0.58, 0.66), _single(0.30, 0.15, k=10), served_vectors=served, accuracy=accuracy)
    v = decide_verdict(result)
    assert v.summary.startswith("This audit is of the stored tables, not of the vectors NGCF serves with. "
                                "Dot-product serving of the stored tables reaches a held-out NDCG@10 of 0.0629")
    assert "The model itself is weak" not in v.summary and "not the model's own accuracy" in v.summary
    assert v.recommendations[0] == "Audit the vectors NGCF serves: give a checkpoint saved with its cache."
    assert not any("Improve the model" in r for r in v.recommendations)
    flat = dataclasses.replace(result, verdict=v).flat_metrics()
    assert flat["served_spearman"] is None and flat["spearman"] == 0.62


@pytest.mark.parametrize(
    ("values", "shown"),
    [
        ((0.998, 0.997, 0.999), "Spearman ρ = 0.998, 95% CI [0.997, 0.999]"),  # not a perfect "1.00 [1.00, 1.00]"
        ((0.9996, 0.9991, 1.0), "Spearman ρ = 0.9996, 95% CI [0.9991, 1.0000]"),
        ((0.62, 0.58, 0.66), "Spearman ρ = 0.62, 95% CI [0.58, 0.66]"),
        # QA report F3: bounds that differ never print as one value, "[0.99, 0.99]"; as the table, 0.992 to 0.995.
        ((0.99347, 0.99155, 0.99462), "Spearman ρ = 0.993, 95% CI [0.992, 0.995]"),
        ((0.4, 0.4012, 0.4049), "Spearman ρ = 0.400, 95% CI [0.401, 0.405]"),
        ((0.41, 0.41, 0.41), "Spearman ρ = 0.41, 95% CI [0.41, 0.41]"),  # equal bounds: nothing to part
    ],
)
def test_a_correlation_near_one_is_never_printed_as_one(values: tuple[float, float, float], shown: str) -> None:
    rho, lo, hi = values
    v = decide_verdict(_result(_fn(rho, lo, hi)))
    assert shown in v.summary
    assert correlation_figures(1.0, -1.0) == ["1.00", "-1.00"]  # exactly one stays at two decimals


@pytest.mark.parametrize(("dot", "cos", "words"), [
    (0.0, 0.019, "serving by dot product gives the top-1% items fewer slots than cosine (-1.90 points)"),  # starved
    (0.0013, 0.000325, "+0.10 points more of the slots than cosine, below every harm band"),  # 4x of tiny shares
    (0.05, 0.05, "gives the top-1% items as many slots as cosine"),
    (1.0, 1.0, "the top-1% items (ties at the cut included) fill every slot"),  # every item tied on popularity
])
def test_a_skew_below_every_band_says_which_way_and_by_how_much(dot: float, cos: float, words: str) -> None:
    """Below every band the summary says what dot serving does to the head, never that it
    "barely changes" what popular items get (which read false beside 4.00x, or beside a
    dot list that serves the head nothing)."""
    v = decide_verdict(_result(_fn(-0.99, -0.995, -0.98), _single(dot, cos, k=10)))
    assert v.severity == "none" and words in v.summary and "barely" not in v.summary


def test_harm_graded_against_the_correlation_reads_as_although() -> None:
    """Serving skewed (high) while the correlation's CI includes 0: the lead says the
    correlation speaks against the mechanism, not as if it were the reason."""
    v = decide_verdict(_result(_fn(0.09, -0.05, 0.22), _single(0.28, 0.0, k=10)))
    assert v.severity == "high"
    assert v.summary.startswith("Popularity bias detected (high) in dot-product serving, although the CI of the "
                                "frequency–norm correlation includes 0")


def test_a_holdout_that_measured_nothing_is_not_advised_again() -> None:
    """--holdout given, no held-out user evaluated: the advice says why accuracy is missing
    instead of telling the user to pass the --holdout they passed."""
    why = "no held-out user of new.csv can be evaluated, so accuracy is undefined; its users: 1 absent"
    v = decide_verdict(_result(_fn(0.62, 0.58, 0.66), _single(0.30, 0.05, k=10), not_measured={"accuracy": why}))
    serve = next(r for r in v.recommendations if r.startswith("Serve with cosine"))
    assert f"was not measured here: {why}" in serve and "measure it with" not in serve
    v = decide_verdict(_result(_fn(0.62, 0.58, 0.66), _single(0.30, 0.05, k=10),
                               not_measured={"accuracy": "no held-out interactions: pass --holdout PATH"}))
    assert any("measure it with" in r for r in v.recommendations)


def test_a_weak_model_s_advice_stays_first_before_its_item_bias() -> None:
    """A weak model with an item bias rising with popularity and norms that do not: the
    bias recommendation comes right after "Improve the model first", not before it."""
    from auditor.result import Accuracy, RankingAccuracy, ServedVectorsSection

    served = ServedVectorsSection(model="MF", source="bias", description="factors and bias", scoring="dot",
                                  as_served=True, item_bias_spearman=0.9)
    accuracy = Accuracy(protocol="p", n_users_evaluated=10, n_dropped=0, quoted_k=10,
                        at={10: {"dot": RankingAccuracy(0.1, 0.0629, 0.2, 0.1),
                                 "popular": RankingAccuracy(0.2, 0.2361, 0.4, 0.2)}})
    v = decide_verdict(_result(_fn(0.02, -0.05, 0.09), _single(0.30, 0.15, k=10), served_vectors=served,
                               accuracy=accuracy))
    assert v.recommendations[0].startswith("The model itself is weak")
    assert v.recommendations[1].startswith("The item bias of MF rises with popularity (ρ = 0.90)")


def test_logq_is_never_advised_as_a_cure() -> None:
    """QA retrain F1: `retrain --logq` raised the dot top-1% head share 1.6% -> 17.7% on the same data;
    the report says what logQ does to exposure instead of recommending it."""
    from auditor.advice import training_recommendations

    def logq_lines(loss: str, logq: bool) -> list[str]:
        conds = _conds(C1="violated", C5="violated")
        conds["C4"] = Condition("cosine-based loss", "holds", "loss", {"loss": loss, "logq": logq})
        return [r for r in training_recommendations(conds) if "logQ" in r]

    plain = logq_lines("infonce-cos", False)
    assert len(plain) == 1 and plain[0].startswith("logQ correction is no cure here")
    assert "raises popular items' exposure" in plain[0] and "apply logQ" not in plain[0]
    trained = logq_lines("infonce-cos", True)
    assert len(trained) == 1 and "trained with logQ correction" in trained[0] and "raises their exposure" in trained[0]
    assert logq_lines("bpr", False) == [] and logq_lines("cosine", False) == []


def test_temperature_advice_only_for_a_loss_with_one() -> None:
    """QA retrain F5: the pointwise cosine loss has no temperature (retrain --loss cosine
    --temperature 10 trained a bit-identical model), so C5's advice names the learning rate only."""
    from auditor.advice import training_recommendations

    def c5_line(loss: str | None) -> str:
        conds = _conds(C1="violated")
        conds["C4"] = Condition("cosine-based loss", "holds", "loss", {"loss": loss} if loss else {})
        conds["C5"] = Condition("lr", "holds", "big", {"growth_per_update": 0.0123, "lr": 10.0})
        return next(r for r in training_recommendations(conds) if "c/s²" in r)

    for loss in ("cosine", "bpr"):
        line = c5_line(loss)
        assert "temperature" not in line and "τ" not in line
        assert line.startswith("A lower learning rate on the item table shrinks the per-update norm growth c/s², "
                               "which scales with η² (measured growth per update c/s² = 0.0123 at lr = 10)")
    for loss in ("infonce-cos", None):  # a softmax loss, or one not recorded: the temperature may apply
        assert "or a higher softmax temperature" in c5_line(loss) and "1/τ²" in c5_line(loss)
