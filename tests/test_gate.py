"""--fail-on parsing and evaluation."""

import pytest

from auditor.errors import GateError
import math

from auditor.flat import flat_metrics_from_report, metric_names
from auditor.gate import evaluate_gates, parse_gates
from auditor.sections import share_ratio


def test_parse_and_evaluate_all_operators():
    names = metric_names([10, 100])
    gates = parse_gates(
        ["spearman>0.5", "head_share_1pct_ratio@100 >= 1.5", "kendall<0", "arp_dot@10==2", "gini_cosine@10!=1e-3"],
        names,
    )
    metrics = {"spearman": 0.6, "head_share_1pct_ratio@100": 1.5, "kendall": 0.1, "arp_dot@10": 2.0, "gini_cosine@10": 0.2}
    tripped = [o.tripped for o in evaluate_gates(gates, metrics)]
    assert tripped == [True, True, False, True, True]


def test_unknown_names_and_bad_syntax_are_all_reported_with_valid_names():
    with pytest.raises(GateError) as info:
        parse_gates(["spearmn>0.5", "spearman >> 1", "recall@5>0.9"], metric_names([10]))
    message = str(info.value)
    assert "'spearmn'" in message and "spearman >> 1" in message and "'recall@5'" in message
    assert "Valid metrics: spearman" in message
    assert info.value.exit_code == 2


def test_unmeasured_metric_never_trips_and_says_so():
    (outcome,) = evaluate_gates(parse_gates(["spearman>0.5"], metric_names([10])), {"spearman": None})
    assert not outcome.tripped and outcome.value is None
    assert "not measured" in outcome.describe()


def test_plugin_measure_names_are_valid_gate_names():
    gates = parse_gates(["norm_gini>0.3"], metric_names([10], extra=["norm_gini"]))
    assert gates[0].metric == "norm_gini"


@pytest.mark.parametrize(
    ("a", "b", "want"),
    [(0.041, 0.0, math.inf), (0.0, 0.0, None), (0.3, 0.1, 3.0), (-0.742, -0.934, None), (0.5, -0.2, None),
     (None, 0.1, None), (math.nan, 0.1, None)],
)
def test_share_ratio_policy(a: float | None, b: float | None, want: float | None) -> None:
    """dot / cosine of figures that cannot be negative; +inf when only cosine is 0; no
    ratio of signed figures (two negative ΔGAPs) nor of two zeros."""
    got = share_ratio(a, b)
    assert got == pytest.approx(want) if want is not None else got is None


def test_an_infinite_skew_trips_its_gate_and_two_zeros_are_undefined() -> None:
    """Cosine serves the top-1% items nothing, dot 4.1%: the ratio gate trips (it said
    "not measured" before, exactly where the skew is largest); a ratio of two zeros, or of
    two signed figures, has no value."""
    cut = {"dot": {"head_share_1pct": 0.041, "coverage": 0.0, "gap_delta_niche": -0.742},
           "cosine": {"head_share_1pct": 0.0, "coverage": 0.0, "gap_delta_niche": -0.934}}
    flat = flat_metrics_from_report({"retrieval": {"at": {"10": cut}}})
    assert flat["head_share_1pct_ratio@10"] == math.inf
    assert flat["coverage_ratio@10"] is None and flat["gap_delta_niche_ratio@10"] is None
    names = metric_names([10])
    gates = parse_gates(["head_share_1pct_ratio@10>1.5", "head_share_1pct_ratio@10<1.5", "coverage_ratio@10>1"], names)
    outcomes = evaluate_gates(gates, flat)
    assert [o.tripped for o in outcomes] == [True, False, False] and outcomes[2].value is None
    assert outcomes[0].describe() == "head_share_1pct_ratio@10>1.5: inf (TRIPPED)"


@pytest.mark.parametrize("threshold", ["1e400", "-1e999", "inf", "-Infinity", "nan"])
def test_a_threshold_that_is_not_finite_is_refused_however_it_is_spelled(threshold: str) -> None:
    """1e400 overflowed to inf and made a gate that never held, while 'inf' was refused as
    not a NUMBER: every non-finite threshold is now one usage error, with why."""
    with pytest.raises(GateError, match=rf"'spearman>{threshold}': the threshold {threshold} is not a finite number") as info:
        parse_gates([f"spearman>{threshold}"], ["spearman"])
    assert info.value.exit_code == 2
    assert parse_gates(["spearman>1e308"], ["spearman"])[0].threshold == 1e308  # the largest finite ones stay
