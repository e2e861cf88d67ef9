"""A training trace as an audit input (``trace``, ``check --trace``): read once, checked
against the audited table, summarised into the report's training section.

The trace file is read by the monitor's own reader (:func:`auditor.loading.trace.read_trace`,
which imports only the values at the bottom): a file that is not a trace, of a newer
version, or with a malformed line is a :class:`~auditor.errors.TraceError` naming the
line; a last line cut mid-write (training died while writing it) is dropped and counted
as a warning. A trace written for another catalogue (another item count, or other item
ids when both sides record them) is flagged: its section says so and its angles are no
evidence for the conditions.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from auditor.errors import setting
from auditor.model import ModelBundle
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
    mismatch = _mismatch(trace, bundle)
    if mismatch is not None:
        warnings.append(
            f"{setting('trace')} {path} is of another model: {mismatch}; its figures are shown but its update "
            "angles are not used as evidence for C1, C4 or C5"
        )
    return summarise(trace, path, mismatch)


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
    epochs = [r.epoch for r in trace.records if r.epoch is not None]
    if trace.end is not None and trace.end.epoch is not None:
        epochs.append(trace.end.epoch)
    return TrainingSection(
        trace=str(path), source=trace.header.source, n_items=trace.header.n_items, interval=trace.header.interval,
        optimizer=trace.header.optimizer, complete=trace.complete,
        end_reason=None if trace.end is None else trace.end.reason, truncated=trace.truncated,
        matches_model=mismatch is None, mismatch=mismatch, points=points,
        point_kind="step" if trace.steps else "epoch", alerts=alerts, angles=angles,
        epochs=max(epochs) if epochs else None, **_steps(trace),
    )


def _steps(trace: Trace) -> dict[str, int | None]:
    """The steps the run took and the steps of a whole epoch, as far as the trace tells
    (TrainingSection's ``steps`` and ``steps_per_epoch``): C5 projects the updates taken."""
    last = trace.end.step if trace.end is not None else (trace.records[-1].step if trace.records else None)
    recorded = trace.header.config.get("steps_per_epoch")
    per_epoch = recorded if isinstance(recorded, int) and not isinstance(recorded, bool) and recorded > 0 else None
    if per_epoch is None:  # epoch 1's record, when training went on past it (not a stop within epoch 1)
        first = next((r for r in trace.epochs if r.epoch == 1), None)
        if first is not None and first.step > 0 and last is not None and last > first.step:
            per_epoch = first.step
    return {"steps": last, "steps_per_epoch": per_epoch}


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
