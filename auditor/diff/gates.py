"""Gates on changes (``--fail-on`` of ``popaudit diff``): the gate grammar of
:mod:`auditor.gate` over three names per flat metric (docs/diff.md):

* ``NAME OP NUMBER``: the new report's value, as ``check`` gates it
  (``head_share_1pct_dot@10>0.2``);
* ``NAME.delta OP NUMBER``: the change new − base (``head_share_1pct_dot@10.delta>0.01``:
  fail when the head share rose by more than one point);
* ``NAME.rel OP NUMBER``: the relative change (new − base) / |base|
  (``ndcg_dot@10.rel<-0.02``: fail when NDCG fell by more than 2%).

Names are checked before anything is compared (a typo is a GateError, exit 2); a gate on
a change that was not measured (the figure missing from one report, or not comparable)
cannot be evaluated and fails (UnmeasuredGateError, exit 1), as ``check``'s gates do.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from auditor.diff.compare import ReportDiff
from auditor.gate import Gate, GateOutcome, evaluate_gates, parse_gates, require_measured

SUFFIXES = ("delta", "rel")


def diff_gate_names(metric_names: Iterable[str]) -> list[str]:
    """Every name a diff gate may use, for the flat ``metric_names`` of either report."""
    names = list(dict.fromkeys(metric_names))
    return [*names, *(f"{name}.{suffix}" for suffix in SUFFIXES for name in names)]


def parse_diff_gates(expressions: Iterable[str], metric_names: Iterable[str]) -> list[Gate]:
    """Parse ``--fail-on`` expressions of ``diff`` (GateError lists every problem)."""
    return parse_gates(expressions, diff_gate_names(metric_names))


def evaluate_diff_gates(gates: Sequence[Gate], diff: ReportDiff) -> list[GateOutcome]:
    """Evaluate the gates on ``diff``; UnmeasuredGateError names every gate whose value
    (a change of an incomparable or one-sided figure) does not exist."""
    outcomes = evaluate_gates(gates, diff.flat())
    require_measured(gates, [outcomes], where="in the two reports (a figure missing from one, or not comparable)")
    return outcomes
