"""Experiment trackers: the MLflow run popaudit logs to, and an audit logged there.

MLflow is optional (extra ``popaudit[mlflow]``; ``mlflow-skinny`` suffices) and imported
only here, when called. The run is the caller's, else the active one, else a new run
(experiment ``popaudit``) in the store ``MLFLOW_TRACKING_URI`` names, by default a local
``./mlruns`` folder. MLflow 3 refuses local file stores unless ``MLFLOW_ALLOW_FILE_STORE``
is set; popaudit sets it (when unset) for a local store only, since the local folder is
the documented default.

Metric names: MLflow allows no ``@``, so a flat name such as ``head_share_1pct_dot@10``
is logged as ``head_share_1pct_dot_at_10``.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from auditor.errors import AuditError
from auditor.result import json_safe

if TYPE_CHECKING:
    from auditor.result import AuditResult

DEFAULT_STORE = "mlruns"
EXPERIMENT = "popaudit"
BATCH = 1000
"""Metrics per ``log_batch`` call (MLflow's own limit)."""


def mlflow_module() -> ModuleType:
    """``mlflow``, or AuditError saying how to install it."""
    try:
        import mlflow
    except ImportError:
        raise AuditError("MLflow is not installed: pip install 'popaudit[mlflow]'") from None
    return mlflow


def tracking_uri() -> str:
    """``MLFLOW_TRACKING_URI``, or the local ``./mlruns`` folder (as a file URI)."""
    uri = os.environ.get("MLFLOW_TRACKING_URI") or Path(DEFAULT_STORE).resolve().as_uri()
    if uri.startswith("file:") or "://" not in uri:  # a local file store
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    return uri


def metric_key(name: str) -> str:
    """A flat metric name as MLflow accepts it (``@`` becomes ``_at_``)."""
    return name.replace("@", "_at_")


class MlflowRun:
    """One MLflow run: the given id, the active run, or a new one (ended by :meth:`close`)."""

    def __init__(self, run_id: str | None = None, *, experiment: str = EXPERIMENT, client: Any = None) -> None:
        """``client``: the ``MlflowClient`` of the store that holds ``run_id`` (a framework's
        own MLflow logger's); None: the active run's store, or ``MLFLOW_TRACKING_URI``'s."""
        mlflow = mlflow_module()
        active = mlflow.active_run()
        if client is not None and run_id is not None:
            self.client = client
        elif run_id is None and active is not None:
            run_id = active.info.run_id
            self.client = mlflow.MlflowClient()
        else:
            self.client = mlflow.MlflowClient(tracking_uri=tracking_uri())
        self.created = run_id is None
        if run_id is None:
            found = self.client.get_experiment_by_name(experiment)
            experiment_id = found.experiment_id if found is not None else self.client.create_experiment(experiment)
            run_id = self.client.create_run(experiment_id).info.run_id
        self.run_id: str = run_id
        self._metric = mlflow.entities.Metric

    def log_metrics(self, values: Mapping[str, float | None], *, step: int = 0, timestamp_ms: int | None = None) -> None:
        """Every finite value as a metric at ``step`` (None and NaN are left out)."""
        stamp = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        metrics = [
            self._metric(metric_key(k), float(v), stamp, step)
            for k, v in values.items() if v is not None and math.isfinite(v)
        ]
        for start in range(0, len(metrics), BATCH):
            self.client.log_batch(self.run_id, metrics=metrics[start : start + BATCH])

    def close(self) -> None:
        """End the run when this object created it."""
        if self.created:
            self.client.set_terminated(self.run_id)
            self.created = False


def log_audit(
    result: AuditResult,
    *,
    reports: Mapping[str, Path | str] | None = None,
    run_id: str | None = None,
    experiment: str = EXPERIMENT,
) -> str:
    """Log one audit to MLflow: its flat metrics (``--fail-on`` names), the verdict (tags
    ``popaudit.bias_detected``, ``popaudit.severity`` and the artifact
    ``popaudit/verdict.json``) and each report file in ``reports`` (format -> path) as an
    artifact under ``popaudit/``. Returns the run id (a new run is ended afterwards)."""
    run = MlflowRun(run_id, experiment=experiment)
    try:
        run.log_metrics(result.flat_metrics())
        verdict = result.verdict
        run.client.set_tag(run.run_id, "popaudit.bias_detected", str(verdict.bias_detected).lower())
        run.client.set_tag(run.run_id, "popaudit.severity", verdict.severity)
        if result.inputs.model:
            run.client.set_tag(run.run_id, "popaudit.model", str(result.inputs.model))
        with tempfile.TemporaryDirectory(prefix="popaudit-mlflow-") as tmp:
            path = Path(tmp) / "verdict.json"
            path.write_text(json.dumps(json_safe(asdict(verdict)), indent=2), encoding="utf-8")
            run.client.log_artifact(run.run_id, str(path), artifact_path="popaudit")
        for fmt, report in (reports or {}).items():
            report = Path(report)
            if not report.is_file():
                raise AuditError(f"cannot log the {fmt} report to MLflow: {report} is not a file")
            run.client.log_artifact(run.run_id, str(report), artifact_path="popaudit")
    finally:
        run.close()
    return run.run_id
