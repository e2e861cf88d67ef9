"""``--fail-on`` gates: ``metric OP value`` expressions over the flat metric names.

Expressions are parsed and their names checked before the audit runs, so a typo is a
usage error listing the valid names rather than a silently passing gate.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from auditor.errors import GateError
from auditor.result import LIST_MEASURES, SCORINGS

_OPERATORS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
    ">": operator.gt,
    "<": operator.lt,
}
_EXPR = re.compile(r"^\s*([A-Za-z_][\w@.]*)\s*(>=|<=|==|!=|>|<)\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*$")
BASE_METRICS = (
    "spearman",
    "spearman_ci_lo",
    "spearman_ci_hi",
    "spearman_p",
    "pearson_log",
    "kendall",
    "loglog_slope",
)


@dataclass(frozen=True)
class Gate:
    """One parsed ``--fail-on`` expression."""

    metric: str
    op: str
    threshold: float

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.threshold:g}"


@dataclass(frozen=True)
class GateOutcome:
    """One gate evaluated: the metric's value (None: not measured) and whether it tripped."""

    gate: Gate
    value: float | None
    tripped: bool

    def describe(self) -> str:
        """One line for the console, e.g. ``spearman>0.3: 0.41 (TRIPPED)``."""
        if self.value is None:
            return f"{self.gate}: not measured"
        state = "TRIPPED" if self.tripped else "ok"
        return f"{self.gate}: {self.value:.4g} ({state})"


def metric_names(ks: Iterable[int], extra: Iterable[str] = ()) -> list[str]:
    """Every flat metric name a ``check`` with cut-offs ``ks`` can produce."""
    names = list(BASE_METRICS)
    for k in ks:
        for metric in LIST_MEASURES:
            names += [f"{metric}_{s}@{k}" for s in SCORINGS] + [f"{metric}_ratio@{k}"]
        names += [f"overlap_dot_cosine@{k}", f"recall@{k}"]
    return names + list(extra)


def parse_gates(expressions: Iterable[str], valid_names: Iterable[str]) -> list[Gate]:
    """Parse every expression; all problems are reported together in one GateError."""
    valid = list(valid_names)
    known = set(valid)
    gates: list[Gate] = []
    problems: list[str] = []
    for expr in expressions:
        match = _EXPR.match(expr)
        if not match:
            problems.append(f"{expr!r} is not 'METRIC OP NUMBER' (OP one of > >= < <= == !=)")
            continue
        name, op, number = match.groups()
        if name not in known:
            problems.append(f"{expr!r}: unknown metric {name!r}")
            continue
        gates.append(Gate(name, op, float(number)))
    if problems:
        shown = ", ".join(valid[:12]) + (f", ... ({len(valid)} in all)" if len(valid) > 12 else "")
        raise GateError("invalid --fail-on: " + "; ".join(problems) + f". Valid metrics: {shown}")
    return gates


def evaluate_gates(gates: Iterable[Gate], metrics: Mapping[str, float | None]) -> list[GateOutcome]:
    """Evaluate each gate; a metric that was not measured never trips (reported as such)."""
    outcomes = []
    for gate in gates:
        value = metrics.get(gate.metric)
        tripped = value is not None and _OPERATORS[gate.op](value, gate.threshold)
        outcomes.append(GateOutcome(gate, value, tripped))
    return outcomes
