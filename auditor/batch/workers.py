"""What runs in a batch worker: its set-up, its caches, one audit and its results record.

A worker is a pool process, a Dask worker, or the calling process for inline runs.
Workers exit when the main process dies, even by ``kill -9``: each watches the main
process (a pidfd on Linux, else polling) from a daemon thread, and workers that are
its direct children also get ``PR_SET_PDEATHSIG``; the forkserver exits once its
workers are gone. Everything here is sent to workers by qualified name, so it must
stay importable as ``auditor.batch.workers``.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from auditor.batch.jobs import BatchJob
from auditor.batch.results import FIXED_COLUMNS
from auditor.progress import SILENT
from auditor.result import CONDITION_IDS
from auditor.summaries import STATUS_ERROR, STATUS_OK

AuditFn = Callable[..., Any]
"""``run_audit``'s signature: ``(config, *, pm, progress, cache) -> AuditResult``."""

# Per-process state of a worker (pool process, Dask worker, or this process when inline).
_WORKER: dict[str, Any] = {}

_WATCH_POLL_SECONDS = 0.25
"""How often a worker checks the main process where no pidfd can wait for it."""
_PR_SET_PDEATHSIG = 1


def init_worker(main_pid: int, started: Any = None, starts: Any = None) -> None:
    """Pool initializer: the worker leaves Ctrl-C to the main process (which stops the
    pool and saves what finished) and exits as soon as the main process is gone;
    ``started`` (a shared counter) counts the workers that got this far; ``starts`` (a
    queue) hears (row, pid) as each audit begins, so the main process can stop a worker
    whose row runs past its time limit.

    Never raises: a failing initializer would break the pool for every row.
    """
    _WORKER["starts"] = starts
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except (OSError, ValueError):
        pass
    if started is not None:
        try:
            with started.get_lock():
                started.value += 1
        except Exception:  # noqa: BLE001  (only a diagnostic)
            pass
    if os.getppid() == main_pid and sys.platform.startswith("linux"):
        # A direct child (spawn, fork): the kernel kills it with its parent, even while it
        # holds the GIL in native code. Pool workers are started by the thread that
        # submits, which lives as long as the pool (PDEATHSIG fires when that thread
        # exits). Forkserver workers are children of the forkserver: the watchdog only.
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
        if os.getppid() != main_pid:  # the parent died before prctl took effect
            os._exit(1)
    try:
        threading.Thread(
            target=_exit_when_gone, args=(main_pid,), name="popaudit-watchdog", daemon=True
        ).start()
    except RuntimeError:
        pass


def _exit_when_gone(pid: int) -> None:
    """Block until process ``pid`` has exited, then end this process at once."""
    try:
        fd = os.pidfd_open(pid)  # Linux 5.3+: readable once the process has exited
    except ProcessLookupError:
        os._exit(1)
    except (AttributeError, OSError):  # no pidfd (other OS, old kernel, seccomp): poll
        start = _process_start(pid)
        while _is_running(pid, start):
            time.sleep(_WATCH_POLL_SECONDS)
    else:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while not poller.poll():
            pass
    os._exit(1)


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """(state, start time) of ``pid`` from /proc, or None when it is gone or unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
        fields_ = data[data.rindex(b")") + 2 :].split()  # after "pid (comm) "
        return fields_[0].decode(), fields_[19].decode()
    except (OSError, ValueError, IndexError):
        return None


def _process_start(pid: int) -> str | None:
    """When ``pid`` started, to tell it from a later process given the same pid."""
    stat = _proc_stat(pid)
    return None if stat is None else stat[1]


def _is_running(pid: int, start: str | None) -> bool:
    """Whether ``pid`` still runs (not a zombie, not a new process reusing the pid)."""
    if start is not None:
        stat = _proc_stat(pid)
        return stat is not None and stat[0] not in ("Z", "X", "x") and stat[1] == start
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


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
    starts = _WORKER.get("starts")
    if starts is not None:  # the main process times the row from here (row_timeout)
        starts.put((job.row, os.getpid()))
    start = time.perf_counter()
    try:
        pm = _worker_plugins(job.config.plugins)
        cache = _worker_cache(job.config.interactions)
        result = audit_fn(job.config, pm=pm, progress=SILENT, cache=cache)
        return result_record(job, result, time.perf_counter() - start)
    except Exception as exc:  # one bad row must never stop the batch
        return error_record(job, f"{type(exc).__name__}: {exc}", time.perf_counter() - start)


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
    for name, value in result.flat_metrics().items():
        if name not in FIXED_COLUMNS:
            record[name] = value
    record["report_json"] = json.dumps(result.to_dict(), default=str)
    return record
