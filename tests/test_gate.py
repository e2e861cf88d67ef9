"""--fail-on parsing and evaluation."""

import pytest

from auditor.errors import GateError
from auditor.flat import metric_names
from auditor.gate import evaluate_gates, parse_gates


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
