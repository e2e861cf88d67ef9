"""What runs in a batch worker: its caches, one audit and its results record.

A worker is a pool process, a Dask worker, or the calling process for inline runs. Pool
workers are set up by :mod:`auditor.parallel` (they die with the main process and leave
Ctrl-C to it). Everything here is sent to workers by qualified name, so it must stay
importable as ``auditor.batch.workers``.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from contextlib import nullcontext
from collections.abc import Callable
from pathlib import Path
from typing import Any

from auditor.batch.jobs import BatchJob
from auditor.batch.manifest import setting_columns
from auditor.errors import spelled_as, spelling_active
from auditor.plugins.prints import prints_to_stderr
from auditor.batch.results import FIXED_COLUMNS, population_columns
from auditor.flat import flat_metrics_from_report
from auditor.gate import void_figures
from auditor.parallel import task_started, usable_cores
from auditor.progress import SILENT
from auditor.result import CONDITION_IDS
from auditor.summaries import STATUS_ERROR, STATUS_OK

AuditFn = Callable[..., Any]
"""``run_audit``'s signature: ``(config, *, pm, progress, cache) -> AuditResult``."""

# Per-process state of a worker (pool process, Dask worker, or this process when inline).
_WORKER: dict[str, Any] = {}


def _worker_cache(interactions: Path | None) -> Any:
    """This process's InputCache; replaced when the log changes so memory holds one log.

    Rows arrive grouped by log, so a worker never returns to a log it has moved past.
    The log is identified by path, size and modification time: a long-lived worker (a
    Dask worker, a notebook running several batches) never reuses counts of a log that
    was rewritten since.
    """
    from auditor.audit import InputCache

    identity: tuple[Any, ...] | None = None
    if interactions is not None:
        try:
            stat = os.stat(interactions)
            identity = (str(interactions), stat.st_size, stat.st_mtime_ns)
        except OSError:  # missing: the audit itself reports it
            identity = (str(interactions),)
    if "cache" not in _WORKER or _WORKER.get("log") != identity:
        _WORKER["cache"] = InputCache()
        _WORKER["log"] = identity
    return _WORKER["cache"]


def share_cores(workers: int) -> None:
    """Pool worker set-up: the retrieval kernel's threads (torch's) are this machine's
    cores shared among the ``workers`` processes, not all of them in each (which
    oversubscribes the cores ``workers`` times). torch is not imported for it (seconds):
    a batch of served lists alone never uses it, and a batch with models has it preloaded
    (else the share is left in the environment, which torch and OpenMP read as they load)."""
    if workers <= 1:
        return
    threads = max(1, usable_cores() // workers)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(threads)
    else:
        os.environ["OMP_NUM_THREADS"] = str(threads)


def _worker_plugins(paths: tuple[Path, ...]) -> Any:
    """One plugin manager per worker and plugin list (entry points are scanned once)."""
    from auditor.plugins import get_plugin_manager

    managers = _WORKER.setdefault("pms", {})
    if paths not in managers:
        managers[paths] = get_plugin_manager(paths)
    return managers[paths]


def audit_job(job: BatchJob, audit_fn: AuditFn | None = None) -> dict[str, Any]:
    """Run one job in this process and return its results record; never raises for a
    failed audit (the record carries the error)."""
    if job.config is None:
        return error_record(job, job.error or "InputError: invalid manifest row")
    if audit_fn is None:
        from auditor.audit import run_audit

        audit_fn = run_audit
    task_started(job.row)  # the main process times the row from here (row_timeout)
    start = time.perf_counter()
    try:
        # Plugin code runs here (imports, loaders, live models): its prints must not reach
        # stdout, where the results may be written (-o /dev/stdout), inline or in a worker.
        # and, in a worker process (no command's spelling), the row's messages name settings as a manifest's
        # columns (k, alpha), not as fields; inline, the command's own spelling stands
        with prints_to_stderr(), nullcontext() if spelling_active() else spelled_as(setting_columns):
            pm = _worker_plugins(job.config.plugins)
            cache = _worker_cache(job.config.interactions)
            result = audit_fn(job.config, pm=pm, progress=SILENT, cache=cache)
        return result_record(job, result, time.perf_counter() - start)
    except Exception as exc:  # one bad row must never stop the batch
        release_frames(exc)
        return error_record(job, f"{type(exc).__name__}: {exc}", time.perf_counter() - start)


def release_frames(exc: BaseException) -> None:
    """Clear the local variables of the frames ``exc`` and the exceptions chained to it
    hold: a failed audit's tables (a streamed table's temporary file) are freed now, not
    at the next garbage collection, which an idle worker may never run (the traceback's
    frames refer back to the exception, a cycle)."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        traceback.clear_frames(current.__traceback__)  # frames still running (this one) are skipped
        pending += [current.__cause__, current.__context__]


def _base_record(job: BatchJob) -> dict[str, Any]:
    """The columns every record has, ok or error: where the row came from."""
    interactions = job.config.interactions if job.config is not None else None
    return {
        "row": job.row,
        "model": job.model,
        "label": job.label,
        "interactions": None if interactions is None else str(interactions),
    }


def error_record(job: BatchJob, message: str, seconds: float | None = None) -> dict[str, Any]:
    """The record of a row that failed: status error, the message, no metrics."""
    record = _base_record(job)
    record.update(status=STATUS_ERROR, error=message, seconds=seconds)
    return record


def result_record(job: BatchJob, result: Any, seconds: float) -> dict[str, Any]:
    """The record of a finished audit: verdict, condition statuses, flat metrics, JSON."""
    record = _base_record(job)
    record.update(status=STATUS_OK, error=None, seconds=seconds)
    record["verdict_severity"] = result.verdict.severity
    record["bias_detected"] = bool(result.verdict.bias_detected)
    conditions = result.conditions or {}
    for cid in CONDITION_IDS:
        condition = conditions.get(cid)
        record[f"{cid}_status"] = None if condition is None else condition.status
    record["n_items"] = int(result.inputs.n_items)
    record["dim"] = int(result.inputs.dim)
    n = result.inputs.n_interactions
    record["n_interactions"] = None if n is None else int(n)
    report = result.to_dict()  # once: the flat metrics are read from it (as result.flat_metrics() does)
    record.update(population_columns(report))
    # A set-based dot/cosine comparison at a saturated K is null, as its gate and the summary read it.
    for name, value in void_figures(flat_metrics_from_report(report), report).items():
        if name not in FIXED_COLUMNS:
            record[name] = value
    record["report_json"] = json.dumps(report, default=str)
    return record
