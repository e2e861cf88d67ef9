"""The trace file, written a line at a time as training goes.

Writing: each record is one JSON line, flushed to the operating system before the
monitor goes on, so a process that dies leaves every record taken so far in the file
(at worst a last line cut mid-write, which the reader drops and reports); it is also
fsync'd to the disk at most every :data:`FSYNC_SECONDS` and at close (an fsync costs
milliseconds, a large share of a training step), so a machine that loses power loses
at most those last seconds. A trace is not written atomically (that
would hide it until training ends); instead the writer refuses to replace an existing
file that is not a popaudit trace.

Reading is :func:`auditor.loading.trace.read_trace` (the audit's load stage reads traces).
"""

from __future__ import annotations

import json
import math
import os
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any


from auditor.errors import OutputError, TraceError, TrainingError
from auditor.io import is_special_file, write_atomic
from auditor.loading.trace import read_trace
from auditor.monitor.alerts import alert_identity
from auditor.monitor.settings import MonitorInputWarning
from auditor.trace_schema import (
    TRACE_SCHEMA,
    TraceHeader,
)


FSYNC_SECONDS = 5.0


class TraceWriter:
    """Appends records to a trace file, each flushed as it is written (see the module docstring)."""

    def __init__(self, path: Path | str, header: TraceHeader, *, fsync: bool = True, keep: int | None = None) -> None:
        """``keep``: continue the existing trace (a resumed run, :func:`resume_point`): its
        first ``keep`` bytes are kept (its records up to, not including, its end record),
        its header line replaced by ``header`` (the alerts in force, :func:`resumed_header`),
        and the new records follow; None writes a new trace from ``header``."""
        self.path = Path(path)
        self.fsync = fsync and not is_special_file(self.path)
        self._synced = -math.inf
        refuse_foreign(self.path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if keep is not None:
                _rewrite_kept(self.path, header, keep)
            self._fh: IO[str] | None = open(self.path, "w" if keep is None else "a", encoding="utf-8")
        except OSError as exc:
            raise OutputError(f"cannot write trace {self.path}: {exc.strerror or exc}") from exc
        if keep is None:
            self.write(header.to_json())

    def write(self, record: Mapping[str, Any]) -> None:
        """One record as one line, on disk before this returns."""
        if self._fh is None:
            raise OutputError(f"trace {self.path} is already closed")
        line = json.dumps(dict(record), allow_nan=False, separators=(",", ":"))
        try:
            self._fh.write(line + "\n")
            self._fh.flush()
            if self.fsync and time.monotonic() - self._synced >= FSYNC_SECONDS:
                os.fsync(self._fh.fileno())
                self._synced = time.monotonic()
        except OSError as exc:
            raise OutputError(f"cannot write trace {self.path}: {exc.strerror or exc}") from exc

    def close(self) -> None:
        if self._fh is not None:
            try:
                if self.fsync:
                    os.fsync(self._fh.fileno())
            except OSError as exc:
                raise OutputError(f"cannot write trace {self.path}: {exc.strerror or exc}") from exc
            finally:
                self._fh.close()
                self._fh = None


def _rewrite_kept(path: Path, header: TraceHeader, keep: int) -> None:
    """Replace the trace at ``path`` by its first ``keep`` bytes under a new header line,
    atomically (:func:`auditor.io.write_atomic`: a failure leaves the trace as it was). A
    trace named by a symlink is rewritten at the link's target, keeping its mode, as the
    appends that follow (an open() through the link) continue it. With the header unchanged
    (the same alerts) the file is only cut to ``keep`` in place: its inode, and so every
    hard link to it, stays (a changed header gives a new file under that name alone)."""
    with open(path, "rb") as fh:
        kept = fh.read(keep)
    first = kept.find(b"\n") + 1
    line = json.dumps(header.to_json(), allow_nan=False, separators=(",", ":")).encode("utf-8") + b"\n"
    if first and kept[:first] == line:
        os.truncate(path, keep)
        return
    write_atomic(path, line + (kept[first:] if first else b""), follow_link=True, durable=True)


def refuse_foreign(path: Path) -> None:
    """OutputError when ``path`` is a folder, or a non-empty file whose first line is not
    a trace header: a mistyped path must never destroy someone's data."""
    if path.is_dir():
        raise OutputError(f"cannot write trace {path}: it is a folder")
    if not path.is_file() or path.stat().st_size == 0:
        return
    with open(path, "rb") as fh:
        first = fh.readline(1 << 16)
    try:
        head = json.loads(first)
    except ValueError:
        head = None
    if not (isinstance(head, dict) and head.get("schema") == TRACE_SCHEMA):
        raise OutputError(
            f"{path} exists and is not a popaudit trace; popaudit replaces only its own traces: choose another path"
        )


@dataclass(frozen=True)
class ResumePoint:
    """Where a resumed run continues an existing trace."""

    step: int
    """The optimizer steps taken before the resume."""
    epoch: int
    """The epoch in progress at the resume (1-based)."""
    keep: int
    """Bytes of the trace kept: every line before its end record (and before a cut last line)."""
    header: TraceHeader
    """The trace's header with the alerts of the resumed run merged in (:func:`resumed_header`)."""
    fired: tuple[str, ...]
    """The alerts that already fired in the trace (each fires once over the whole trace)."""


def resume_point(path: Path, header: TraceHeader, start_step: int | None, start_epoch: int | None) -> ResumePoint:
    """Where a run resumed from a checkpoint continues the trace at ``path`` (the one policy
    of resuming): the trace must be a popaudit trace of the same item table (items, dimension)
    and counts kind; the run continues at ``start_step``/``start_epoch`` when given, else where
    the trace ended (its end record's step; the next epoch when it ended at an epoch record).
    A trace without an end record (its training died, or is still running) does not know the
    step its checkpoint had reached, so ``start_step`` is then required; a start before the
    trace's last record would put records out of order. TrainingError for each."""
    trace = read_trace(path)
    theirs = trace.header
    if (theirs.n_items, theirs.dim, theirs.counts) != (header.n_items, header.dim, header.counts):
        raise TrainingError(
            f"resume: {path} is a trace of {theirs.n_items:,} items of dimension {theirs.dim} with {theirs.counts} "
            f"counts, this monitor watches {header.n_items:,} of dimension {header.dim} with {header.counts} counts"
        )
    last = max([r.step for r in trace.records] + [a.step for a in trace.alerts], default=0)
    end = trace.end
    if start_step is None and end is None:
        raise TrainingError(
            f"resume: {path} has no end record (its training died or is still running), so the step its checkpoint "
            f"reached is unknown: give start_step, the optimizer steps the resumed model had taken (its last record is "
            f"at step {last})"
        )
    step = int(start_step) if start_step is not None else end.step  # type: ignore[union-attr]
    if step < last:
        raise TrainingError(f"resume: start_step {step} is before the trace's last record (step {last}) in {path}")
    if start_epoch is None:
        at_epoch_end = end is not None and any(r.step == end.step for r in trace.epochs)
        if end is not None:
            start_epoch = (end.epoch or 0) + 1 if at_epoch_end or not end.epoch else end.epoch
        else:  # died: in the epoch of its last record, or the next one after an epoch record
            final = trace.records[-1] if trace.records else None
            start_epoch = 1 if final is None else (final.epoch or 1) + (final.kind == "epoch")
    fired = tuple(a.alert for a in trace.alerts)
    return ResumePoint(step, int(start_epoch), _kept_bytes(path), resumed_header(theirs, header, step), fired)


def resumed_header(theirs: TraceHeader, ours: TraceHeader, step: int) -> TraceHeader:
    """The header of a trace that a run resumed at ``step`` continues: the trace's own, with
    the alerts watched over the whole trace (those before, then the resumed run's new ones),
    the step each new one was added at and each no longer watched was dropped at, and the
    resumed run's alert action (each alert record carries the action it fired with). Alerts
    are one alert when :func:`~auditor.monitor.alerts.alert_identity` says so (``spearman>0.60``
    is the trace's ``spearman>0.6``), under the trace's spelling."""
    key = {a: alert_identity(a) for a in (*theirs.alerts, *ours.alerts)}
    before, watched = {key[a] for a in theirs.alerts}, {key[a] for a in ours.alerts}  # before: grows with new
    new: list[str] = []
    for alert in ours.alerts:
        if key[alert] not in before:
            new.append(alert)
            before.add(key[alert])
    alerts = list(theirs.alerts) + new
    added = dict(theirs.alerts_added)  # an alert dropped and given again: the step it was given again
    added.update({a: step for a in alerts if a in new or (a in theirs.alerts_dropped and key[a] in watched)})
    dropped = {a: theirs.alerts_dropped.get(a, step) for a in alerts if key[a] not in watched}
    return replace(theirs, alerts=tuple(alerts), alert_action=ours.alert_action, alerts_added=added, alerts_dropped=dropped,
                   config=_resumed_settings(theirs, ours, step))


RESUMED_RUNS = "resumed_runs"
"""The header config's key listing each resumed run that trained under other optimizer settings."""


def run_settings(header: TraceHeader) -> dict[str, Any]:
    """The item optimizer settings a header records for its run (C1's evidence)."""
    config = header.config if isinstance(header.config, Mapping) else {}
    return {"optimizer": header.optimizer, **{k: config.get(k) for k in ("momentum", "weight_decay")}}


def _resumed_settings(theirs: TraceHeader, ours: TraceHeader, step: int) -> dict[str, Any]:
    """The trace's config, with the resumed run's optimizer settings appended to its
    :data:`RESUMED_RUNS` (with the step it resumed at) when they differ from those in force
    (the first run's in the header, or the last resumed run's): a warning says so, and
    ``check --trace`` judges C1 by every run's settings. The header keeps the first run's."""
    config = dict(theirs.config) if isinstance(theirs.config, Mapping) else {}
    listed = config.get(RESUMED_RUNS)
    runs = [r for r in listed if isinstance(r, Mapping)] if isinstance(listed, list) else []
    in_force = {k: v for k, v in runs[-1].items() if k != "step"} if runs else run_settings(theirs)
    now = run_settings(ours)
    if now == in_force:
        return config
    if now["optimizer"] is None:  # no optimizer= on resume: nothing known differs, no phantom run
        warnings.warn(
            f"resume: no optimizer was given, so the item optimizer settings of the run resumed at step {step:,} are "
            "not recorded; the trace keeps those of the runs it records",
            MonitorInputWarning, stacklevel=5,
        )
        return config
    words = {k: v for k, v in now.items() if v != in_force.get(k)}
    warnings.warn(
        f"resume: this run's item optimizer ({_described(now)}) differs from the trace's ({_described(in_force)}) in "
        f"{', '.join(words)}: the trace records it from step {step:,} (header config.{RESUMED_RUNS}), and an audit of the "
        "model with this trace judges C1 by every run's settings",
        MonitorInputWarning, stacklevel=5,
    )
    config[RESUMED_RUNS] = [*runs, {"step": step, **now}]
    return config


def _described(settings: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in settings.items() if v is not None) or "none recorded"


def _kept_bytes(path: Path) -> int:
    """The length of the trace's complete lines before its end record (a cut last line and
    the end record, always the last complete line when present, are dropped)."""
    with open(path, "rb") as fh:
        data = fh.read()
    keep = data.rfind(b"\n") + 1  # drop a last line cut mid-write
    previous = data.rfind(b"\n", 0, max(keep - 1, 0)) + 1
    if keep and b'"record":"end"' in data[previous:keep].replace(b" ", b""):
        keep = previous
    return keep


def warn_if_unfinished(path: Path) -> None:
    """A :class:`MonitorInputWarning` when a new trace is about to replace one at ``path`` that
    has no end record: its training died (or still runs), and a run resumed from its checkpoint
    should continue it (``resume=True``) or start a new trace at its step (``start_step``);
    replaced, its records are lost and the new trace counts from step 0."""
    if not path.is_file() or path.stat().st_size == 0:
        return
    try:
        trace = read_trace(path)
    except TraceError:  # not a trace: refuse_foreign says so
        return
    if trace.end is None:
        last = max((r.step for r in trace.records), default=0)
        warnings.warn(
            f"{path} holds the trace of a run that did not end (last record at step {last:,}); a new trace replaces it "
            "and counts from step 0: to continue a resumed run, pass resume=True (or start_step for a new trace)",
            MonitorInputWarning, stacklevel=4,
        )
