"""Batch audits: one manifest row -> one ``run_audit`` -> one row of a results Parquet file.

The library behind ``popaudit batch MANIFEST`` (README.md). One job per module:

* :mod:`~auditor.batch.manifest`: reading and validating manifests (columns, refused
  columns, cell conversion);
* :mod:`~auditor.batch.jobs`: rows -> :class:`~auditor.config.AuditConfig` jobs, and
  every file a batch reads (outputs never overwrite inputs);
* :mod:`~auditor.batch.workers`: what runs in a worker process (caches, one audit and
  its record);
* :mod:`~auditor.batch.dispatch`: inline, process-pool and Dask dispatch (the pools and
  the Dask client are :mod:`auditor.parallel`'s);
* :mod:`~auditor.batch.preload`: what local workers import before their first row, in
  a server started before the rest of a batch (this package imports its modules on
  first use, so that ``popaudit batch`` can start that server first);
* :mod:`~auditor.batch.run`: :func:`run_batch` (resume, flushing, interruption);
* :mod:`~auditor.batch.results`: the results table's schema, writer and reader.

Summaries of a results table (console tables, HTML page, trend plot) are rendering:
:mod:`auditor.report.batch_summary`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from auditor.lazy_names import imported_on_first_use

if TYPE_CHECKING:
    from auditor.batch.dispatch import WORKER_DIED
    from auditor.batch.jobs import BatchJob, batch_inputs, build_jobs
    from auditor.batch.cells import convert_setting
    from auditor.batch.manifest import Manifest, ManifestRow, manifest_columns, read_manifest
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

_LAZY = {
    "WORKER_DIED": "auditor.batch.dispatch",
    "BatchJob": "auditor.batch.jobs",
    "batch_inputs": "auditor.batch.jobs",
    "build_jobs": "auditor.batch.jobs",
    "Manifest": "auditor.batch.manifest",
    "ManifestRow": "auditor.batch.manifest",
    "convert_setting": "auditor.batch.cells",
    "manifest_columns": "auditor.batch.manifest",
    "read_manifest": "auditor.batch.manifest",
    "RESULTS_VERSION": "auditor.batch.results",
    "ResultsWriter": "auditor.batch.results",
    "read_results": "auditor.batch.results",
    "result_schema": "auditor.batch.results",
    "BatchInterrupted": "auditor.batch.run",
    "BatchOutcome": "auditor.batch.run",
    "run_batch": "auditor.batch.run",
    "AuditFn": "auditor.batch.workers",
    "audit_job": "auditor.batch.workers",
    "error_record": "auditor.batch.workers",
    "result_record": "auditor.batch.workers",
    "parse_memory_size": "auditor.config",
    "CONDITION_IDS": "auditor.result",
    "STATUS_ERROR": "auditor.summaries",
    "STATUS_OK": "auditor.summaries",
}
"""Public name -> the module that defines it, imported on first use: ``popaudit batch``
starts its workers' server (:mod:`auditor.batch.preload`) before it loads pyarrow and
the rest of the batch."""

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


__getattr__, __dir__ = imported_on_first_use(__name__, _LAZY, globals())
