"""--fail-on parsing and evaluation."""

import pytest

from auditor.errors import GateError
import math

import numpy as np

from auditor.flat import flat_metrics_from_report, metric_names
from auditor.gate import evaluate_gates, parse_gates
from auditor.gate_names import well_formed
from auditor.gate_reasons import why_unmeasured
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


def _report(**sections: object) -> dict[str, object]:
    """A JSON report's skeleton: K=10 measured over a 500-item catalogue, α 0.5, 200 resamples."""
    return {"settings": {"ks": [10], "alphas": [0.5]}, "inputs": {"n_items": 500}, "not_measured": {},
            "frequency_norm": {"spearman": 0.8, "n_bootstrap": 200, "undefined_reason": None, "ci_undefined_reason": None},
            **sections}


_CUT = {"10": {"dot": {"head_share_1pct": 0.0, "gap_delta_niche": -0.742, "coverage": 0.3, "pop_reo": None},
               "cosine": {"head_share_1pct": 0.0, "gap_delta_niche": -0.934, "coverage": None, "pop_reo": None}}}
_DEFINITIONS = {"pop_reo": "pop_reo: std / mean of P(g) over groups; null without a holdout or without each user's "
                           "training items"}


@pytest.mark.parametrize(
    ("name", "report", "reason"),
    [
        ("gap_delta_niche_ratio@10", _report(retrieval={"at": _CUT}),
         "a ratio of two signed figures is undefined (dot -0.742, cosine -0.934: it does not say which is larger); "
         "gate gap_delta_niche_dot@10 and gap_delta_niche_cosine@10 instead"),
        ("head_share_1pct_ratio@10", _report(retrieval={"at": _CUT}),
         "a ratio of two zeros is undefined (dot and cosine are both 0); gate head_share_1pct_dot@10 and "
         "head_share_1pct_cosine@10 instead"),
        ("pop_reo_cosine@10", _report(retrieval={"at": _CUT, "definitions": _DEFINITIONS}),
         "pop_reo is null without a holdout or without each user's training items"),
        ("head_share_1pct_ratio@100", _report(retrieval={"at": _CUT}), "K=100 was not asked for (add ks 100; ks replaces the cut-offs "
         "measured now (10), so pass them all: ks 10 ks 100)"),
        # QA F8: a run that asked for K=10 alone refuses ...@6 before its audit; the message says both steps.
        ("head_share_1pct_ratio@10", {**_report(retrieval={"at": {"6": _CUT["10"]}}), "inputs": {"n_items": 6},
                                      "settings": {"ks": [10]}},
         "K=10 exceeds the catalogue (6 items) and was clamped to 6: its figures are filed under K=6 "
         "(gate head_share_1pct_ratio@6 and add ks 6)"),
        ("head_share_1pct_ratio@10", {**_report(retrieval={"at": {"6": _CUT["10"]}}), "inputs": {"n_items": 6},
                                      "settings": {"ks": [6, 10]}},
         "K=10 exceeds the catalogue (6 items) and was clamped to 6: its figures are filed under K=6 "
         "(gate head_share_1pct_ratio@6)"),
        ("gini_alpha_0@10", _report(retrieval={"at": _CUT}),
         "α=0 is cosine serving, not measured apart: gate gini_cosine@10 instead"),
        ("gini_alpha_0.25@10", _report(retrieval={"at": _CUT}), "α=0.25 was not asked for (add alphas 0.25; alphas replaces "
         "the α measured now (0.5), so pass them all: alphas 0.5 alphas 0.25)"),
        ("ndcg_dot@10", _report(not_measured={"accuracy": "no held-out interactions"}),
         "accuracy not measured: no held-out interactions"),
        ("gini_served@10", _report(retrieval={"at": _CUT}),
         "no served lists were given (pass recommendations)"),
        ("gini_served@10", _report(retrieval={"at": {**_CUT, "5": {"served": {"gini": 0.4}}}}),
         "the served lists are shorter than K=10, which is not measured for them (gate gini_served@5)"),
        ("spearman_ci_lo", _report(), "spearman_ci_lo is undefined here"),
        ("spearman_ci_hi", {**_report(), "frequency_norm": {"n_bootstrap": 0}}, "no CI without a bootstrap (bootstrap 0)"),
        ("kendall", {**_report(), "frequency_norm": {"undefined_reason": "every item has the same training frequency"}},
         "every item has the same training frequency"),
        ("training_spearman", _report(), "no training trace (pass trace)"),
        ("served_spearman", _report(served_vectors={"as_served": False}),
         "the stored tables stand in for the vectors the model serves with, so what it serves is unknown"),
        ("severity_level", _report(not_measured={"frequency_norm": "no item frequencies: pass interactions"}),
         "nothing graded the severity (the verdict's assessed is false): no item frequencies: pass interactions"),
    ],
)
def test_why_a_gate_has_no_value_is_its_own_reason(name: str, report: dict[str, object], reason: str) -> None:
    """Each unevaluated gate says its own reason (the message listed every possible cause,
    and never the signed ratio's); setting names are the library's (the CLI spells flags)."""
    assert why_unmeasured(name, report) == reason


@pytest.mark.parametrize(
    ("name", "formed"),
    [("head_share_1pct_ratio@100", True), ("ndcg_niche_alpha_0.3@7", True), ("recall@5", True), ("spearman_ci_lo", True),
     ("overlap_served_cosine@20", True), ("gini_alpha_1.5@10", False), ("gini_alpha_0.50@10", False), ("gini_dot@010", False),
     ("gini_dt@10", False), ("spearmn", False), ("gini_dot@0", False), ("norm_gini_dot@10", False)],
)
def test_well_formed_names_are_those_some_run_produces(name: str, formed: bool) -> None:
    assert well_formed(name) is formed
    assert well_formed("norm_gini_dot@10", ["norm_gini"])  # a plugin's list measure, given its name


def test_a_ratio_exactly_on_its_threshold_is_on_it_whatever_float_rounding_does() -> None:
    """14 hits against 8 over 90 users (|H_u| = 3, one user 4): the mean recalls are exactly
    7/135 and 4/135, so recall_ratio is exactly 1.75; as float means of per-user recalls it
    reads 1.7499999999999998. ``>= 1.75`` trips and ``< 1.75`` does not; a figure truly
    below (1.75 less one part in 10**8) still trips ``<``; a threshold of 0 stays exact."""
    from fractions import Fraction

    from auditor.gate import value_text

    hits_dot = [1] * 14 + [0] * 76
    hits_cos = [1] * 8 + [0] * 82
    sizes = [4] + [3] * 89  # user 0 has 4 held-out items, and no hit from either list
    hits_dot, hits_cos = [0] + hits_dot[:89], [0] + hits_cos[:89]
    recall = [np.mean(np.array(h, dtype=np.float64) / np.array(sizes)) for h in (hits_dot, hits_cos)]
    exact = [sum(Fraction(h, n) for h, n in zip(hits, sizes)) / 90 for hits in (hits_dot, hits_cos)]
    assert exact == [Fraction(7, 135), Fraction(4, 135)] and exact[0] / exact[1] == Fraction(7, 4)
    ratio = float(recall[0] / recall[1])
    assert ratio != 1.75  # the rounding the gate must not act on
    gates = parse_gates(["recall_ratio@10>=1.75", "recall_ratio@10<1.75", "recall_ratio@10==1.75",
                         "recall_ratio@10>1.75"], metric_names([10]))
    outcomes = evaluate_gates(gates, {"recall_ratio@10": ratio})
    assert [o.tripped for o in outcomes] == [True, False, True, False]
    assert [value_text(ratio, g) for g in gates] == ["1.75"] * 4
    below = evaluate_gates(gates, {"recall_ratio@10": 1.75 * (1 - 1e-8)})
    assert [o.tripped for o in below] == [False, True, False, False]
    zero = parse_gates(["ndcg_dot@10>0"], metric_names([10]))
    assert [o.tripped for o in evaluate_gates(zero, {"ndcg_dot@10": 1e-300})] == [True]


def test_an_alpha_with_an_exponent_is_named_and_gated_as_a_plain_decimal():
    """QA F9: --alpha 0.00001 was named alpha_1e-05, a name the gate grammar refused; it is
    alpha_0.00001 now, and every spelling of one α gates the same figure."""
    from auditor.alpha import alpha_scoring, canonical_name
    from auditor.gate import gates_for

    assert alpha_scoring(1e-05) == "alpha_0.00001" and alpha_scoring(0.3) == "alpha_0.3"
    assert alpha_scoring(2.5e-7) == "alpha_0.00000025" and alpha_scoring(0.5) == "alpha_0.5"
    assert canonical_name("gini_alpha_0.30@10.delta") == "gini_alpha_0.3@10.delta"
    assert canonical_name("spearman") == "spearman"
    spelled = ["head_share_1pct_alpha_1e-05@10>0", "head_share_1pct_alpha_0.00001@10>0",
               "head_share_1pct_alpha_1E-5@10>0", "head_share_1pct_alpha_0.000010@10>0"]
    gates = gates_for(spelled, [10], alphas=[1e-05])
    assert {gate.metric for gate in gates} == {"head_share_1pct_alpha_0.00001@10"}
    (gate,) = gates_for(["ndcg_alpha_0.30@10 >= 0.2"], [10], alphas=[0.3])
    assert gate.metric == "ndcg_alpha_0.3@10"
    with pytest.raises(GateError, match=r"is not 'METRIC OP NUMBER'"):  # '-' only in an exponent
        gates_for(["head_share-1pct_dot@10>0"], [10])


def test_a_gate_line_echoes_the_threshold_as_given():
    """QA F7: spearman<0.97770 printed as spearman<0.9777."""
    (gate,) = parse_gates(["spearman<0.97770"], metric_names([10]))
    assert str(gate) == "spearman<0.97770"
    (outcome,) = evaluate_gates([gate], {"spearman": 0.97769})
    assert outcome.describe() == "spearman<0.97770: 0.97769 (TRIPPED)"
    assert str(parse_gates(["recall_dot@10 > .5"], metric_names([10]))[0]) == "recall_dot@10>.5"
