"""The verdict: bias claimed only with a CI that excludes 0, severity bands, advice."""

from __future__ import annotations

import math
from typing import Any

import pytest

from auditor.result import (
    AuditResult,
    Condition,
    CutoffMeasures,
    FrequencyNorm,
    Inputs,
    ListMeasures,
    Retrieval,
    Verdict,
)
from auditor.verdict import decide_verdict


def _fn(rho: float, lo: float, hi: float, p: float = 1e-6) -> FrequencyNorm:
    return FrequencyNorm(spearman=rho, spearman_ci=(lo, hi), spearman_p=p, pearson_log=rho, kendall=rho * 0.7,
                         loglog_slope=0.2, n_items=1000, n_cold=10, deciles=[], n_bootstrap=1000)


def _measures(head: float) -> ListMeasures:
    return ListMeasures(head_share_1pct=head, head_share_10pct=0.5, head_share_20pct=0.6, arp=100.0,
                        aplt=0.1, gini=0.8, coverage=0.2, novelty=3.0)


def _retrieval(dot: float, cos: float) -> Retrieval:
    cut = lambda d, c: CutoffMeasures(dot=_measures(d), cosine=_measures(c), popular=_measures(1.0),  # noqa: E731
                                      overlap_dot_cosine=0.35)
    return Retrieval(n_queries=500, index="exact", at={10: cut(0.9, 0.1), 100: cut(dot, cos)})


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
        (0.62, 0.58, 0.66, True, "high"),
        (0.40, 0.35, 0.45, True, "moderate"),
        (0.15, 0.05, 0.25, True, "low"),
        (0.05, 0.02, 0.08, False, "none"),     # significant but negligible
        (0.35, -0.02, 0.70, False, "none"),    # CI includes 0: never claim bias
        (-0.40, -0.45, -0.35, False, "none"),  # norms fall with popularity
    ],
)
def test_severity_from_rho_and_its_ci(rho: float, lo: float, hi: float, detected: bool, severity: str) -> None:
    v = decide_verdict(_result(_fn(rho, lo, hi)))
    assert (v.bias_detected, v.severity) == (detected, severity)
    assert f"ρ = {rho:.2f}" in v.summary and f"[{lo:.2f}, {hi:.2f}]" in v.summary


def test_ci_includes_zero_summary_says_so() -> None:
    v = decide_verdict(_result(_fn(0.35, -0.02, 0.70)))
    assert "includes 0" in v.summary
    v = decide_verdict(_result(_fn(-0.40, -0.45, -0.35)))
    assert "fall with training frequency" in v.summary


def test_no_bootstrap_falls_back_to_p_value() -> None:
    assert decide_verdict(_result(_fn(0.4, math.nan, math.nan, p=1e-4))).bias_detected
    assert not decide_verdict(_result(_fn(0.4, math.nan, math.nan, p=0.2))).bias_detected


def test_retrieval_skew_raises_severity_and_is_quoted() -> None:
    # ρ alone says low; dot gives the head 3× the cosine share at K=100: high.
    v = decide_verdict(_result(_fn(0.15, 0.05, 0.25), _retrieval(0.30, 0.10), _conds()))
    assert v.bias_detected and v.severity == "high"
    assert "3.00×" in v.summary and "K=100" in v.summary and "30.0% vs 10.0%" in v.summary
    serve = [r for r in v.recommendations if r.startswith("Serve with cosine")]
    assert len(serve) == 1 and "30.0% (dot) to 10.0% (cosine)" in serve[0] and "overlap 35.0%" in serve[0]
    assert "Caveat" in serve[0]
    v = decide_verdict(_result(_fn(0.15, 0.05, 0.25), _retrieval(0.15, 0.10), _conds()))
    assert v.severity == "moderate"  # 1.5×
    # Retrieval skew never overrides a CI that includes 0.
    v = decide_verdict(_result(_fn(0.15, -0.05, 0.25), _retrieval(0.30, 0.10), _conds()))
    assert not v.bias_detected and v.severity == "none" and "3.00×" in v.summary
    assert any(r.startswith("Serve with cosine") for r in v.recommendations)


def test_recommendations_follow_the_conditions() -> None:
    conds = _conds()
    conds["C4"] = Condition("cosine-based loss", "holds", "loss", {"loss": "infonce-cos"})
    conds["C5"] = Condition("lr", "holds", "big", {"growth_per_update": 0.0123, "probe_lr": 0.5})
    v = decide_verdict(_result(_fn(0.6, 0.55, 0.65), None, conds))
    text = "\n".join(v.recommendations)
    assert "retrieval was not measured" in text
    assert "weight decay or an adaptive optimizer" in text and "measure, do not assume" in text
    assert "c/s² = 0.0123 at lr = 0.5" in text
    assert "‖q‖^α‖k‖^α" in text and "α in (0, 1)" in text
    assert "logQ" in text and "'infonce-cos'" in text
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
    assert any("--interactions" in r for r in v.recommendations)
    # No bias, all of C1-C4 hold: a warning that it may still appear.
    v = decide_verdict(_result(_fn(0.02, -0.03, 0.07), None, _conds(C5="unknown")))
    assert not v.bias_detected and any("Re-audit" in r for r in v.recommendations)
    assert "C5 unknown" in v.summary


def test_skew_is_quoted_at_a_k_small_against_the_catalogue() -> None:
    # 1000 items: K=100 is 10% of the catalogue, the largest allowed.
    v = decide_verdict(_result(_fn(0.4, 0.3, 0.5), _retrieval(0.30, 0.10)))
    assert "K=100" in v.summary
    small = _result(_fn(0.4, 0.3, 0.5), _retrieval(0.30, 0.10))
    small.inputs.n_items = 400  # K=100 would be a quarter of the catalogue: K=10 (0.9 vs 0.1) is quoted
    v = decide_verdict(small)
    assert "K=10 " in v.summary and "9.00×" in v.summary and v.severity == "high"
