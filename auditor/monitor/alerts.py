"""Training alerts: ``--fail-on``'s expression syntax over a record's figures, and what
an alert does when it fires.

An alert fires once, at the first record (step or epoch) whose figure meets it; a
figure that was not measured never fires. Actions: ``warn`` (a
:class:`TrainingAlertWarning` through :mod:`warnings`), ``stop`` (warn, and ask the
trainer to stop: the monitor's ``should_stop``, which adapters pass on to Lightning's
``should_stop`` and Keras' ``stop_training``), ``raise`` (:class:`~auditor.errors.AlertTripped`
after the alert and the end of training are in the trace).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

from auditor.errors import AlertTripped, GateError, TrainingError, setting
from auditor.gate import Gate, evaluate_gates, parse_gates
from auditor.gate_names import out_of_range
from auditor.trace_schema import (
    ALERT_ACTIONS, FIGURE_RANGE_KINDS, FIGURES, STEP_FIGURES, AlertAction, AlertEvent, TraceRecord,
)


class TrainingAlertWarning(UserWarning):
    """An alert of the training monitor fired (action ``warn`` or ``stop``)."""


def _range_check(n_items: int | None) -> Callable[[str, str, float], str]:
    """Why an alert on ``name`` could never fire (its range kind, :data:`FIGURE_RANGE_KINDS`);
    "" when it can. The one range check of ``--fail-on``'s gates; with the watched table's
    ``n_items``, ``n_nonfinite`` (a count of its rows) is bounded by it too."""
    def check(name: str, op: str, threshold: float) -> str:
        rows = (0.0, float(n_items), f"a number of item rows, 0–{n_items:,} (the watched table's)") \
            if name == "n_nonfinite" and n_items is not None else None
        return out_of_range(name, op, threshold, kind=FIGURE_RANGE_KINDS[name], bounds=rows)
    return check


def parse_alerts(expressions: Iterable[str], interval: int | None = None, n_items: int | None = None) -> list[Gate]:
    """Alert expressions (``spearman>0.5``, ``angle_share_90_1>0.9``) over the figures of
    a trace record; every problem in one :class:`~auditor.errors.GateError`, as ``--fail-on``
    (its list of valid names without ``--fail-on``'s ratio rule: the monitor has no
    ``<metric>_ratio@K``), a threshold outside its figure's range included (``head_share_dot>5``:
    a fraction, 5% is 0.05). ``interval`` 0 (epoch records only) refuses alerts on the
    figures only a step record measures (:data:`STEP_FIGURES`): they could never fire. ``n_items``:
    the watched table's rows, the most ``n_nonfinite`` can be (None: not known yet, as in
    ``retrain``'s options before its data is read; the monitor passes it when made)."""
    gates = parse_gates(expressions, FIGURES, option="alerts", rule=None, out_of_range=_range_check(n_items))
    blind = sorted({g.metric for g in gates if g.metric in STEP_FIGURES})
    if interval == 0 and blind:
        raise GateError(
            f"invalid {setting('alerts')}: {', '.join(blind)} {'is' if len(blind) == 1 else 'are'} measured "
            f"around optimizer steps only, and {setting('interval')} 0 records none, so the alert could never "
            f"fire; give {setting('interval')} above 0 or alert on another figure"
        )
    return gates


def alert_identity(expression: str) -> Gate | str:
    """What makes two alert expressions one alert: the figure, the operator and the threshold
    as a number (a :class:`~auditor.gate.Gate` compares those), so ``spearman>0.60``,
    ``spearman > 0.6`` and ``spearman>6e-1`` are one alert, which fires once over a trace
    however a resumed run spells it. An expression that no longer parses (a trace written by
    another version) is its text without spaces."""
    try:
        return parse_gates([expression], FIGURES, option="alerts", rule=None)[0]
    except GateError:
        return "".join(expression.split())


def check_action(action: str, allowed: Sequence[str] = ALERT_ACTIONS) -> AlertAction:
    """``action`` when it is one of ``allowed`` (an adapter may support fewer), else TrainingError."""
    if action not in allowed:
        raise TrainingError(f"alert action {action!r} is not one of {', '.join(allowed)} here")
    return action  # type: ignore[return-value]  # checked against the literal's values


class Alerts:
    """The parsed alerts of one monitor and which of them have fired."""

    def __init__(
        self, expressions: Iterable[str], action: AlertAction, interval: int | None = None, n_items: int | None = None
    ) -> None:
        self.gates = list(dict.fromkeys(parse_alerts(expressions, interval, n_items)))  # one alert, given twice: once
        self.action = action
        self._fired: set[Gate] = set()

    def remember(self, fired: Iterable[str], names: Iterable[str] = ()) -> None:
        """Mark the alerts (expressions as written in alert records) that already fired in
        the trace a resumed run continues: each fires once over the whole trace, compared by
        :func:`alert_identity`. ``names``: the trace's spelling of its alerts (its header),
        which this run's alert records then use for the same alerts."""
        earlier = {alert_identity(a) for a in fired}
        spelled: dict[Gate, str] = {}
        for known in map(alert_identity, names):
            if isinstance(known, Gate):
                spelled.setdefault(known, known.given)
        self.gates = [replace(g, given=spelled[g]) if g in spelled else g for g in self.gates]
        self._fired.update(g for g in self.gates if g in earlier)

    def fire(self, record: TraceRecord) -> list[AlertEvent]:
        """The alerts that fire at ``record`` (each at most once over the run)."""
        pending = [g for g in self.gates if g not in self._fired]
        if not pending:
            return []
        events = []
        for outcome in evaluate_gates(pending, record.figures()):
            if outcome.tripped and outcome.value is not None:
                self._fired.add(outcome.gate)
                events.append(
                    AlertEvent(record.step, record.epoch, str(outcome.gate), outcome.gate.metric, outcome.value, self.action)
                )
        return events


def act(event: AlertEvent) -> None:
    """Warn for ``warn`` and ``stop``; raise AlertTripped for ``raise``."""
    if event.action == "raise":
        raise AlertTripped(f"{event.describe()} (TRIPPED); training stopped")
    suffix = "; asking the trainer to stop" if event.action == "stop" else ""
    warnings.warn(event.describe() + suffix, TrainingAlertWarning, stacklevel=4)
