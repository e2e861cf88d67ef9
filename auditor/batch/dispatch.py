"""Where a batch's audits run: inline, in a local process pool, or on a Dask cluster.

Pool
----
Audits run in ``jobs`` worker processes (``concurrent.futures.ProcessPoolExecutor``,
forkserver start method where available, else spawn), a pool of one for ``jobs=1``:
a row that kills its process (a segfault in native code, ``os._exit``, the OOM killer)
never takes the batch down. Rows are dispatched grouped by interaction log and each
worker keeps one :class:`~auditor.audit.InputCache`, so a log shared by many models is
read once per worker. At most 2N rows are in flight (each worker's next row queued, so
it never waits for this process to save a record); a worker that dies fails only its
row (``WORKER_DIED``): the other rows in flight are re-run one at a time in a fresh
pool, so the row that kills its worker is identified and recorded as an error. The
pools are :mod:`auditor.parallel`'s (workers die with the main process, row time limits).
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

import os
import time
from collections import deque
from collections.abc import Generator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any, cast

from auditor.batch.jobs import BatchJob
from auditor.batch.workers import AuditFn, audit_job, error_record, share_cores
from auditor.errors import AuditError, setting
from auditor.parallel import TaskClock, WorkerPool, dask_client, pool_context

WORKER_DIED = (
    "the worker process died while auditing this row (killed, out of memory, or a crash "
    "in native code)"
)

Records = Generator[list[dict[str, Any]], None, None]
"""What a dispatcher yields: the records of the rows that finished together (none, now
and then, while rows run: a moment to save what finished before)."""
IDLE_TICK = 0.25
"""Seconds between such moments while a pool's rows run."""
QUEUED_PER_WORKER = 2
"""Rows in flight per worker process: the one it audits and the next (a worker that dies
makes every row in flight a suspect, re-run alone)."""


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


def _dispatch_pool(
    jobs: Sequence[BatchJob], audit_fn: AuditFn | None, workers: int, start_method: str | None,
    row_timeout: float = 0.0,
) -> Records:
    """Run jobs in worker processes, at most ``workers`` in flight; survive dead workers
    and stop (kill) the worker of a row that runs past ``row_timeout`` seconds.

    A pool whose worker died is given up and the rows go on in a fresh one.
    """
    context = pool_context(start_method)  # the server run_batch started, with its preload
    rows = _PoolRows(jobs, workers, TaskClock(row_timeout))
    while rows.unfinished():
        with WorkerPool(context, workers, setup=share_cores, setup_args=(workers,), timed=bool(row_timeout)) as pool:
            rows.clock.watch(pool)
            yield from rows.run(pool, audit_fn)


class _PoolRows:
    """The rows of one pool dispatch: waiting, suspects (in flight when a worker died:
    re-run alone, so the row that kills its worker is found) and in flight."""

    def __init__(self, jobs: Sequence[BatchJob], workers: int, clock: TaskClock) -> None:
        self.pending: deque[BatchJob] = deque(jobs)
        self.suspects: deque[BatchJob] = deque()
        self.in_flight: dict[Future[dict[str, Any]], BatchJob] = {}
        self.workers = workers
        self.clock = clock

    def unfinished(self) -> bool:
        return bool(self.pending or self.suspects or self.in_flight)

    def run(self, pool: WorkerPool, audit_fn: AuditFn | None) -> Records:
        """Keep ``pool`` busy until every row is done or a worker dies (the pool is then
        settled: every row of it is recorded or queued again, and it is given up)."""
        while self.unfinished():
            broken = self._submit(pool, audit_fn)
            done: set[Future[dict[str, Any]]] = set()
            if not broken:
                done, _ = wait(list(self.in_flight), timeout=self.clock.poll(IDLE_TICK), return_when=FIRST_COMPLETED)
                broken = any(isinstance(f.exception(), BrokenProcessPool) for f in done)
                if not done:
                    if not self.clock.stop_overdue(job.row for job in self.in_flight.values()):
                        yield []  # nothing finished: the caller may save what it held back
                    continue  # a killed worker breaks the pool: settled on the next pass
            if broken:
                # Every unfinished future of this pool fails too; settle them all now.
                pool.settle()
                if not pool.any_started():  # no worker came up: the pool failed, not a row
                    raise AuditError(
                        "the batch's worker processes died while starting, before auditing any row; "
                        "a script that calls run_batch must call it under "
                        "'if __name__ == \"__main__\":' (each worker imports the main module)"
                    )
                done = set(self.in_flight)
            records = self._settle(done)
            if records:
                yield records
            if broken:
                return

    def _submit(self, pool: WorkerPool, audit_fn: AuditFn | None) -> bool:
        """Fill the free workers (suspects run alone); True when the pool turned out broken."""
        # A row queued behind each running one: a worker starts its next row while this
        # process saves the last one's record (a rewrite of the results file included).
        queue, limit = (self.suspects, 1) if self.suspects else (self.pending, QUEUED_PER_WORKER * self.workers)
        while queue and len(self.in_flight) < limit:
            job = queue.popleft()
            try:
                self.in_flight[pool.submit(audit_job, job, audit_fn)] = job
            except BrokenProcessPool:  # a worker died since the last wait
                queue.appendleft(job)
                return True
        return False

    def _settle(self, done: set[Future[dict[str, Any]]]) -> list[dict[str, Any]]:
        """The records of the finished futures ``done``; rows whose worker died are
        recorded (alone in flight, or timed out) or queued again (as suspects, or as
        innocent bystanders of a worker this clock killed)."""
        records: list[dict[str, Any]] = []
        died: list[BatchJob] = []
        for future in done:
            job = self.in_flight.pop(future)
            exc = future.exception()
            if exc is None:
                records.append(future.result())
            elif isinstance(exc, BrokenProcessPool):
                died.append(job)
            else:  # e.g. the job could not be pickled
                records.append(error_record(job, f"{type(exc).__name__}: {exc}"))
        stopped = self.clock.stopped
        if stopped:  # we killed a worker: its row timed out, the others are innocent
            for job in sorted(died, key=lambda j: j.row, reverse=True):
                if job.row in stopped:
                    records.append(error_record(job, _timeout_message(self.clock.timeout), stopped.pop(job.row)))
                else:
                    self.pending.appendleft(job)
            died = []
        if len(died) == 1:
            records.append(error_record(died[0], WORKER_DIED))
        else:
            self.suspects.extend(sorted(died, key=lambda j: j.row))
        return records


def _timeout_message(timeout: float) -> str:
    return (
        f"RowTimeout: the audit ran longer than {setting('row_timeout')} {timeout:g} s; its worker "
        "process was stopped and the batch went on"
    )


def _dispatch_dask(
    jobs: Sequence[BatchJob], audit_fn: AuditFn | None, address: str
) -> Records:
    """Submit every job to the Dask cluster at ``address``; yield records as they finish."""
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
