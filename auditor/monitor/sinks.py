"""Where the monitor's records go besides the trace: MLflow metrics and TensorBoard scalars
(:func:`open_outputs` opens them and the trace writer, trackers first).

Names: step records as ``popaudit/<figure>`` at the optimizer step, epoch records as
``popaudit/epoch/<figure>`` at the epoch number; unmeasured figures are left out, and so
is a ratio's +inf (cosine's head share 0: the trackers plot numbers, and the trace and
the alerts keep it).
Neither tracker is imported unless asked for (MLflow: when it is already imported and
a run is active, or when asked by name).
"""

from __future__ import annotations

import math
import sys
import warnings
from pathlib import Path
from typing import Any, Protocol

from auditor.errors import AuditError, TrainingError
from auditor.monitor.trace import TraceWriter, warn_if_unfinished
from auditor.trace_schema import TraceHeader, TraceRecord
from auditor.tracking import MlflowRun


class Sink(Protocol):
    """Receives every record the monitor takes."""

    def log(self, record: TraceRecord) -> None: ...

    def close(self) -> None: ...


def scalar_names(record: TraceRecord) -> dict[str, float]:
    """The record's measured figures under their tracker names, and the x they belong at."""
    prefix = "popaudit/" if record.kind == "step" else "popaudit/epoch/"
    out = {prefix + name: value for name, value in record.figures().items()
           if value is not None and math.isfinite(value)}
    if record.spearman_ci is not None:
        out[prefix + "spearman_ci_lo"], out[prefix + "spearman_ci_hi"] = record.spearman_ci
    return out


def _x(record: TraceRecord) -> int:
    return record.step if record.kind == "step" else (record.epoch or 0)


class TrackerWarning(UserWarning):
    """A tracker (MLflow, TensorBoard) failed to take a record; training and the trace go on."""


def log_each(sinks: list[Sink], record: TraceRecord, failed: set[int]) -> None:
    """``record`` to every sink; a sink that fails (a tracker server gone mid-run) is a
    :class:`TrackerWarning` at its first failure (``failed``: the sinks that have warned),
    never an error in the training loop: the trace keeps every record."""
    for sink in sinks:
        try:
            sink.log(record)
        except Exception as exc:  # noqa: BLE001 - any tracker failure: the training must not die of it
            if id(sink) not in failed:
                failed.add(id(sink))
                warnings.warn(
                    f"{type(sink).__name__} could not log the record at step {record.step}: {type(exc).__name__}: "
                    f"{exc}; training goes on, the trace keeps every record (later failures of it are not repeated)",
                    TrackerWarning, stacklevel=4,
                )


class MlflowSink:
    """Logs each record's figures as metrics of one MLflow run (a given run id must exist:
    checked here, so a wrong id fails at construction, not at the first record)."""

    def __init__(self, run_id: str | None, client: Any = None) -> None:
        try:
            self.run = MlflowRun(run_id, client=client)
            if run_id is not None:
                self.run.client.get_run(run_id)
        except AuditError:  # MLflow not installed: said as the tracking module says it
            raise
        except Exception as exc:  # noqa: BLE001 - MLflow raises several kinds for a run or store it cannot use
            what = f"run {run_id!r}" if run_id is not None else "a run"
            raise TrainingError(f"mlflow: cannot log to {what}: {type(exc).__name__}: {exc}") from None

    def log(self, record: TraceRecord) -> None:
        self.run.log_metrics(scalar_names(record), step=_x(record), timestamp_ms=int(record.wall_time * 1000))

    def close(self) -> None:
        self.run.close()


class TensorBoardSink:
    """Writes each record's figures as TensorBoard scalars (``add_scalar``)."""

    def __init__(self, writer: Any) -> None:
        self.owned = isinstance(writer, (str, Path))
        if self.owned:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                raise TrainingError("TensorBoard logging needs the tensorboard package: pip install tensorboard") from None
            writer = SummaryWriter(log_dir=str(writer))
        if not callable(getattr(writer, "add_scalar", None)):
            raise TrainingError("tensorboard must be a log folder or a SummaryWriter (an object with add_scalar)")
        self.writer = writer

    def log(self, record: TraceRecord) -> None:
        for name, value in scalar_names(record).items():
            self.writer.add_scalar(name, value, _x(record), walltime=record.wall_time)
        if callable(getattr(self.writer, "flush", None)):
            self.writer.flush()

    def close(self) -> None:
        if self.owned:
            self.writer.close()


def make_sinks(mlflow: bool | str | None, tensorboard: Any, mlflow_client: Any = None) -> list[Sink]:
    """The sinks a monitor's ``mlflow`` and ``tensorboard`` arguments ask for
    (``mlflow_client``: the store of the run id ``mlflow`` names, when not the default's)."""
    sinks: list[Sink] = []
    if mlflow is None:  # automatic: only a run the user already started, never an import
        module = sys.modules.get("mlflow")
        if module is not None and module.active_run() is not None:
            sinks.append(MlflowSink(None))
    elif mlflow is True:
        sinks.append(MlflowSink(None))
    elif isinstance(mlflow, str):
        sinks.append(MlflowSink(mlflow, mlflow_client))
    if tensorboard is not None:
        sinks.append(TensorBoardSink(tensorboard))
    return sinks


def open_outputs(
    trace: Path | str | None, header: TraceHeader, fsync: bool, mlflow: tuple[bool | str | None, Any], tensorboard: Any,
    keep: int | None = None,
) -> tuple[list[Sink], TraceWriter | None]:
    """The trackers and the trace writer. Every argument is checked (the trackers' too)
    before the trace file is touched: the writer replaces an earlier trace, which a monitor
    that fails to start must keep."""
    sinks = make_sinks(mlflow[0], tensorboard, mlflow[1])
    if trace is not None and keep is None:
        warn_if_unfinished(Path(trace))
    try:
        return sinks, TraceWriter(trace, header, fsync=fsync, keep=keep) if trace is not None else None
    except BaseException:
        for sink in sinks:
            sink.close()
        raise
