"""Gates (``--fail-on``): ``metric OP value`` expressions over the flat metric names, and
the one policy that ``check`` and ``batch`` apply to them.

* Names: the flat metrics for the run's cut-offs, of the registered list measures and
  audit measures (built-in and plugins', :func:`gates_for`). Expressions are parsed and their names checked before
  any audit runs, so a typo is a usage error (:class:`~auditor.errors.GateError`,
  exit 2) listing the valid names rather than a silently passing gate.
* Evaluation: a gate trips when its condition holds in a run (a ``check``, or one
  audited batch row). A run that did not measure the metric leaves the gate
  unevaluated there; a gate that no run measured, or that had no run at all, is an
  :class:`UnmeasuredGateError` (exit 1): a gate that cannot be evaluated fails the
  build rather than pass it. That error comes before a tripped gate's exit 3.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from auditor.errors import GateError, UnmeasuredGateError, setting
from auditor.config import DEFAULT_ALPHAS
from auditor.flat import metric_names

_OPERATORS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
    ">": operator.gt,
    "<": operator.lt,
}
_EXPR = re.compile(r"^\s*([A-Za-z_][\w@.]*)\s*(>=|<=|==|!=|>|<)\s*([-+]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
                   r"|(?i:inf|infinity|nan)))\s*$")
"""``METRIC OP NUMBER``; NUMBER as Python writes a float, ``inf`` and ``nan`` included so that
every non-finite threshold, spelled or overflowing (``1e400``), is refused for one reason."""
RATIO_RULE = "every <metric>_ratio@K is dot / cosine (accuracy ratios included)"
"""The one direction of every ratio, said wherever gate names are listed."""
@dataclass(frozen=True)
class Gate:
    """One parsed gate expression."""

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


def parse_gates(
    expressions: Iterable[str], valid_names: Iterable[str], *, option: str = "fail_on", rule: str | None = RATIO_RULE
) -> list[Gate]:
    """Parse every expression; all problems are reported together in one GateError.

    ``option``: the setting the expressions came from, as messages name it (the
    training monitor's alerts use the same syntax under their own setting); ``rule``: what
    the list of valid names adds (``--fail-on``'s ratio rule; None for names without it)."""
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
        threshold = float(number)
        if not math.isfinite(threshold):  # x > inf never holds, x < inf always (but for a ratio's +inf)
            overflow = f" (it overflows to {threshold:g})" if number[-1].isdigit() else ""
            problems.append(f"{expr!r}: the threshold {number} is not a finite number{overflow}; give a finite "
                            "NUMBER (a ratio that is infinite, cosine serving none of the head, trips every '>' gate)")
            continue
        gates.append(Gate(name, op, threshold))
    if problems:
        shown = ", ".join(valid[:12]) + (f", ... ({len(valid)} in all)" if len(valid) > 12 else "")
        raise GateError(f"invalid {setting(option)}: " + "; ".join(problems) + f". Valid metrics: {shown}"
                        + (f"; {rule}" if rule else ""))
    return gates


def gates_for(
    expressions: Iterable[str],
    ks: Iterable[int],
    measures: Iterable[str] = (),
    alphas: Iterable[float] = DEFAULT_ALPHAS,
    list_measures: Iterable[str] | None = None,
) -> list[Gate]:
    """Parse gates for a run with cut-offs ``ks``, audit ``measures`` and
    ``list_measures`` (their names; list measures default to the built-in ones) and
    norm-aware ``alphas``: the valid names of ``check`` and ``batch`` alike. GateError
    lists every problem."""
    return parse_gates(expressions, metric_names(sorted(set(ks)), measures, alphas, list_measures))


def evaluate_gates(gates: Iterable[Gate], metrics: Mapping[str, float | None]) -> list[GateOutcome]:
    """Evaluate each gate; a metric that was not measured never trips (reported as such)."""
    outcomes = []
    for gate in gates:
        value = metrics.get(gate.metric)
        tripped = value is not None and _OPERATORS[gate.op](value, gate.threshold)
        outcomes.append(GateOutcome(gate, value, tripped))
    return outcomes


def require_measured(gates: Sequence[Gate], runs: Iterable[Sequence[GateOutcome]], *, where: str) -> None:
    """UnmeasuredGateError naming every gate that no run measured (``runs``: the
    outcomes of each run, from :func:`evaluate_gates`); ``where`` ends the message."""
    measured = {outcome.gate for outcomes in runs for outcome in outcomes if outcome.value is not None}
    missing = [str(gate) for gate in dict.fromkeys(gates) if gate not in measured]
    if missing:
        raise UnmeasuredGateError(f"cannot evaluate {setting('fail_on')} {', '.join(missing)}: not measured {where}")
