"""Gates on changes (``--fail-on`` of ``popaudit diff``): the gate grammar of
:mod:`auditor.gate` over three names per flat metric (docs/diff.md):

* ``NAME OP NUMBER``: the new report's value, as ``check`` gates it
  (``head_share_1pct_dot@10>0.2``);
* ``NAME.delta OP NUMBER``: the change new − base (``head_share_1pct_dot@10.delta>0.01``:
  fail when the head share rose by more than one point);
* ``NAME.rel OP NUMBER``: the relative change (new − base) / |base|
  (``ndcg_dot@10.rel<-0.02``: fail when NDCG fell by more than 2%).

Names are checked before anything is compared (a typo is a GateError, exit 2); a gate on
a change that does not exist (the figure missing from one report, not comparable, or a
relative change of a figure that moved from a base of 0, or of float32 round-off of 0) cannot be evaluated and fails (UnmeasuredGateError,
exit 1), as ``check``'s gates do; the message says which of these it is, per gate.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from auditor.diff.compare import MetricChange, ReportDiff, from_zero
from auditor.errors import UnmeasuredGateError, setting
from auditor.gate import Gate, GateOutcome, evaluate_gates, parse_gates
from auditor.gate_names import out_of_range, well_formed
from auditor.gate_reasons import why_unmeasured

Reports = tuple[Mapping[str, Any], Mapping[str, Any]]
"""The base and new JSON reports, which say why a figure is missing from them."""

SUFFIXES = ("delta", "rel")


def diff_gate_names(metric_names: Iterable[str]) -> list[str]:
    """Every name a diff gate may use, for the flat ``metric_names`` of either report."""
    names = list(dict.fromkeys(metric_names))
    return [*names, *(f"{name}.{suffix}" for suffix in SUFFIXES for name in names)]


def parse_diff_gates(expressions: Iterable[str], metric_names: Iterable[str]) -> list[Gate]:
    """Parse ``--fail-on`` expressions of ``diff`` (GateError lists every problem). A
    well-formed name neither report holds (another K, an accuracy figure without a
    holdout: :func:`~auditor.gate.well_formed`) is accepted, to fail as not measured. A
    threshold outside the range of the figure or of its change, or on its edge where the gate
    could never trip, is refused as ``check`` refuses it (:func:`~auditor.gate_names.out_of_range`,
    QA11 diffapi F3: ``head_share_1pct_dot@10.delta>1``, meant as a point, passed a 3.5-point rise)."""
    return parse_gates(expressions, diff_gate_names(metric_names), well_formed=lambda name: well_formed(_split(name)[0]),
                       out_of_range=_out_of_range)


def _out_of_range(name: str, op: str, threshold: float) -> str:
    """:func:`~auditor.gate_names.out_of_range` of a diff gate's figure, or of its change."""
    figure, change = _split(name)
    return out_of_range(figure, op, threshold, change=change)


def evaluate_diff_gates(gates: Sequence[Gate], diff: ReportDiff, reports: Reports | None = None) -> list[GateOutcome]:
    """Evaluate the gates on ``diff``; UnmeasuredGateError names every gate whose value
    (a change of an incomparable or one-sided figure) does not exist, with why (from
    ``reports``, the base and new JSON reports, where a figure is missing from them)."""
    outcomes = evaluate_gates(gates, diff.flat())
    require_evaluated(outcomes, diff, reports)
    return outcomes


def gate_line(outcome: GateOutcome, diff: ReportDiff) -> str:
    """One gate's console line: its value and state, or, without a value, what the diff
    found of the figure (``not comparable``, ``in one report only``, ``not measured``)."""
    if outcome.value is not None:
        return outcome.describe()
    name = _split(outcome.gate.metric)[0]
    try:
        status = diff.metric(name).status
    except KeyError:
        status = "not_measured"
    shown = {"incomparable": "not comparable", "only_base": "in the base report only",
             "only_new": "in the new report only"}.get(status, "not measured")
    if status == "compared":  # a .rel gate on a base of 0 (or an infinite one): the figure exists
        shown = "relative change undefined"
    return f"{outcome.gate}: {shown}"


def require_evaluated(outcomes: Sequence[GateOutcome], diff: ReportDiff, reports: Reports | None = None) -> None:
    """UnmeasuredGateError naming every gate without a value in ``diff``, each with why."""
    missing = [f"{o.gate}: {why_unevaluated(o.gate, diff, reports)}" for o in dict.fromkeys(outcomes) if o.value is None]
    if missing:
        raise UnmeasuredGateError(f"cannot evaluate {setting('fail_on')} {'; '.join(missing)}")


def why_unevaluated(gate: Gate, diff: ReportDiff, reports: Reports | None = None) -> str:
    """Why ``gate`` has no value in ``diff`` (its name is one of :func:`diff_gate_names`, or
    well-formed); ``reports``: the base and new JSON reports, which say why a figure is
    missing from one or both."""
    name, suffix = _split(gate.metric)
    try:
        change: MetricChange | None = diff.metric(name)
    except KeyError:  # a well-formed name neither report holds
        change = None
    if change is not None and change.status == "compared" and suffix == "rel" and change.base is not None:
        if change.base == 0:
            return f"relative change undefined: the base value is 0 (gate {name}.delta instead)"
        if change.base == math.inf:  # a dot/cosine ratio over a cosine share of 0
            return f"relative change undefined: the base value is infinite (gate {name} on the new value instead)"
        if change.new is not None and from_zero(change.base, change.new):
            return (f"relative change undefined: the base value {change.base:.3g} is 0 to within float32 round-off "
                    f"of the new value {change.new:.4g} (gate {name}.delta instead)")
    return _missing(change, suffix, _whys(name, reports))


def _split(metric: str) -> tuple[str, str]:
    """A diff gate's flat name and suffix (``delta``, ``rel``, or "" for the new value)."""
    name, _, suffix = metric.rpartition(".")
    if suffix not in SUFFIXES:  # the new value alone (a flat name may hold a dot: alpha_0.5)
        return metric, ""
    return name, suffix


def _whys(name: str, reports: Reports | None) -> tuple[str, str] | None:
    """Why the base and the new report have no value for ``name`` (None without the reports)."""
    return None if reports is None else (why_unmeasured(name, reports[0]), why_unmeasured(name, reports[1]))


def _missing(change: MetricChange | None, suffix: str, whys: tuple[str, str] | None) -> str:
    """Why a figure or its change has no value, by its status; ``whys``: why the base and
    the new report lack it."""
    base_why, new_why = whys or ("", "")
    if change is not None and change.status == "incomparable":
        return "not comparable: " + (change.reason or "a setting differs")
    if change is None or change.status == "not_measured":
        if not whys:
            return "measured in neither report"
        same = base_why == new_why
        return f"neither report has it: {base_why}" if same else f"neither report has it (base: {base_why}; new: {new_why})"
    if change.status == "only_base":
        return "only the base report measured it" + (f" (the new report: {new_why})" if whys else
                                                     "" if suffix else " (the new report has no value)")
    if change.status == "only_new":
        return "only the new report measured it, so it has no change" + (f" (the base report: {base_why})" if whys else "")
    return "not measured in the two reports"
