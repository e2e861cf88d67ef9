"""Gates (``--fail-on``): ``metric OP value`` expressions over the flat metric names, and
the one policy that ``check`` and ``batch`` apply to them.

* Names: the flat metrics for the run's cut-offs, of the registered list measures and
  audit measures (built-in and plugins', :func:`gates_for`), and every name other
  settings would produce (:func:`~auditor.gate_reasons.well_formed`: another K or α). Expressions are parsed
  and their names checked before any audit runs, so a typo is a usage error
  (:class:`~auditor.errors.GateError`, exit 2) listing the valid names rather than a
  silently passing gate; so is a threshold that is not a finite number.
* Evaluation: a gate trips when its condition holds in a run (a ``check``, or one
  audited batch row). A run that did not measure the metric leaves the gate
  unevaluated there; a gate that no run measured, or that had no run at all, is an
  :class:`UnmeasuredGateError` (exit 1): a gate that cannot be evaluated fails the
  build rather than pass it. That error comes before a tripped gate's exit 3, and says
  each gate's own reason (:func:`~auditor.gate_reasons.why_unmeasured`, from the run's JSON report).
* A K above the catalogue is clamped to the catalogue's size and its figures are filed
  under that K: a gate reads only the K it names, so ``…@10`` on a 6-item catalogue is
  unmeasured and says to gate ``…@6`` (and to add ``-k 6`` where it was not asked for). Its figures are the whole catalogue's lists, and a
  gate's name is the figure's name in every report, batch column and diff.
* A figure within one part in 10⁹ of its threshold (:data:`~auditor.harm.EDGE_SLACK`, the
  severity bands' slack) is on it (:func:`gate_holds`): accuracy figures are float means
  of per-user values and ratios of them, so an exact 1.75 (14 hits against 8) reads
  1.7499999999999998, and ``recall_ratio@10<1.75`` must not trip on that rounding.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from auditor.alpha import canonical_name
from auditor.errors import GateError, UnmeasuredGateError, setting
from auditor.config import DEFAULT_ALPHAS
from auditor.gate_reasons import (
    list_measures_of, queries_of, why_each_not_asked, why_inputs_lack, why_sections_unread, why_unmeasured,
)
from auditor.flat import RATIO, metric_names
from auditor.gate_names import FRACTION, compares_scorings, order_dependent, out_of_range, per_k_name, well_formed
from auditor.harm import EDGE_SLACK
from auditor.protocol import protocol_clause, report_population
from auditor.sections import SERVED
from auditor.wording import partly_saturated

_OPERATORS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
    ">": operator.gt,
    "<": operator.lt,
}
_EXPR = re.compile(r"^\s*([A-Za-z_](?:[\w@.]|(?<=\d[eE])-)*)\s*(>=|<=|==|!=|>|<)\s*"
                   r"([-+]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|(?i:inf|infinity|nan)))\s*$")
"""``METRIC OP NUMBER``; NUMBER as Python writes a float, ``inf`` and ``nan`` included so that
every non-finite threshold, spelled or overflowing (``1e400``), is refused for one reason.
A METRIC has no ``-`` but in an α's exponent (``alpha_1e-05``, the same as ``alpha_0.00001``,
:func:`~auditor.alpha.canonical_name`)."""
RATIO_RULE = "every <metric>_ratio@K is dot / cosine (accuracy ratios included)"
"""The one direction of every ratio, said wherever gate names are listed."""
@dataclass(frozen=True)
class Gate:
    """One parsed gate expression."""

    metric: str
    op: str
    threshold: float
    given: str = field(default="", compare=False)
    """The threshold as the expression spelled it (``0.97770``), which the gate's lines echo."""

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.given or threshold_text(self.threshold)}"


def threshold_text(threshold: float) -> str:
    """A threshold as given: ``%g`` (``1``, ``0.3``), or every digit where ``%g``'s six
    would round it (``0.9776936``), so a gate line never echoes a threshold it did not test."""
    short = f"{threshold:g}"
    return short if float(short) == threshold else repr(threshold)


def on_threshold(value: float, threshold: float) -> float:
    """``value``, or ``threshold`` itself when the two differ by float rounding only (a
    relative :data:`~auditor.harm.EDGE_SLACK`; exact for a threshold of 0)."""
    return threshold if math.isclose(value, threshold, rel_tol=EDGE_SLACK, abs_tol=0.0) else value


def gate_holds(value: float, gate: Gate) -> bool:
    """Whether ``gate``'s condition holds for ``value``: the one comparison of every gate,
    a figure on the threshold (:func:`on_threshold`) taken as equal to it."""
    return _OPERATORS[gate.op](on_threshold(value, gate.threshold), gate.threshold)


def value_text(value: float, gate: Gate) -> str:
    """A gate's value with 4 significant digits, more where 4 would contradict the outcome
    beside it (``spearman<0.977695: 0.9777 (TRIPPED)`` reads as false; ``0.9776937`` does
    not): the fewest digits whose printed value compares with the threshold as the value
    does, and equals it only where the value does."""
    compare = _OPERATORS[gate.op]
    value = on_threshold(value, gate.threshold)
    for digits in range(4, 18):
        text = f"{value:.{digits}g}"
        shown = float(text)
        if compare(shown, gate.threshold) == compare(value, gate.threshold) and \
                (shown == gate.threshold) == (value == gate.threshold):
            return text
    return repr(value)


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
        return f"{self.gate}: {value_text(self.value, self.gate)} ({state})"


def parse_gates(
    expressions: Iterable[str], valid_names: Iterable[str], *, option: str = "fail_on", rule: str | None = RATIO_RULE,
    well_formed: Callable[[str], bool] | None = None, out_of_range: Callable[[str, str, float], str] | None = None,
) -> list[Gate]:
    """Parse every expression; all problems are reported together in one GateError.

    ``option``: the setting the expressions came from, as messages name it (the
    training monitor's alerts use the same syntax under their own setting); ``rule``: what
    the list of valid names adds (``--fail-on``'s ratio rule; None for names without it);
    ``well_formed``: names outside ``valid_names`` that are accepted all the same, because
    other settings would measure them (a K not asked for): this run leaves them
    unmeasured, which fails the gate with the reason (exit 1) where a typo is exit 2;
    ``out_of_range``: why a gate's operator and threshold cannot go either way on its figure's
    range (:func:`~auditor.gate_names.out_of_range`; "" when they can), a usage error as a typo is."""
    valid = list(valid_names)
    known = set(valid)
    gates: list[Gate] = []
    problems: list[str] = []
    out_of_ranges: list[str] = []  # named names: no list of valid ones needed where these are all
    for expr in expressions:
        match = _EXPR.match(expr)
        if not match:
            problems.append(f"{expr!r} is not 'METRIC OP NUMBER' (OP one of > >= < <= == !=)")
            continue
        name, op, number = match.groups()
        name = canonical_name(name)  # alpha_0.30 and alpha_3e-1 are alpha_0.3
        if name not in known and not (well_formed is not None and well_formed(name)):
            problems.append(f"{expr!r}: unknown metric {name!r}")
            continue
        threshold = float(number)
        if not math.isfinite(threshold):  # x > inf never holds, x < inf always (but for a ratio's +inf)
            overflow = f" (it overflows to {threshold:g})" if number[-1].isdigit() else ""
            problems.append(f"{expr!r}: the threshold {number} is not a finite number{overflow}; give a finite "
                            "NUMBER (a ratio that is infinite, cosine serving none of the head, trips every '>' gate)")
            continue
        outside = out_of_range(name, op, threshold) if out_of_range is not None else ""
        if outside:  # shares gate as fractions: head_share_1pct_dot@10>3 (3%) or >1 (1%) could never trip
            out_of_ranges.append(f"{expr!r}: {outside}")
            continue
        gates.append(Gate(name, op, threshold, given=number))
    if out_of_ranges and not problems:
        said = "; ".join(out_of_ranges)
        held = " (shares, rates and overlaps gate as fractions, as the JSON report and a training trace hold them)"
        raise GateError(f"invalid {setting(option)}: {said}" + (held if FRACTION in said else ""))
    problems += out_of_ranges
    if problems:
        # A short list whole (the monitor's alert figures); a long one (every K and α) cut, counted.
        shown = ", ".join(valid) if len(valid) <= 16 else ", ".join(valid[:12]) + f", ... ({len(valid)} in all)"
        raise GateError(f"invalid {setting(option)}: " + "; ".join(problems) + f". Valid metrics: {shown}"
                        + (f"; {rule}" if rule else ""))
    return gates


def gates_for(
    expressions: Iterable[str],
    ks: Iterable[int],
    measures: Iterable[str] = (),
    alphas: Iterable[float] = DEFAULT_ALPHAS,
    list_measures: Iterable[str] | None = None,
    given: Mapping[str, Any] | None = None,
    catalogue: Mapping[str, Any] | None = None,
    wait_for_catalogue: bool = False,
) -> list[Gate]:
    """Parse gates for a run with cut-offs ``ks``, audit ``measures`` and
    ``list_measures`` (their names; list measures default to the built-in ones) and
    norm-aware ``alphas``: the valid names of ``check`` and ``batch`` alike. GateError
    lists every problem; a :func:`~auditor.gate_reasons.well_formed` name these settings do not measure (another
    K or α, or a figure of an input not ``given``: a trace, served lists, a bootstrap,
    :func:`~auditor.gate_reasons.why_inputs_lack`; None: not checked) is an UnmeasuredGateError (exit 1)
    saying what would measure it, before any audit runs. A K not asked for is advised by
    the ``catalogue`` (:func:`~auditor.gate_reasons.why_past_catalogue`); with
    ``wait_for_catalogue`` and none yet, a refusal that holds one is left to a call once the
    model is read (``check``: following the advice then runs)."""
    ks, alphas = sorted(set(ks)), list(alphas)
    gates = parse_run_gates(expressions, ks, measures, alphas, list_measures)
    known = set(metric_names(ks, measures, alphas, list_measures))
    unasked = why_each_not_asked({gate: per_k_name(gate.metric, list_measures) for gate in gates
                                  if gate.metric not in known}, ks, alphas, catalogue)
    unasked = {gate: unasked.get(gate) or (why_inputs_lack(gate.metric, given) if given is not None else "")
               for gate in gates}
    unasked = {gate: why for gate, why in unasked.items() if why}
    if wait_for_catalogue and any(name is not None and name.k not in ks
                                  for name in (per_k_name(gate.metric, list_measures) for gate in unasked)):
        return gates  # a K not asked for: the catalogue, read with the model, decides its advice
    if unasked:
        require_measured(list(unasked), [], where="with these settings", reasons=unasked)
    return gates


def refuse_unread(gates: Iterable[Gate], not_measured: Mapping[str, str],
                  list_measures: Iterable[str] | None = None) -> None:
    """UnmeasuredGateError, once a model's inputs are read and before any figure is
    measured, for the gates whose section those inputs leave unmeasured (an accuracy gate
    without held-out interactions, a retrieval gate with ``--no-retrieval``), each with its
    reason (:func:`~auditor.gate_reasons.why_sections_unread`)."""
    gates = list(gates)
    said = why_sections_unread([gate.metric for gate in gates], not_measured, list_measures)
    reasons = {gate: said[gate.metric] for gate in gates if gate.metric in said}
    if reasons:
        require_measured(list(reasons), [], where="with these inputs", reasons=reasons)


def parse_run_gates(
    expressions: Iterable[str],
    ks: Iterable[int],
    measures: Iterable[str] = (),
    alphas: Iterable[float] = DEFAULT_ALPHAS,
    list_measures: Iterable[str] | None = None,
) -> list[Gate]:
    """:func:`gates_for`'s parsing alone: the names are checked (a typo is a GateError), a
    name these settings do not measure is accepted; for ``batch``, which checks what each
    row measures by its own cells."""
    names = metric_names(sorted(set(ks)), measures, list(alphas), list_measures)
    return parse_gates(expressions, names, well_formed=lambda name: well_formed(name, list_measures),
                       out_of_range=lambda name, op, threshold: out_of_range(name, op, threshold, list_measures))


def evaluate_gates(gates: Iterable[Gate], metrics: Mapping[str, float | None]) -> list[GateOutcome]:
    """Evaluate each gate; a metric that was not measured never trips (reported as such)."""
    outcomes = []
    for gate in gates:
        value = metrics.get(gate.metric)
        tripped = value is not None and gate_holds(value, gate)
        outcomes.append(GateOutcome(gate, value, tripped))
    return outcomes


def require_measured(
    gates: Sequence[Gate], runs: Iterable[Sequence[GateOutcome]], *, where: str,
    reasons: Mapping[Gate, str] | None = None,
) -> None:
    """UnmeasuredGateError naming every gate that no run measured (``runs``: the
    outcomes of each run, from :func:`evaluate_gates`), each with its reason (``reasons``,
    from :func:`~auditor.gate_reasons.why_unmeasured`; else "not measured ``where``")."""
    measured = {outcome.gate for outcomes in runs for outcome in outcomes if outcome.value is not None}
    missing = [gate for gate in dict.fromkeys(gates) if gate not in measured]
    if missing:
        said = [f"{gate}: {(reasons or {}).get(gate) or f'not measured {where}'}" for gate in missing]
        raise UnmeasuredGateError(f"cannot evaluate {setting('fail_on')} {'; '.join(said)}")


def unmeasured_reasons(
    gates: Iterable[Gate], metrics: Mapping[str, float | None], report: Callable[[], Mapping[str, Any]],
) -> dict[Gate, str]:
    """:func:`~auditor.gate_reasons.why_unmeasured` for each gate whose metric has no value in ``metrics``, read
    from the JSON ``report()`` (made only when a gate needs it)."""
    missing = [gate for gate in gates if metrics.get(gate.metric) is None]
    made = report() if missing else {}
    return {gate: why_unmeasured(gate.metric, made) for gate in missing}


def without_void(gates: Iterable[Gate], metrics: Mapping[str, Any],
                 report: Callable[[], Mapping[str, Any]]) -> dict[str, Any]:
    """``metrics`` less the gates' figures that measure nothing in the run, read from the JSON
    ``report()`` (made only when a gate compares scorings): a dot/cosine ratio of a set-based
    measure or an overlap at a K that ``retrieval.saturated`` records, where every list holds every candidate
    (:func:`void_figures`, :func:`~auditor.gate_reasons.why_saturated`). Such a gate is unmeasured,
    exit 1 with that reason, never a pass of a ratio that is 1 by construction."""
    named = {gate.metric: metrics[gate.metric] for gate in gates if (name := per_k_name(gate.metric)) is not None
             and compares_scorings(name) and metrics.get(gate.metric) is not None}
    return {**metrics, **void_figures(named, report())} if named else dict(metrics)


def void_figures(metrics: Mapping[str, Any], report: Mapping[str, Any]) -> dict[str, Any]:
    """``metrics`` (a run's flat metrics) with every figure that compares two scorings' item sets
    (:func:`~auditor.gate_names.compares_scorings`: a set-based ``_ratio``, an overlap) at a K
    the JSON ``report`` records as saturated set to None: 1 by construction there, it is no
    "no skew". The one policy of the batch results row and every gate (:func:`without_void`)."""
    flags = (report.get("retrieval") or {}).get("saturated") or {}
    if not any(flags.values()):
        return dict(metrics)
    measures = list_measures_of(report)
    void = [name for name in metrics if (parsed := per_k_name(name, measures)) is not None
            and compares_scorings(parsed) and flags.get(str(parsed.k))]
    return {**metrics, **dict.fromkeys(void)}


def saturated_gates(gates: Iterable[Gate], report: Mapping[str, Any]) -> dict[Gate, str]:
    """The gates on one scoring's set-based figure at a saturated K (``retrieval.saturated``),
    each with how its line says so: measured, but of the candidates every list holds there,
    not of the model's ranking; they still evaluate. NDCG and MRR
    (:func:`~auditor.gate_names.order_dependent`) measure the ranking there: no note."""
    retrieval = report.get("retrieval") or {}
    said = {}
    for gate in gates:
        name = per_k_name(gate.metric, list_measures_of(report))
        if name is None or name.scoring in (None, SERVED, RATIO) or order_dependent(name) or \
                not (retrieval.get("saturated") or {}).get(str(name.k)):
            continue
        count = int((retrieval.get("n_saturated") or {}).get(str(name.k)) or 0)
        said[gate] = (f"{partly_saturated(name.k, count, *queries_of(retrieval))}: of the candidates, "
                      "not of the ranking")
    return said


def approximate_gates(gates: Iterable[Gate], metrics: Mapping[str, Any]) -> dict[Gate, str]:
    """The gates whose figure came from an approximate index's lists (dot, cosine, their
    ratio and overlap, under exposure or held-out accuracy), each with how its line says
    so, e.g. ``approximate (recall@10 0.649, can err either way)``, from the flat ``recall@K`` of the index
    that ``metrics`` (a run's flat metrics, or a batch row) holds; they still evaluate."""
    said = {}
    for gate in gates:
        name = per_k_name(gate.metric)
        if name is None or name.scoring in ("popular", SERVED) or (name.measure == "recall" and name.scoring is None):
            continue  # not from the index's lists (the popular list, served lists, the index's own recall)
        recall = metrics.get(f"recall@{name.k}")
        if isinstance(recall, (int, float)) and math.isfinite(recall):
            # Either way: HNSW can pass more of the head than exact search, IVF less (sections.APPROXIMATE_ERROR).
            said[gate] = f"approximate (recall@{name.k} {recall:.3f}, can err either way)"
    return said


def protocol_gates(gates: Iterable[Gate], report: Mapping[str, Any]) -> dict[Gate, str]:
    """The gates whose figure is of the model's own lists measured under another protocol
    than the training log's (:mod:`auditor.protocol`: counts for the log, a query file),
    and ``severity_level`` when the verdict was graded from those lists, each with how its
    line says so, read from the JSON ``report``; they still evaluate."""
    clause = protocol_clause(report_population(report)["seen_items"])
    if clause is None:
        return {}
    measures = list_measures_of(report)
    graded = (report.get("verdict") or {}).get("quoted_k") is not None  # the severity rests on those lists
    said = {}
    for gate in gates:
        if gate.metric == "severity_level" and graded:
            said[gate] = clause
            continue
        name = per_k_name(gate.metric, measures)
        if name is None or name.scoring == SERVED or (name.measure == "recall" and name.scoring is None):
            continue  # not of the model's lists (served lists, an index's own recall)
        said[gate] = clause
    return said


STAND_IN_NOTE = "of the stored tables standing in, not of the vectors the model serves with (see its first warning)"


def stand_in_gates(gates: Iterable[Gate], report: Mapping[str, Any]) -> dict[Gate, str]:
    """The gates whose figure is of lists the stored tables ranked where the report says they
    stand in for what the model serves (``served_vectors.as_served`` false: a tower not run,
    a score popaudit cannot place), and ``severity_level`` graded from them: they still
    evaluate (the tables' figures are the training mechanism's), and each line says so."""
    if (report.get("served_vectors") or {}).get("as_served") is not False:
        return {}
    measures, graded = list_measures_of(report), (report.get("verdict") or {}).get("quoted_k") is not None
    said = {}
    for gate in gates:
        name = per_k_name(gate.metric, measures)
        if (gate.metric == "severity_level" and graded) or (name is not None and name.scoring not in ("popular", SERVED)
                                                            and not (name.measure == "recall" and name.scoring is None)):
            said[gate] = STAND_IN_NOTE
    return said


def gate_notes(gates: Sequence[Gate], metrics: Mapping[str, Any], report: Mapping[str, Any]) -> dict[Gate, str]:
    """What each gate's line adds (:func:`stand_in_gates`, :func:`approximate_gates`,
    :func:`protocol_gates`, :func:`saturated_gates`), joined."""
    notes: dict[Gate, list[str]] = {}
    for said in (stand_in_gates(gates, report), approximate_gates(gates, metrics), protocol_gates(gates, report),
                 saturated_gates(gates, report)):
        for gate, note in said.items():
            notes.setdefault(gate, []).append(note)
    return {gate: ", ".join(parts) for gate, parts in notes.items()}
