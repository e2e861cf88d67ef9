"""Where a batch's audits run: inline, in a local process pool, or on a Dask cluster.

Pool
----
Audits run in ``jobs`` worker processes (``concurrent.futures.ProcessPoolExecutor``,
forkserver start method where available, else spawn), a pool of one for ``jobs=1``:
a row that kills its process (a segfault in native code, ``os._exit``, the OOM killer)
never takes the batch down. Rows are dispatched grouped by interaction log and each
worker keeps one :class:`~auditor.audit.InputCache`, so a log shared by many models is
read once per worker. At most N rows are in flight; a worker that dies fails only its
row (``WORKER_DIED``): the other rows in flight are re-run one at a time in a fresh
pool, so the row that kills its worker is identified and recorded as an error.
Inline dispatch (library callers only: tests, debugging) audits in this process instead.

Dask
----
A scheduler address (``tcp://HOST:8786``) submits every row to an existing
``dask.distributed`` cluster instead (``pip install 'popaudit[dask]'``); results are
identical to the local run. Start a cluster on the machines that can read the models
and logs (shared paths):

.. code-block:: console

    $ dask scheduler                      # prints tcp://HOST:8786; dashboard on :8787
    $ dask worker tcp://HOST:8786 --nworkers 4 --nthreads 1   # on each machine
    $ popaudit batch manifest.parquet -o results.parquet --scheduler tcp://HOST:8786

Use one thread per worker process (audits use native threads of their own) and give
each worker enough memory for one audit (``--memory-limit``). Paths are sent to the
workers as absolute paths, so they must be valid on every worker. A worker lost
mid-audit is retried by Dask on another worker; a row that keeps killing workers ends
as an error row (``KilledWorker``).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections import deque
from collections.abc import Generator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any, cast

from auditor.batch.jobs import BatchJob
from auditor.batch.workers import AuditFn, init_worker, audit_job, error_record
from auditor.errors import AuditError, setting
from auditor.memory import own_pool_folder

WORKER_DIED = (
    "the worker process died while auditing this row (killed, out of memory, or a crash "
    "in native code)"
)
# Imported once by the forkserver, which workers fork from (not each worker importing it).
_PRELOAD = ["auditor.batch.workers", "auditor.audit", "auditor.plugins"]

Records = Generator[list[dict[str, Any]], None, None]
"""What a dispatcher yields: the records of the rows that finished together (none, now
and then, while rows run: a moment to save what finished before)."""
IDLE_TICK = 0.25
"""Seconds between such moments while a pool's rows run."""


def _group_order(jobs: Sequence[BatchJob]) -> list[BatchJob]:
    """Jobs grouped by interaction log (groups in order of first appearance, rows in order),
    so that a worker's InputCache reads a shared log once."""

    def log(job: BatchJob) -> str | None:
        return None if job.config is None or job.config.interactions is None else str(job.config.interactions)

    first: dict[str | None, int] = {}
    for job in jobs:
        first.setdefault(log(job), len(first))
    return sorted(jobs, key=lambda j: (first[log(j)], j.row))


def dispatch(
    jobs: Sequence[BatchJob], audit_fn: AuditFn | None, *, workers: int, scheduler: str | None,
    inline: bool, start_method: str | None, row_timeout: float = 0.0,
) -> Records:
    """The records of ``jobs`` as they finish: on Dask at ``scheduler``, inline, or in a
    pool of at most ``workers`` processes, rows grouped by log. Closing the generator
    stops the audits. ``row_timeout`` (seconds, 0: none; pools only): a row running
    longer has its worker killed and is recorded as an error."""
    jobs = _group_order(jobs)
    if scheduler:
        return _dispatch_dask(jobs, audit_fn, scheduler)
    if inline:
        return _dispatch_inline(jobs, audit_fn)
    return _dispatch_pool(jobs, audit_fn, min(workers, max(1, len(jobs))), start_method, row_timeout)


def _dispatch_inline(jobs: Sequence[BatchJob], audit_fn: AuditFn | None) -> Records:
    """Audit in this process, one row at a time (no isolation from crashing rows)."""
    for job in jobs:
        yield [audit_job(job, audit_fn)]


def _start_method() -> str:
    """forkserver where available: workers fork from one process that imported the stack."""
    methods = multiprocessing.get_all_start_methods()
    return "forkserver" if "forkserver" in methods else "spawn"


def _dispatch_pool(
    jobs: Sequence[BatchJob], audit_fn: AuditFn | None, workers: int, start_method: str | None,
    row_timeout: float = 0.0,
) -> Records:
    """Run jobs in worker processes, at most ``workers`` in flight; survive dead workers
    and stop (kill) the worker of a row that runs past ``row_timeout`` seconds."""
    method = start_method or _start_method()
    own_pool_folder()  # a kill leaves no anonymous pymp-* folder behind
    context = multiprocessing.get_context(method)
    if method == "forkserver":
        context.set_forkserver_preload(_PRELOAD)  # applies when the server starts
    pending: deque[BatchJob] = deque(jobs)
    suspects: deque[BatchJob] = deque()  # in flight when a worker died: re-run alone
    in_flight: dict[Future[dict[str, Any]], BatchJob] = {}
    pool: ProcessPoolExecutor | None = None
    started: Any = None
    clock = RowClock(row_timeout)
    finished = False
    try:
        while pending or suspects or in_flight:
            if pool is None:
                started = context.Value("i", 0)
                clock.starts = context.SimpleQueue() if row_timeout else None
                pool = ProcessPoolExecutor(
                    max_workers=workers, mp_context=context, initializer=init_worker,
                    initargs=(os.getpid(), started, clock.starts),
                )
            # Suspects run alone; otherwise keep every worker busy.
            queue, limit = (suspects, 1) if suspects else (pending, workers)
            broken = False
            while queue and len(in_flight) < limit:
                job = queue.popleft()
                try:
                    in_flight[pool.submit(audit_job, job, audit_fn)] = job
                except BrokenProcessPool:  # a worker died since the last wait
                    queue.appendleft(job)
                    broken = True
                    break
            if not broken:
                done, _ = wait(list(in_flight), timeout=clock.poll(), return_when=FIRST_COMPLETED)
                broken = any(isinstance(f.exception(), BrokenProcessPool) for f in done)
                if not done:
                    if not clock.stop_overdue(in_flight.values()):
                        yield []  # nothing finished: the caller may save what it held back
                    continue  # a killed worker breaks the pool: settled on the next pass
            if broken:
                # Every unfinished future of this pool fails too; settle them all now.
                pool.shutdown(wait=True, cancel_futures=True)
                pool = None
                clock.running.clear()  # those workers are gone (their pids may be reused)
                if started.value == 0:  # no worker came up: the pool failed, not a row
                    raise AuditError(
                        "the batch's worker processes died while starting, before auditing any row; "
                        "a script that calls run_batch must call it under "
                        "'if __name__ == \"__main__\":' (each worker imports the main module)"
                    )
                done = set(in_flight)
            records: list[dict[str, Any]] = []
            died: list[BatchJob] = []
            for future in done:
                job = in_flight.pop(future)
                exc = future.exception()
                if exc is None:
                    records.append(future.result())
                elif isinstance(exc, BrokenProcessPool):
                    died.append(job)
                else:  # e.g. the job could not be pickled
                    records.append(error_record(job, f"{type(exc).__name__}: {exc}"))
            if clock.stopped:  # we killed a worker: its row timed out, the others are innocent
                for job in sorted(died, key=lambda j: j.row, reverse=True):
                    if job.row in clock.stopped:
                        records.append(error_record(job, clock.message(), clock.stopped.pop(job.row)))
                    else:
                        pending.appendleft(job)
                died = []
            if len(died) == 1:
                records.append(error_record(died[0], WORKER_DIED))
            else:
                suspects.extend(sorted(died, key=lambda j: j.row))
            if records:
                yield records
        finished = True
    finally:
        if pool is not None:
            if finished:
                pool.shutdown(wait=True)
            else:  # interrupted or closed early: audits in flight must not run on
                stop_pool(pool)


class RowClock:
    """When each row began in which worker (heard on a queue), and the workers to stop."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.starts: Any = None
        """The pool's queue of (row, pid) as audits begin; None without a time limit."""
        self.running: dict[int, tuple[int, float]] = {}
        self.stopped: dict[int, float] = {}
        """Row -> seconds it ran, for rows whose worker this clock killed."""

    def poll(self) -> float:
        """How long to wait for a result before looking at the clock (and letting the
        caller save rows it held back) again."""
        return IDLE_TICK if not self.timeout else min(IDLE_TICK, max(0.05, self.timeout / 10))

    def stop_overdue(self, jobs: Any) -> bool:
        """Kill the worker of every in-flight row past the time limit; True if any was."""
        if not self.timeout or self.starts is None:
            return False
        while not self.starts.empty():
            row, pid = self.starts.get()
            self.running[row] = (pid, time.monotonic())
        now, killed = time.monotonic(), False
        for job in jobs:
            began = self.running.get(job.row)
            if began is not None and now - began[1] > self.timeout and job.row not in self.stopped:
                try:
                    os.kill(began[0], signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    continue
                self.stopped[job.row] = now - began[1]
                killed = True
        return killed

    def message(self) -> str:
        return (
            f"RowTimeout: the audit ran longer than {setting('row_timeout')} {self.timeout:g} s; its worker "
            "process was stopped and the batch went on"
        )


def stop_pool(pool: ProcessPoolExecutor) -> None:
    """Kill the pool's workers now (their rows are lost, not recorded) and release it.

    ``shutdown`` alone would let every running audit finish first, however long it takes.
    """
    kill = getattr(pool, "kill_workers", None)  # Python 3.14+
    if kill is not None:
        kill()
    else:
        for process in list((getattr(pool, "_processes", None) or {}).values()):
            try:
                process.kill()
            except (OSError, ValueError, AttributeError):
                pass
    pool.shutdown(wait=True, cancel_futures=True)


def _dispatch_dask(
    jobs: Sequence[BatchJob], audit_fn: AuditFn | None, address: str
) -> Records:
    """Submit every job to the Dask cluster at ``address``; yield records as they finish."""
    from auditor.retrieval import dask_client

    with dask_client(address) as client:  # InputError when dask is missing or unreachable
        from distributed import as_completed as untyped_as_completed

        as_completed = cast(Any, untyped_as_completed)

        futures: dict[Any, BatchJob] = {}
        try:
            token = f"{os.getpid()}-{time.time_ns()}"
            for job in jobs:  # submission order = priority: rows stay grouped by log
                future = client.submit(audit_job, job, audit_fn, pure=False, key=f"popaudit-row-{job.row}-{token}")
                futures[future] = job
            for batch in as_completed(list(futures), loop=client.loop, with_results=False).batches():
                records: list[dict[str, Any]] = []
                for future in batch:
                    job = futures[future]
                    try:
                        records.append(future.result())
                    except Exception as exc:  # KilledWorker, a lost connection, ...
                        records.append(error_record(job, f"dask: {type(exc).__name__}: {exc}"))
                yield records
        finally:
            for future in futures:
                future.cancel()
