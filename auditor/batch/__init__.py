"""Batch audits: one manifest row -> one ``run_audit`` -> one row of a results Parquet file.

The library behind ``popaudit batch MANIFEST`` (README.md). One job per module:

* :mod:`~auditor.batch.manifest`: reading and validating manifests (columns, refused
  columns, cell conversion);
* :mod:`~auditor.batch.jobs`: rows -> :class:`~auditor.config.AuditConfig` jobs, and
  every file a batch reads (outputs never overwrite inputs);
* :mod:`~auditor.batch.workers`: what runs in a worker process (set-up, watchdog,
  caches, one audit and its record);
* :mod:`~auditor.batch.dispatch`: inline, process-pool and Dask dispatch;
* :mod:`~auditor.batch.run`: :func:`run_batch` (resume, flushing, interruption);
* :mod:`~auditor.batch.results`: the results table's schema, writer and reader.

Summaries of a results table (console tables, HTML page, trend plot) are rendering:
:mod:`auditor.report.batch_summary`.
"""

from __future__ import annotations

from auditor.batch.dispatch import WORKER_DIED
from auditor.batch.jobs import BatchJob, batch_inputs, build_jobs
from auditor.batch.manifest import Manifest, ManifestRow, convert_setting, manifest_columns, read_manifest
from auditor.batch.results import (
    RESULTS_VERSION,
    ResultsWriter,
    read_results,
    result_schema,
)
from auditor.batch.run import BatchInterrupted, BatchOutcome, run_batch
from auditor.batch.workers import AuditFn, audit_job, error_record, result_record
from auditor.config import parse_memory_size
from auditor.result import CONDITION_IDS
from auditor.summaries import STATUS_ERROR, STATUS_OK

__all__ = [
    "CONDITION_IDS",
    "RESULTS_VERSION",
    "STATUS_ERROR",
    "STATUS_OK",
    "WORKER_DIED",
    "AuditFn",
    "BatchInterrupted",
    "BatchJob",
    "BatchOutcome",
    "Manifest",
    "ManifestRow",
    "ResultsWriter",
    "audit_job",
    "batch_inputs",
    "build_jobs",
    "convert_setting",
    "error_record",
    "manifest_columns",
    "parse_memory_size",
    "read_manifest",
    "read_results",
    "result_record",
    "result_schema",
    "run_batch",
]
