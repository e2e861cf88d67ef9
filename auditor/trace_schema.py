"""The training trace's records as typed values, and their JSON form (docs/monitor.md).

A trace is JSON lines: one ``header`` line, then ``step`` and ``epoch`` records (the
figures), ``alert`` records (an alert that fired) and, when training ended normally or
by an alert, one ``end`` record. Every line carries ``"record"``; the header carries
``"schema": "popaudit-trace"`` and ``"version"``. Non-finite numbers are written as
``null``; readers ignore keys they do not know, so fields can be added within a version.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

TRACE_SCHEMA = "popaudit-trace"
TRACE_VERSION = 1
"""Bumped only when a field changes meaning or is removed; additions keep the version."""

RecordKind = Literal["step", "epoch"]
AlertAction = Literal["warn", "raise", "stop"]
ALERT_ACTIONS: tuple[AlertAction, ...] = ("warn", "raise", "stop")

FIGURES = (
    "spearman",
    "loglog_slope",
    "mean_norm",
    "angle_share_90_1",
    "angle_share_90_10",
    "angle_median",
    "growth_per_update",
    "head_share_dot",
    "head_share_cosine",
    "head_share_ratio",
    "loss",
    "lr",
    "n_nonfinite",
)
"""The numeric figures of a record that alerts, trackers and plots read, by name
(``n_nonfinite``: item rows NaN or infinite, so ``n_nonfinite>0`` alerts on a run that diverged)."""

UNBOUNDED = "unbounded"
FIGURE_RANGE_KINDS: dict[str, str] = {
    "spearman": "correlation",
    "loglog_slope": UNBOUNDED,
    "mean_norm": "non_negative",
    "angle_share_90_1": "fraction",
    "angle_share_90_10": "fraction",
    "angle_median": "angle_degrees",
    "growth_per_update": "non_negative",
    "head_share_dot": "fraction",
    "head_share_cosine": "fraction",
    "head_share_ratio": "ratio",
    "loss": UNBOUNDED,
    "lr": "non_negative",
    "n_nonfinite": "non_negative",
}
"""Each figure's range, a kind of :data:`auditor.gate_names.FIGURE_RANGES` (the one table of
ranges), or :data:`UNBOUNDED` (a slope, a loss that may be negative): an alert whose threshold
is outside it, or on its edge where it could never fire, is refused as ``--fail-on``'s gate is."""

STEP_FIGURES = ("angle_share_90_1", "angle_share_90_10", "angle_median", "growth_per_update")
"""Figures measured around an optimizer step only: a step record's, and an epoch record's
pool of its epoch's step records. With no step records (interval 0) they are never measured."""

RATIO_FIGURES = ("head_share_ratio",)
"""Figures that are a ratio of two shares (:func:`auditor.sections.share_ratio`, the audit's
one ratio policy): +inf when only the divisor is 0, the most skew there is. A record keeps
the +inf (:meth:`TraceRecord.figure`: an alert on it trips); its JSON line writes null, as
for every non-finite number, and the reader restores the +inf from the two shares."""


UNBOUNDED_FIGURES = RATIO_FIGURES + ("mean_norm",)
"""Figures a record keeps at +inf (:meth:`TraceRecord.figure`), where +inf is a measured value
beyond every threshold: a ratio whose divisor was 0, a mean norm with an infinite row (an
alert ``mean_norm>10`` trips on it). NaN stays unmeasured."""


def finite_or_none(value: float | None) -> float | None:
    """``value`` as a float, None when it is missing or not finite (JSON has no NaN)."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


@dataclass(frozen=True)
class TraceHeader:
    """What was monitored and how: the first line of a trace."""

    source: str
    """Who wrote the trace: ``pytorch`` (a plain loop), ``retrain``, ``lightning``, ``keras``, ``recbole``."""
    n_items: int
    dim: int
    counts: Literal["running", "given"]
    """``running``: counted from the batches the monitor was shown; ``given``: up front."""
    interval: int
    """Optimizer steps between step records (0: epoch records only)."""
    k: int
    head_percent: float
    queries: str
    """Which queries the head share uses (``items``: a fixed sample of item rows; ``vectors``; ``callable``)."""
    n_queries: int
    max_exact_items: int
    """Up to this many items ρ is exact; above it, measured on a fixed seeded sample."""
    sample_items: int
    alerts: tuple[str, ...] = ()
    """Every alert watched over the trace, in the order first given (a resumed run's new
    alerts follow those before it: :attr:`alerts_added`, :attr:`alerts_dropped`)."""
    alert_action: AlertAction = "warn"
    """The action of the last run that wrote the trace (each alert record carries its own)."""
    optimizer: str | None = None
    """The optimizer's class name, when the monitor was given it (C1's evidence)."""
    item_ids_sha256: str | None = None
    """sha256 of the item ids in row order (one per line), when they were given."""
    created_unix: float = 0.0
    popaudit_version: str = ""
    config: Mapping[str, Any] = field(default_factory=dict)
    """Free-form settings of the run (``retrain`` records its training config)."""
    alerts_added: Mapping[str, Any] = field(default_factory=dict)
    """Alert -> the step from which a resumed run watched it (alerts absent: watched from the start)."""
    alerts_dropped: Mapping[str, Any] = field(default_factory=dict)
    """Alert -> the step from which a resumed run no longer watched it."""

    def to_json(self) -> dict[str, Any]:
        out = {"record": "header", "schema": TRACE_SCHEMA, "version": TRACE_VERSION, **asdict(self)}
        out["alerts"] = list(self.alerts)
        out["config"] = dict(self.config)
        out["alerts_added"], out["alerts_dropped"] = dict(self.alerts_added), dict(self.alerts_dropped)
        return out


@dataclass(frozen=True)
class TraceRecord:
    """The figures at one optimizer step (``kind="step"``) or at the end of an epoch.

    Epoch records pool the update angles measured during the epoch. Every figure is
    None where it could not be measured (no angles yet, an undefined correlation, a
    table that held NaN).
    """

    kind: RecordKind
    step: int
    """Optimizer steps taken so far."""
    epoch: int | None
    """The epoch in progress (1-based) for a step record; the epoch that ended for an epoch record."""
    elapsed_s: float
    """Seconds since the monitor started."""
    wall_time: float
    """Unix time of the record."""
    spearman: float | None
    spearman_n: int
    """Items ρ was measured on (all of them, or the sample)."""
    spearman_method: Literal["exact", "sample"]
    spearman_ci: tuple[float, float] | None
    """95% Fisher-z interval of ρ when measured on a sample (None when exact)."""
    loglog_slope: float | None
    mean_norm: float | None
    n_nonfinite: int
    """Item vectors with a NaN or infinite norm (training diverged)."""
    n_counted: int
    """Interactions counted so far (running counts) or given."""
    angle_n: int
    angle_share_90_1: float | None
    angle_share_90_10: float | None
    angle_median: float | None
    growth_per_update: float | None
    """Median c/s² = ‖Δq‖²/‖q‖² of the moved items, per appearance in the batch when known."""
    head_share_dot: float | None
    head_share_cosine: float | None
    head_share_ratio: float | None
    lr: float | None
    loss: float | None
    seconds: float | None = None
    """Epoch records: the epoch's duration."""
    monitor_s: float = 0.0
    """Seconds the monitor spent on this record."""
    n_zero_queries: int = 0
    """Head-share queries left out because they are zero as served (they score every item 0 and
    rank nothing, as ``check`` leaves them out): the shares are over the others."""
    growth_basis: str | None = None
    """What :attr:`growth_per_update` is per: ``appearance`` (each moved row's growth divided by
    its copies in the batch: what C5 projects) or ``step`` (the batch's rows unknown: the whole
    table compared, as the Keras and RecBole adapters do); None: no growth, or an older trace."""

    def figure(self, name: str) -> float | None:
        """One of :data:`FIGURES` by name (None: not measured); a figure of
        :data:`UNBOUNDED_FIGURES` keeps its +inf (a ratio whose divisor was 0: the most skew;
        a mean norm over an infinite row)."""
        if name not in FIGURES:
            raise KeyError(name)
        value = getattr(self, name)
        if name in UNBOUNDED_FIGURES and value == math.inf:
            return math.inf
        return finite_or_none(value)

    def figures(self) -> dict[str, float | None]:
        """Every figure of :data:`FIGURES`, by name."""
        return {name: self.figure(name) for name in FIGURES}

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"record": self.kind}
        for f in fields(self):
            if f.name == "kind":
                continue
            value = getattr(self, f.name)
            if isinstance(value, float):
                value = finite_or_none(value)
            elif isinstance(value, tuple):
                value = [finite_or_none(v) for v in value]
            out[f.name] = value
        return out


@dataclass(frozen=True)
class AlertEvent:
    """An alert that fired: at which step and epoch, on which value, and what was done."""

    step: int
    epoch: int | None
    alert: str
    """The expression as written, e.g. ``spearman>0.5``."""
    metric: str
    value: float
    action: AlertAction

    def to_json(self) -> dict[str, Any]:
        """The alert line; a ratio's +inf is written null (JSON has no inf; an alert fires
        only on a measured figure, so the reader reads a null value back as +inf)."""
        return {"record": "alert", **asdict(self), "value": finite_or_none(self.value)}

    def describe(self) -> str:
        where = f"step {self.step}" + (f" (epoch {self.epoch})" if self.epoch is not None else "")
        value = "∞" if self.value == math.inf else f"{self.value:.4g}"
        return f"alert {self.alert} fired at {where}: {self.metric} = {value}"


@dataclass(frozen=True)
class TraceEnd:
    """The last line of a trace whose training ended without dying."""

    step: int
    epoch: int | None
    """The last epoch begun (None: none)."""
    reason: str
    """``completed``, ``stopped by alert ...``, ``raised by alert ...`` or an error's text."""

    def to_json(self) -> dict[str, Any]:
        return {"record": "end", **asdict(self)}
