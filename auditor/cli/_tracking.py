"""``check --mlflow``: the audit logged to an MLflow run, a thin layer over
:func:`auditor.tracking.log_audit` (the run, the metric names and the artifacts are its)."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from auditor.cli._common import stderr
from auditor.errors import AuditError

if TYPE_CHECKING:
    from auditor.result import AuditResult

REPORT_FORMATS = {"html": "report.html", "json": "report.json"}
"""The reports logged as artifacts (``popaudit/report.html``, ``popaudit/report.json``)."""


def require_mlflow() -> None:
    """Before any work: MLflow must be importable (else the error names the extra)."""
    from auditor.tracking import mlflow_module

    mlflow_module()


def log_to_mlflow(result: AuditResult, reports: Mapping[str, str | bytes], *, quiet: bool) -> str:
    """Log ``result`` with its rendered ``reports`` (format -> content) to the active MLflow
    run or a new one under ``MLFLOW_TRACKING_URI`` (default ``./mlruns``); returns the run id.
    A store MLflow cannot reach or write is an :class:`~auditor.errors.AuditError` (exit 1)
    saying so; the report files were written before."""
    import mlflow

    from auditor.tracking import log_audit

    with tempfile.TemporaryDirectory(prefix="popaudit-reports-") as tmp:
        paths: dict[str, Path] = {}
        for fmt, content in reports.items():
            path = Path(tmp) / REPORT_FORMATS[fmt]
            path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
            paths[fmt] = path
        try:
            run_id = log_audit(result, reports=paths)
        except (mlflow.exceptions.MlflowException, OSError) as exc:
            message = getattr(exc, "message", None) or getattr(exc, "strerror", None) or str(exc)
            raise AuditError(f"cannot log the audit to MLflow ({_where()}): {str(message).splitlines()[0]}") from None
    if not quiet:
        stderr.print(f"Logged the audit to MLflow run {run_id} ({_where()})", markup=False, highlight=False,
                     soft_wrap=True)
    return run_id


def _where() -> str:
    import mlflow

    from auditor.tracking import tracking_uri

    return mlflow.get_tracking_uri() if mlflow.active_run() is not None else tracking_uri()
