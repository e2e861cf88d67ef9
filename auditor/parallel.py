"""Worker processes and Dask clients: the one home of popaudit's parallelism.

Batch audits (:mod:`auditor.batch.dispatch`), experiment grids (:mod:`auditor.train.grid`)
and sharded retrieval on a cluster (:mod:`auditor.retrieval.dask`) start their workers
here, so every pool behaves alike:

* **Start method**: forkserver where available (workers fork from one server process
  that imported the modules a caller preloads, started as soon as the caller asks for
  the pool's context, :mod:`auditor.pool_server`), else spawn; a caller may name another.
* **Workers die with the main process**, even when it is killed by ``kill -9``: each
  watches it (a pidfd on Linux, else polling) from a daemon thread, and workers that are
  its direct children also get ``PR_SET_PDEATHSIG``; the forkserver is killed as the
  main process exits (and exits by itself when that process was killed). Workers and
  the forkserver leave Ctrl-C and SIGTERM to the main process, which stops them: a
  signal sent to the whole process group (a terminal's Ctrl-C, ``timeout``) kills no
  worker first, whose row would be recorded as failed.
* **Pool folder**: multiprocessing's temporary folder is named with the owner's process
  id, so a later run removes one a kill left behind
  (:func:`auditor.memory.remove_stale_spills`).
* **Spill files**: a worker that dies (killed by a time limit, a crash, Ctrl-C) runs no
  clean-up, so a pool removes what its dead workers left (a streamed table's ``.npy``)
  as it settles after a death and as it ends, however it ends.
* **Stopping**: a pool left by an exception (Ctrl-C, a closed generator, a failed task)
  has its workers killed, not waited for.
* **Time limits**: a worker reports (task, pid) as a task begins (:func:`task_started`);
  a :class:`TaskClock` kills the worker of a task that runs too long.
* **Dask**: :func:`dask_client`, a client of a running ``dask.distributed`` cluster.
* **Cores**: :func:`usable_cores`, the cores this process may run on (affinity and a
  cgroup quota), which thread counts (training, a batch worker, the bootstrap) start from.

Pool workers receive what runs there by qualified name: everything here a worker calls
must stay importable as ``auditor.parallel``. This module imports nothing of popaudit
but the bottom layers (errors, memory, pool_server).
"""

from __future__ import annotations

import math
import multiprocessing
import os
import select
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
from multiprocessing import process, util
from multiprocessing.context import BaseContext
from pathlib import Path
from types import TracebackType
from typing import Any

from auditor.errors import InputError, setting
from auditor.memory import POOL_PREFIX, remove_stale_spills
from auditor.pool_server import start_server

_WORKER: dict[str, Any] = {}
"""This worker process's link to the main process (the queue task starts go to)."""

_WATCH_POLL_SECONDS = 0.25
"""How often a worker checks the main process where no pidfd can wait for it."""
_PR_SET_PDEATHSIG = 1


# ---------------------------------------------------------------- cores

CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")
"""The cgroup v2 CPU quota of this process's container, when there is one."""


def usable_cores() -> int:
    """Cores this process may run on: its CPU affinity, lowered by a cgroup v2 quota."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    quota = _cgroup_quota()
    if quota is not None:
        cores = min(cores, quota)
    return max(1, cores)


def _cgroup_quota() -> int | None:
    """Whole cores granted by the cgroup v2 ``cpu.max`` quota (rounded up), None if unlimited."""
    try:
        text = CGROUP_CPU_MAX.read_text().split()
    except OSError:
        return None
    if len(text) != 2 or text[0] == "max":
        return None
    try:
        quota, period = int(text[0]), int(text[1])
    except ValueError:
        return None
    return max(1, math.ceil(quota / period)) if quota > 0 and period > 0 else None


# ---------------------------------------------------------------- pools


def default_start_method() -> str:
    """forkserver where available: workers fork from one process that imported the stack."""
    methods = multiprocessing.get_all_start_methods()
    return "forkserver" if "forkserver" in methods else "spawn"


def pool_context(method: str | None = None, preload: Iterable[str] = ()) -> BaseContext:
    """The multiprocessing context a pool starts from (``method``, else
    :func:`default_start_method`); a forkserver is started now (unless it runs), deaf to
    Ctrl-C and killed at exit (:mod:`auditor.pool_server`), and imports the modules
    ``preload`` names once, as it starts: a caller that calls this early has those imports
    run while it goes on. Takes this process's own pool folder first."""
    method = method or default_start_method()
    own_pool_folder()  # a kill leaves no anonymous pymp-* folder behind (the server's socket is there)
    if method == "forkserver":
        start_server(list(preload))
    return multiprocessing.get_context(method)


def own_pool_folder() -> str:
    """multiprocessing's temporary folder for this process (the forkserver's socket, shared
    memory arenas), named with this process's id so that a later run removes it when a
    kill leaves it behind (:func:`~auditor.memory.remove_stale_spills`); call before
    starting a pool. multiprocessing removes it at a normal exit, as its own ``pymp-*``
    folder."""
    remove_stale_spills()
    config: dict[str, object] = getattr(process.current_process(), "_config")  # where util.get_temp_dir() keeps its folder
    existing = config.get("tempdir")
    if existing:
        return str(existing)
    folder = tempfile.mkdtemp(prefix=f"{POOL_PREFIX}{os.getpid()}-")
    remove = getattr(util, "_remove_temp_dir", None)
    util.Finalize(None, remove or shutil.rmtree, args=(shutil.rmtree, folder) if remove else (folder,),
                  exitpriority=-100)
    config["tempdir"] = folder
    return folder


class WorkerPool:
    """A process pool of ``workers`` whose workers die with this process, leave Ctrl-C to
    it and count themselves as they come up; each then runs ``setup(*setup_args)``.

    ``timed``: workers report each task's start (:func:`task_started`) on :attr:`starts`,
    for a :class:`TaskClock`. As a context manager: leaving it normally waits for the
    pool to finish; leaving it by an exception (Ctrl-C, a closed generator, a task's
    error) kills the workers at once (:func:`stop_pool`).
    """

    def __init__(
        self, context: BaseContext, workers: int, *, setup: Callable[..., None] | None = None,
        setup_args: tuple[Any, ...] = (), timed: bool = False,
    ) -> None:
        self.started: Any = context.Value("i", 0)
        """How many workers got through :func:`init_worker` (0: the pool never came up)."""
        self.starts: Any = context.SimpleQueue() if timed else None
        self.executor = ProcessPoolExecutor(
            max_workers=workers, mp_context=context, initializer=init_worker,
            initargs=(os.getpid(), self.started, self.starts, setup, setup_args),
        )

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> Future[Any]:
        """``fn(*args)`` in a worker (BrokenProcessPool once a worker has died)."""
        return self.executor.submit(fn, *args)

    def any_started(self) -> bool:
        """Whether any worker came up (a pool whose workers all died starting failed as a whole)."""
        return bool(self.started.value)

    def settle(self) -> None:
        """After a worker died: fail every unfinished task now, release the pool and remove
        what its dead workers left in the temporary folder."""
        self.executor.shutdown(wait=True, cancel_futures=True)
        remove_stale_spills()  # the workers are joined: their process ids are dead

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if kind is None:
            self.executor.shutdown(wait=True)
        else:  # interrupted or closed early: tasks in flight must not run on
            stop_pool(self.executor)
        remove_stale_spills()  # a killed worker's table files, or those a worker still held as it exited


def stop_pool(pool: ProcessPoolExecutor) -> None:
    """Kill the pool's workers now (their tasks are lost) and release it.

    ``shutdown`` alone would let every running task finish first, however long it takes.
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


class TaskClock:
    """When each task began in which worker (heard on a timed pool's queue), and the
    workers stopped for running a task past ``timeout`` seconds (0: no limit)."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.starts: Any = None
        """The watched pool's queue of (task, pid) as tasks begin; None without a time limit."""
        self.running: dict[int, tuple[int, float]] = {}
        self.stopped: dict[int, float] = {}
        """Task -> seconds it ran, for tasks whose worker this clock killed."""

    def watch(self, pool: WorkerPool) -> None:
        """Time the tasks of ``pool`` from now on (the workers of an earlier pool are gone,
        and their pids may be reused)."""
        self.starts = pool.starts
        self.running.clear()

    def poll(self, idle: float | None = None) -> float | None:
        """How long to wait for a result before looking at the clock again (at most
        ``idle`` seconds, where the caller wants such moments without a time limit too)."""
        if not self.timeout:
            return idle
        return min(idle or 1.0, max(0.05, self.timeout / 10))

    def stop_overdue(self, tasks: Iterable[int]) -> bool:
        """Kill the worker of every task in ``tasks`` past the time limit; True if any was."""
        if not self.timeout or self.starts is None:
            return False
        while not self.starts.empty():
            task, pid = self.starts.get()
            self.running[task] = (pid, time.monotonic())
        now, killed = time.monotonic(), False
        for task in tasks:
            began = self.running.get(task)
            if began is not None and now - began[1] > self.timeout and task not in self.stopped:
                try:
                    os.kill(began[0], signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    continue
                self.stopped[task] = now - began[1]
                killed = True
        return killed


# ---------------------------------------------------------------- in a worker


def init_worker(
    main_pid: int, started: Any = None, starts: Any = None, setup: Callable[..., None] | None = None,
    setup_args: tuple[Any, ...] = (),
) -> None:
    """Pool initializer: the worker leaves Ctrl-C and SIGTERM to the main process (which
    stops the pool and saves what finished) and exits as soon as the main process is gone;
    ``started`` (a shared counter) counts the workers that got this far; ``starts`` (a
    queue) hears (task, pid) as each task begins (:func:`task_started`), so the main
    process can stop a worker whose task runs past its time limit. Then
    ``setup(*setup_args)``, the caller's own set-up.

    Never raises before ``setup``: a failing initializer would break the pool for every task.
    """
    _WORKER["starts"] = starts
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
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
        die_with_parent()
        if os.getppid() != main_pid:  # the parent died before prctl took effect
            os._exit(1)
    try:
        threading.Thread(
            target=_exit_when_gone, args=(main_pid,), name="popaudit-watchdog", daemon=True
        ).start()
    except RuntimeError:
        pass
    if setup is not None:
        setup(*setup_args)


def task_started(task: int) -> None:
    """In a worker of a timed pool: tell the main process's :class:`TaskClock` that
    ``task`` begins here now (nothing elsewhere: inline, on Dask, untimed pools)."""
    starts = _WORKER.get("starts")
    if starts is not None:
        starts.put((task, os.getpid()))


def die_with_parent() -> None:
    """The kernel kills this process when its parent (thread) dies (Linux; elsewhere nothing)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
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


# ---------------------------------------------------------------- Dask


@contextmanager
def dask_client(address: str) -> Iterator[Any]:
    """A client of the cluster at ``address``; inside a Dask task (``popaudit batch
    with a scheduler``), the running cluster's client, with the task's thread seceded so
    waiting on its own tasks does not hold a worker slot.

    Raises InputError when dask.distributed is missing or the scheduler cannot be reached.
    """
    try:
        from distributed import Client, get_worker, worker_client
    except ImportError as exc:
        raise InputError(f"{setting('scheduler')} needs dask.distributed: pip install 'popaudit[dask]'") from exc
    try:
        get_worker()
    except ValueError:
        pass
    else:
        with worker_client() as client:
            yield client
        return
    try:
        # Connect timeout: Dask's distributed.comm.timeouts.connect (default 30 s).
        client = Client(address, set_as_default=False)  # type: ignore[no-untyped-call]
    except (OSError, TimeoutError, ValueError) as exc:
        raise InputError(f"cannot connect to the Dask scheduler at {address}: {exc}") from exc
    try:
        yield client
    finally:
        client.close()  # type: ignore[no-untyped-call]
