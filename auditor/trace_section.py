"""The report's training section: what a training trace (``check --trace``) showed, as plain
values the report, the conditions and the JSON share (docs/report.md, ``training``).

Built by the load stage (:mod:`auditor.loading.trace_input`) from a trace file the
training monitor wrote (docs/monitor.md); it sits at the bottom so that the conditions
and the report read it without importing the monitor.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

ORTHOGONAL_SHARE = 0.95
"""Pooled share of measured update angles within 90° ± 1° at or above which the trace shows
orthogonal updates (norms can only grow): plain SGD on a cosine loss puts every angle there
up to rounding, so anything that tilts the step (momentum, weight decay, adaptive scaling, a
dot-product loss) shows as a share well below it."""
TILTED_SHARE = 0.5
"""At or below this share the updates are not orthogonal: at least one of C1–C4 fails."""

SERIES = ("spearman", "loglog_slope", "angle_share_90_1", "lr")
"""The figures of the training section's table and figure, over optimizer steps."""


@dataclass(frozen=True)
class TrainingPoint:
    """One record of the trace: the optimizer step and the figures of :data:`SERIES` (None: not measured)."""

    step: int
    epoch: int | None
    spearman: float | None
    loglog_slope: float | None
    angle_share_90_1: float | None
    lr: float | None


@dataclass(frozen=True)
class TrainingAlert:
    """An alert the monitor fired: where, on which value, and what it did."""

    step: int
    epoch: int | None
    alert: str
    metric: str
    value: float
    action: str


@dataclass(frozen=True)
class TrainingAngles:
    """The step records' measured update angles, pooled over the trace."""

    n_records: int
    n: int
    """Update angles measured in all (items moved by the recorded steps)."""
    share_90_1: float
    share_90_10: float
    growth_per_update: float | None
    """Median over the records of their median growth c/s² per update."""
    first_step: int
    last_step: int
    growth_per_step: bool = False
    """The growth is per optimizer step, not per appearance (the batch's rows were unknown:
    Keras, RecBole): an item in several batches of a step counts once, so it overstates
    the growth per appearance C5 projects."""

    @property
    def orthogonal(self) -> bool | None:
        """True: the updates were orthogonal (:data:`ORTHOGONAL_SHARE`); False: they were
        not (:data:`TILTED_SHARE`); None: in between, which says neither."""
        if self.share_90_1 >= ORTHOGONAL_SHARE:
            return True
        return False if self.share_90_1 <= TILTED_SHARE else None

    def describe(self) -> str:
        """The measurement in words, for condition evidence."""
        return (
            f"the training trace measured {self.n:,} update angles over steps {self.first_step}–{self.last_step}: "
            f"{self.share_90_1:.1%} within 90° ± 1°, {self.share_90_10:.1%} within ± 10°"
        )


NO_END = "; the trace has no end record, so the run took at least these"
"""Said of the steps or epochs of a trace without an end record (its training died, or still
runs): C5's projection over them is a lower bound, not the updates actually taken."""


@dataclass(frozen=True)
class TrainingSection:
    """What a training trace showed, and whether it belongs to the audited model."""

    trace: str
    """The trace file as given."""
    source: str
    """Who wrote it (``pytorch``, ``retrain``, ``lightning``, ``keras``, ``recbole``)."""
    n_items: int
    interval: int
    optimizer: str | None
    complete: bool
    """Training ended normally or by an alert (False: it died, or is still running)."""
    end_reason: str | None
    truncated: bool
    """A last line cut mid-write was dropped."""
    matches_model: bool
    """The trace is of the audited model: its catalogue (item count, item ids when both record
    them), the training settings both record, and its end ρ (docs/monitor.md)."""
    mismatch: str | None
    """Why it does not match (None when it does); its angles are then no evidence."""
    points: tuple[TrainingPoint, ...]
    """Step records in order (epoch records when the trace has no step record)."""
    point_kind: str
    """``step`` or ``epoch``: which records :attr:`points` holds."""
    alerts: tuple[TrainingAlert, ...]
    angles: TrainingAngles | None
    epochs: int | None
    """Epochs the trace saw begin, less those that ended without a step (:attr:`empty_epochs`;
    None: none recorded with a step)."""
    steps: int | None = None
    """Optimizer steps taken: the end record's, else the last record's (None: no record)."""
    steps_per_epoch: int | None = None
    """Optimizer steps of a whole epoch: the header config's ``steps_per_epoch`` (``retrain``),
    else the step of epoch 1's record when training went on past it (None: unknown)."""
    end_spearman: float | None = None
    """ρ of the trace's last record when it is at the end step: the model at the end of
    training, which a finished run's checkpoint is (None: the trace does not show it)."""
    end_step: int | None = None
    end_spearman_range: tuple[float, float] | None = None
    """Where the audited table's ρ must lie for the trace to be this model's."""
    end_spearman_rule: str | None = None
    """Why the range is that wide, in words."""
    counts: str | None = None
    """How the trace counted interactions: ``given`` up front or ``running`` over the batches."""
    end_counted: int | None = None
    """Interactions the trace's last record had counted (running counts: the batches seen)."""
    recorded_loss: str | None = None
    """The loss the trace header's config records (None: none)."""
    recorded_lr: float | None = None
    """The learning rate the trace header's config records (None: none)."""
    recorded_optimizer: str | None = None
    """The optimizer kind the trace records (its header's class name, else its config's; None: none known)."""
    last_optimizer: str | None = None
    """The optimizer kind of the trace's last run (the last of config ``resumed_runs``, else the
    header's), the run a checkpoint saved at its end and a declared ``--optimizer`` describe."""
    nonfinite_step: int | None = None
    """The first record's step at which item rows were NaN or infinite (training diverged; None: never)."""
    nonfinite_rows: int = 0
    """The most item rows any record found NaN or infinite."""
    ended_within_epoch: bool = False
    """Training ended between epoch records and the trace does not tell the steps of an epoch:
    :attr:`epochs` counts the last epoch whole (C5's projection is then an upper bound)."""
    recorded_momentum: float | None = None
    """The item optimizer's momentum the trace header's config records (None: none)."""
    recorded_weight_decay: float | None = None
    """The item optimizer's weight decay the trace header's config records (None: none)."""
    start_step: int = 0
    """The optimizer step the trace begins at: its header config's ``start_step``, above 0 for
    a new trace of a run resumed from a checkpoint (its records cover the steps after it)."""
    empty_epochs: tuple[int, ...] = ()
    """Epochs the trace recorded ending without an optimizer step (a loader that yielded
    nothing): not counted in :attr:`epochs`, nor in C5's projection."""
    runs: int = 1
    """The runs the trace's header lists settings of: the first and each resumed one under other
    optimizer settings (config ``resumed_runs``)."""
    settings_run: int | None = None
    """The step a resumed run that trained under other optimizer settings began at, when its
    settings are the ones :attr:`optimizer` and ``recorded_momentum``/``recorded_weight_decay``
    give (the first run that breaks C1 by them, of every run the header lists); None: the first run's."""

    def settings_key(self, name: str) -> str:
        """Where the trace records the judged run's setting ``name`` (C1's evidence names the run)."""
        if self.settings_run is None:
            return "header.optimizer" if name == "optimizer" else f"config.{name}"
        return f"config.resumed_runs: {name} of the run resumed at step {self.settings_run:,}"

    @property
    def evidence(self) -> TrainingAngles | None:
        """The angles the conditions may use: None when the trace is of another model."""
        return self.angles if self.matches_model else None

    @property
    def last(self) -> TrainingPoint | None:
        return self.points[-1] if self.points else None

    def to_dict(self) -> dict[str, Any]:
        """The JSON report's ``training`` object (docs/report.md)."""
        out = asdict(self)
        out["points"] = [asdict(p) for p in self.points]
        out["alerts"] = [asdict(a) for a in self.alerts]
        if self.angles is not None:
            out["angles"]["orthogonal"] = self.angles.orthogonal
        return out
