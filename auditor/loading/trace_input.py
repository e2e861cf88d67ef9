"""A training trace as an audit input (``trace``, ``check --trace``): read once, checked
against the audited table, summarised into the report's training section.

The trace file is read by the monitor's own reader (:func:`auditor.loading.trace.read_trace`,
which imports only the values at the bottom): a file that is not a trace, of a newer
version, or with a malformed line is a :class:`~auditor.errors.TraceError` naming the
line; a last line cut mid-write (training died while writing it) is dropped and counted
as a warning. A trace of another model is flagged (its section says so, its figures are no
evidence for the conditions): another catalogue (item count, or item ids when both sides
record them), another optimizer, loss or learning rate where the trace and the checkpoint
both record it, or, once the audit has measured it (:func:`check_end_rho`), a ρ of the
model at the end of training that is not the audited table's.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from auditor.errors import setting
from auditor.model import ModelBundle
from auditor.optimizers import ADAPTIVE, as_float, item_groups, normalise_optimizer, optimizer_family
from auditor.loading.trace import Trace, read_trace
from auditor.trace_section import TrainingAlert, TrainingPoint, TrainingSection


def load_training(path: Path, bundle: ModelBundle, warnings: list[str]) -> TrainingSection:
    """The training section of the trace at ``path`` for the audited ``bundle``; what the
    reader tolerated and a trace of another model are added to ``warnings``."""
    trace = read_trace(path)
    if trace.truncated:
        warnings.append(
            f"{setting('trace')} {path}: its last line was cut mid-write (training died while writing it) "
            "and was dropped; 1 record lost"
        )
    mismatch = _mismatch(trace, bundle) or _setting_mismatch(trace, bundle)
    if mismatch is not None:
        _flag(path, mismatch, warnings)
    section = summarise(trace, path, mismatch)
    _coverage(section, warnings)
    if section.nonfinite_step is not None:
        warnings.append(
            f"{setting('trace')} {path}: training diverged: item rows were NaN or infinite from step "
            f"{section.nonfinite_step} (up to {section.nonfinite_rows:,} rows in a record); ρ, the slope and the head "
            "shares of those records are unmeasured"
        )
    return section


def _coverage(section: TrainingSection, warnings: list[str]) -> None:
    """Warnings for a trace that does not cover the whole training: one that begins after
    step 0 (a new trace of a resumed run) and one without an end record (its training died
    or is still running), each saying over which steps C5 then projects; and epochs that
    ended without a step, which are not counted."""
    where = f"{setting('trace')} {section.trace}"
    if section.start_step > 0:
        warnings.append(
            f"{where} begins at step {section.start_step:,} (a run resumed from a checkpoint): its records cover the "
            f"steps after it only, while its steps ({section.steps:,}) and epochs count the whole run from step 0, "
            "which C5 projects over"
        )
    if not section.complete:
        reached = "no record" if section.steps is None else f"step {section.steps:,}"
        warnings.append(
            f"{where} has no end record (its training died, or is still running): its last record is at {reached}, "
            "and the model may have trained past it; C5 projects over the steps the trace records, a lower bound on "
            "the updates the model took"
        )
    if section.empty_epochs:
        many = len(section.empty_epochs) > 1
        n = section.epochs
        trained = "no epoch" if n is None else f"{n:,} epoch{'s' if n > 1 else ''}"
        warnings.append(
            f"{where}: epoch{'s' if many else ''} {', '.join(str(e) for e in section.empty_epochs)} ended without an "
            f"optimizer step (an epoch record at the step {'they' if many else 'it'} began at: a loader that yielded "
            f"nothing?); not counted as epochs trained (the run trained {trained}), nor in C5's projection"
        )


def flag(training: TrainingSection, mismatch: str, warnings: list[str]) -> TrainingSection:
    """``training`` flagged as another model's (``mismatch``: why), said in ``warnings``."""
    _flag(training.trace, mismatch, warnings)
    return replace(training, matches_model=False, mismatch=mismatch)


def _flag(path: Path | str, mismatch: str, warnings: list[str]) -> None:
    warnings.append(
        f"{setting('trace')} {path} is of another model: {mismatch}; its figures are shown but its update "
        "angles are not used as evidence for C1, C4 or C5"
    )


def check_end_rho(
    training: TrainingSection, rho: float | None, warnings: list[str], counted: int | None = None
) -> TrainingSection:
    """The section flagged as another model's when the trace's ρ of the model at the end of
    training (:attr:`TrainingSection.end_spearman`) is not the audited table's ``rho``
    (the audit's own, None or NaN: undefined) within :attr:`end_spearman_range`.

    ``counted``: the interactions the audit counted (its log's rows on the table). A trace
    with running counts that had counted fewer (a run stopped within its first epoch) is not
    compared (:func:`_partial_epoch`): its ρ is over the batches seen so far, where items not
    yet seen have count 0 and an untouched norm, so it measures seen against unseen more than
    popularity and no margin ties it to the audit's ρ over the whole log."""
    allowed = training.end_spearman_range
    if not training.matches_model or allowed is None or training.end_spearman is None:
        return training
    if training.counts == "running" and training.end_counted is not None and counted is not None \
            and training.end_counted < counted:
        return _partial_epoch(training, rho, counted, warnings)
    if rho is None or not math.isfinite(rho) or allowed[0] <= rho <= allowed[1]:
        return training
    mismatch = (
        f"its last record's Spearman ρ {training.end_spearman:.4f} (step {training.end_step}, the model at the end of "
        f"training) is not the audited table's {rho:.4f}: the same table gives a ρ in [{allowed[0]:.4f}, "
        f"{allowed[1]:.4f}] ({training.end_spearman_rule})"
    )
    return flag(training, mismatch, warnings)


def _partial_epoch(training: TrainingSection, rho: float | None, counted: int, warnings: list[str]) -> TrainingSection:
    """The section of a running-count trace that saw less than the audit's log: its end ρ
    is kept and said, not compared (:func:`check_end_rho`)."""
    seen = training.end_counted or 0
    rule = (f"not compared: running counts over {seen:,} of the log's {counted:,} interactions (less than one "
            "epoch), where items not yet seen have count 0 and an untouched norm")
    ours = "undefined" if rho is None or not math.isfinite(rho) else f"{rho:.4f}"
    warnings.append(
        f"{setting('trace')} {training.trace}: its last record's Spearman ρ {training.end_spearman:.4f} (step "
        f"{training.end_step}) is over running counts of {seen:,} of the log's {counted:,} interactions (the run "
        f"stopped within its first epoch), not the audit's ρ over the whole log ({ours}); it is not used to check "
        "that the trace is this model's, and alerts on it fired on those partial counts"
    )
    return replace(training, end_spearman_range=None, end_spearman_rule=rule)


def summarise(trace: Trace, path: Path, mismatch: str | None = None) -> TrainingSection:
    """The section's values from a trace that was read (``mismatch``: why it is not the model's)."""
    chosen = trace.steps or trace.epochs
    points = tuple(
        TrainingPoint(r.step, r.epoch, r.figure("spearman"), r.figure("loglog_slope"),
                      r.figure("angle_share_90_1"), r.figure("lr"))
        for r in chosen
    )
    alerts = tuple(TrainingAlert(a.step, a.epoch, a.alert, a.metric, a.value, a.action) for a in trace.alerts)
    angles = trace.angles()
    epochs, empty = _epochs_trained(trace)
    run_step, run = judged_run(trace)
    return TrainingSection(
        trace=str(path), source=trace.header.source, n_items=trace.header.n_items, interval=trace.header.interval,
        optimizer=run.get("optimizer") if isinstance(run.get("optimizer"), str) else None, complete=trace.complete,
        end_reason=None if trace.end is None else trace.end.reason, truncated=trace.truncated,
        matches_model=mismatch is None, mismatch=mismatch, points=points,
        point_kind="step" if trace.steps else "epoch", alerts=alerts, angles=angles,
        epochs=epochs, **_steps(trace), **end_rho(trace), **_recorded(trace),
        start_step=_start_step(trace.header.config), empty_epochs=empty, settings_run=run_step,
        runs=1 + len(_resumed_runs(trace.header.config if isinstance(trace.header.config, Mapping) else {})),
        recorded_momentum=as_float(run.get("momentum")), recorded_weight_decay=as_float(run.get("weight_decay")),
    )


def _resumed_runs(config: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The header config's ``resumed_runs`` that name their step (another kind of value: ignored)."""
    listed = config.get("resumed_runs")
    return [r for r in listed if isinstance(r, Mapping) and isinstance(r.get("step"), int)] \
        if isinstance(listed, list) else []


def judged_run(trace: Trace) -> tuple[int | None, Mapping[str, Any]]:
    """The optimizer settings C1 judges the trace's training by: of the first run's (the
    header's) and each resumed run's that changed them (config ``resumed_runs``), the first
    that breaks C1 by them (an adaptive optimizer, momentum or weight decay above 0), else the
    first run's; with the step that run resumed at (None: the first run)."""
    config: Mapping[str, Any] = trace.header.config if isinstance(trace.header.config, Mapping) else {}
    first = {"optimizer": trace.header.optimizer, "momentum": config.get("momentum"),
             "weight_decay": config.get("weight_decay")}
    resumed = _resumed_runs(config)
    for step, run in [(None, first), *((r["step"], r) for r in resumed)]:
        kind = _kind(run.get("optimizer"))
        if (kind is not None and kind in ADAPTIVE) or any((as_float(run.get(k)) or 0.0) > 0 for k in ("momentum", "weight_decay")):
            return step, run
    return None, first


def _empty_epochs(trace: Trace) -> list[int]:
    """The epochs that ended without an optimizer step (a loader that yielded nothing): an
    epoch record at the step its epoch began at, the previous epoch record's (the trace's
    start step for the first). Such an epoch trained nothing, so it is no epoch trained."""
    begun, empty = _start_step(trace.header.config), []
    for record in trace.epochs:
        if record.step <= begun and record.epoch is not None:
            empty.append(record.epoch)
        begun = max(begun, record.step)
    stepped = {r.epoch for r in trace.records if r.epoch is not None and r.epoch not in empty}
    return sorted(set(empty) - stepped)


def _epochs_trained(trace: Trace) -> tuple[int | None, tuple[int, ...]]:
    """The epochs the run trained (TrainingSection's ``epochs``: the last epoch the trace
    saw begin, less the empty ones; None when none had a step) and the empty epochs."""
    epochs = [r.epoch for r in trace.records if r.epoch is not None]
    if trace.end is not None and trace.end.epoch is not None:
        epochs.append(trace.end.epoch)
    empty = _empty_epochs(trace)
    trained = max(epochs) - len(empty) if epochs else 0
    return (trained if trained > 0 else None), tuple(empty)


def _first_epoch_steps(trace: Trace, last: int | None) -> int | None:
    """The steps of a whole epoch from the trace's first epoch with steps, when every epoch
    before it is an empty one the trace recorded (so its record's step counts that epoch's
    steps from step 0) and training went on past it (a run stopped within it did not end it)."""
    empty = _empty_epochs(trace)
    first = next((r for r in trace.epochs if r.epoch is not None and r.epoch not in empty), None)
    if first is None or first.epoch is None or first.epoch != 1 + len([e for e in empty if e < first.epoch]):
        return None
    return first.step if first.step > 0 and last is not None and last > first.step else None


def _start_step(config: Any) -> int:
    """The step a trace begins at (its header config's ``start_step``: a resumed run's new trace)."""
    value = config.get("start_step") if isinstance(config, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _recorded(trace: Trace) -> dict[str, Any]:
    """What the trace records beside its figures (TrainingSection's ``counts``, ``recorded_*``
    and ``nonfinite_*``): how it counted, its config's loss, learning rate, momentum and weight
    decay (compared with the audit's settings, and C1's and C4's evidence where the checkpoint
    records none), and where item rows first went NaN or infinite."""
    config: Mapping[str, Any] = trace.header.config if isinstance(trace.header.config, Mapping) else {}
    loss = config.get("loss")
    broken = [r for r in trace.records if r.n_nonfinite > 0]
    return {"counts": trace.header.counts, "recorded_loss": loss if isinstance(loss, str) else None,
            "recorded_lr": as_float(config.get("lr")),
            "recorded_optimizer": _kind(judged_run(trace)[1].get("optimizer")) or _kind(config.get("optimizer")),
            "last_optimizer": _last_run_kind(trace), "nonfinite_step": broken[0].step if broken else None,
            "nonfinite_rows": max((r.n_nonfinite for r in broken), default=0)}


def _steps(trace: Trace) -> dict[str, Any]:
    """The steps the run took and the steps of a whole epoch, as far as the trace tells
    (TrainingSection's ``steps`` and ``steps_per_epoch``): C5 projects the updates taken."""
    last = trace.end.step if trace.end is not None else (trace.records[-1].step if trace.records else None)
    recorded = trace.header.config.get("steps_per_epoch")
    per_epoch = recorded if isinstance(recorded, int) and not isinstance(recorded, bool) and recorded > 0 else None
    if per_epoch is None:  # the first epoch's record, when training went on past it (not a stop within it)
        per_epoch = _first_epoch_steps(trace, last)
    # Ended between epoch records, or stopped by an alert at a step record (a loop that breaks
    # there may still write an epoch record at that step, as docs/monitor.md's loop does).
    stopped = trace.end is not None and trace.end.reason.startswith("stopped by alert") \
        and any(r.step == last for r in trace.steps)
    within = per_epoch is None and bool(last) and (stopped or not any(r.step == last for r in trace.epochs))
    return {"steps": last, "steps_per_epoch": per_epoch, "ended_within_epoch": within}


def _mismatch(trace: Trace, bundle: ModelBundle) -> str | None:
    """Why the trace's catalogue is not the audited table's (None: it is, as far as both record)."""
    header = trace.header
    if header.n_items != bundle.n_items:
        return f"the trace watched {header.n_items:,} items, the audited table has {bundle.n_items:,} rows"
    if header.item_ids_sha256 is not None and bundle.item_ids is not None:
        digest = hashlib.sha256("\n".join(str(i) for i in bundle.item_ids.tolist()).encode("utf-8")).hexdigest()
        if digest != header.item_ids_sha256:
            return "the trace's item ids (in row order) are not the audited table's"
    return None


LR_TOLERANCE = 1e-6
"""Relative difference at which two recorded learning rates are two rates: the same number
written by two programs (a float32 0.05 read back as 0.0500000007) agrees far closer."""


def _last_run_kind(trace: Trace) -> str | None:
    """The optimizer kind of the trace's last run (its header's, or its config's, for one run)."""
    config: Mapping[str, Any] = trace.header.config if isinstance(trace.header.config, Mapping) else {}
    resumed = _resumed_runs(config)
    return _kind(resumed[-1].get("optimizer") if resumed else trace.header.optimizer) or _kind(config.get("optimizer"))


def _setting_mismatch(trace: Trace, bundle: ModelBundle) -> str | None:
    """Which training setting the trace records otherwise than the checkpoint (None: none
    that both record): the optimizer (the trace's last run's class name or config against
    the checkpoint's optimizer state or config), the loss and the learning rate (configs)."""
    theirs: Mapping[str, Any] = trace.header.config if isinstance(trace.header.config, Mapping) else {}
    ours: Mapping[str, Any] = bundle.config if isinstance(bundle.config, Mapping) else {}
    run = _last_run_kind(trace)  # the checkpoint is of the last run: its optimizer is compared
    state = _state_kind(bundle)
    model, where = (state, "optimizer state") if state is not None else (_kind(ours.get("optimizer")), "config")
    if run is not None and model is not None and optimizer_family(run) != optimizer_family(model):
        return f"the trace's run used {run}, the checkpoint's {where} records {model}"
    loss_t, loss_m = theirs.get("loss"), ours.get("loss")
    if isinstance(loss_t, str) and isinstance(loss_m, str) and loss_t.lower() != loss_m.lower():
        return f"the trace's config records the loss {loss_t!r}, the checkpoint's {loss_m!r}"
    lr_t, lr_m = as_float(theirs.get("lr")), as_float(ours.get("lr"))
    if lr_t is not None and lr_m is not None and not math.isclose(lr_t, lr_m, rel_tol=LR_TOLERANCE):
        return f"the trace's config records the learning rate {lr_t:g}, the checkpoint's {lr_m:g}"
    return None


def _kind(name: Any) -> str | None:
    """An optimizer kind from a recorded name (None: not a name, or not one known)."""
    return normalise_optimizer(name)[0] if isinstance(name, str) else None


def _state_kind(bundle: ModelBundle) -> str | None:
    """The optimizer kind the checkpoint's optimizer state shows for the item table, when
    the groups that can train it agree."""
    kinds = {g.kind for g in item_groups(bundle).candidates}
    return kinds.pop() if len({optimizer_family(k) for k in kinds}) == 1 else None


RHO_TOLERANCE = 0.02
"""How far the audited table's ρ may lie from a trace's ρ of the model at the end of training
when both count the same interactions. On the same table and counts the two are equal to the
last bit (docs/monitor.md); the margin allows for an audit log that differs from the trainer's
by a few rows (ids the audit could not map), while another run of the same catalogue, with
another optimizer, loss or length, lands tenths away."""
RUNNING_RHO_TOLERANCE = 0.05
"""The margin for a trace with running counts: its ρ is over the batches the monitor saw
(proportional to the log after whole epochs, part of an epoch more after a stop within one),
not over the log the audit counts."""


def end_rho(trace: Trace) -> dict[str, Any]:
    """The trace's ρ of the model at the end of training and the range the audited table's
    ρ must fall in (TrainingSection's ``end_*`` fields; all None when the trace does not show
    the end model: it did not end, or its last record is not at the end step, or has no ρ)."""
    none: dict[str, Any] = {"end_spearman": None, "end_step": None, "end_spearman_range": None,
                            "end_spearman_rule": None}
    last = trace.records[-1] if trace.records else None
    if trace.end is None or last is None or last.step != trace.end.step or last.spearman is None:
        return none
    rho = last.spearman
    if trace.header.counts == "running":
        margin, rule = RUNNING_RHO_TOLERANCE, f"its ρ ± {RUNNING_RHO_TOLERANCE:g}: running counts"
    else:
        margin, rule = RHO_TOLERANCE, f"its ρ ± {RHO_TOLERANCE:g}: the same computation on the same counts"
    lo, hi = rho - margin, rho + margin
    if last.spearman_method == "sample" and last.spearman_ci is not None:  # a sampled ρ: its interval, widened
        lo, hi = min(lo, last.spearman_ci[0] - margin), max(hi, last.spearman_ci[1] + margin)
        rule += ", and the sampled ρ's 95% interval"
    return {"end_spearman": rho, "end_step": last.step, "end_spearman_range": (max(lo, -1.0), min(hi, 1.0)),
            "end_spearman_rule": rule, "end_counted": last.n_counted}
