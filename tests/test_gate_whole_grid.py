"""QA accuracy F2: ``-k`` and ``--alpha`` replace their defaults, so the advice of a gate
on a K or α the run does not measure gives the whole list to pass: following it measures
every gate's figure (and keeps the default α grid the trade-off chooses among)."""

from __future__ import annotations

import re

import pytest

from auditor.config import DEFAULT_ALPHAS
from auditor.errors import UnmeasuredGateError
from auditor.gate import gates_for

GATES = ["ndcg_alpha_0.3@10<0.3", "ndcg_alpha_0.5@10<0.3", "gini_alpha_0.4@10>0.9"]


def _advised(gates: list[str], ks: list[int], alphas: tuple[float, ...]) -> tuple[list[int], list[float]]:
    """The cut-offs and α the refusal's first advice tells to pass."""
    with pytest.raises(UnmeasuredGateError) as caught:
        gates_for(gates, ks, ("accuracy",), alphas)
    said = str(caught.value)
    command = said[said.index("so pass them all: ") + len("so pass them all: "):].split(")")[0]
    return ([int(v) for v in re.findall(r"\bks (\d+)", command)] or list(ks),
            [float(v) for v in re.findall(r"\balphas ([\d.]+)", command)] or list(alphas))


def test_following_the_advice_measures_every_gate_and_keeps_the_default_grid() -> None:
    ks, alphas = _advised(GATES, [10], DEFAULT_ALPHAS)
    assert alphas == [0.25, 0.5, 0.75, 0.3, 0.4]  # the old advice: [0.3] alone, which refused alpha_0.5 next
    assert [g.metric for g in gates_for(GATES, ks, ("accuracy",), tuple(alphas))] == [
        "ndcg_alpha_0.3@10", "ndcg_alpha_0.5@10", "gini_alpha_0.4@10"]


def test_a_k_and_an_alpha_missing_together_each_name_the_whole_list() -> None:
    with pytest.raises(UnmeasuredGateError) as caught:
        gates_for(["gini_dot@20>0.5", "gini_alpha_0.3@10>0.5"], [10, 100], (), (0.5,))
    said = " ".join(str(caught.value).split())
    # (the library's setting names; the CLI says -k and --alpha: tests/hostile/test_options.py)
    assert "(add ks 20; ks replaces the cut-offs measured now (10, 100), so pass them all: ks 10 ks 100 ks 20)" in said
    assert "(add alphas 0.3; alphas replaces the α measured now (0.5), so pass them all: alphas 0.5 alphas 0.3)" in said
