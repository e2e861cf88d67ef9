"""Independent runs of an experiment grid, inline or in parallel worker processes.

Each run is ``fn(shared, task)``: ``fn`` a module-level function (sent to workers by its
qualified name), ``shared`` what every run reads (a log's interactions: pickled once per
worker, not once per run), ``task`` one run's settings. Results come back in task order
whatever order the runs finish in, and a run gives the same result inline or in a
worker (seeded; :func:`run_tasks` says when the thread count matters).

Workers are spawned (a fresh interpreter: no state forked from the caller), die with
the calling process (:class:`auditor.parallel.WorkerPool`: the kernel's parent-death
signal and a watchdog), leave Ctrl-C to it, and use ``threads`` torch threads
each (default: the usable cores divided among them). The caller sees one progress
display: a run counted as it finishes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from auditor.errors import InputError, TrainingError, setting
from auditor.parallel import WorkerPool, pool_context
from auditor.progress import SILENT, Progress, tasks_of
from auditor.train.threads import default_threads, set_threads

T = TypeVar("T")
R = TypeVar("R")

_SHARED: dict[str, Any] = {}
"""A worker's copy of the runs' shared input."""


def _setup(threads: int, shared: Any) -> None:
    """Worker set-up after :func:`auditor.parallel.init_worker`: set threads, keep ``shared``."""
    # Before torch or FAISS start their OpenMP pools: FAISS (the audits of `mitigations`) too
    # keeps to this worker's share of the cores.
    os.environ["OMP_NUM_THREADS"] = str(threads)
    set_threads(threads)
    _SHARED["value"] = shared


def _call(fn: Callable[[Any, Any], Any], task: Any) -> Any:
    return fn(_SHARED.get("value"), task)


def run_tasks(
    fn: Callable[[Any, T], R],
    tasks: Sequence[T],
    *,
    shared: Any = None,
    jobs: int = 1,
    threads: int | None = None,
    progress: Progress = SILENT,
    description: str = "runs",
) -> list[R]:
    """``[fn(shared, task) for task in tasks]``, in ``jobs`` processes.

    ``jobs`` 1 runs inline, leaving the caller's torch threads as they are. With more
    jobs each worker uses ``threads`` torch threads (None: the usable cores // jobs).
    Seeded runs give identical results inline and in workers at the same thread count.
    At different thread counts the id-table and MLP towers still agree exactly; the
    transformer user tower's attention sums in a thread-dependent order (differences
    in the 6th-7th significant digit). The first failing run stops the others and its
    exception is raised here.
    """
    if jobs < 1:
        raise InputError(f"{setting('jobs')} must be at least 1, got {jobs}")
    results: list[Any] = [None] * len(tasks)
    with tasks_of(progress, description, total=len(tasks)) as advance:  # off a terminal: a line per finished run
        if jobs == 1 or len(tasks) <= 1:
            for i, task in enumerate(tasks):
                results[i] = fn(shared, task)
                advance(1)
            return results
        workers = min(jobs, len(tasks))
        per_worker = threads if threads is not None else default_threads(workers)
        context = pool_context("spawn")  # a fresh interpreter: no state forked from the caller
        try:
            with WorkerPool(context, workers, setup=_setup, setup_args=(per_worker, shared)) as pool:
                pending = {pool.submit(_call, fn, task): i for i, task in enumerate(tasks)}
                while pending:
                    done, _ = wait(list(pending), return_when=FIRST_COMPLETED)
                    for future in done:
                        results[pending.pop(future)] = future.result()  # a run's exception is raised here
                        advance(1)
        except BrokenProcessPool as exc:  # the pool's workers are killed by then
            raise TrainingError(
                "a worker process died (out of memory, killed, or a script that starts workers without "
                "'if __name__ == \"__main__\":'); run with fewer jobs or -j 1"
            ) from exc
    return results
