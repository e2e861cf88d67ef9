"""How many threads torch may use for training: the cores this process may use and
that other processes leave free.

torch's intra-op pool defaults to every core of the machine, even where the process is
pinned to a few (``taskset``, Slurm, a container's cpuset) or limited by a CPU quota,
and even when other processes keep those cores busy. With as many threads as cores on
a busy machine, OpenMP's barriers spin while a thread waits for a core: ``retrain`` on
ML-100K ran 30x slower under load; on a 2-core machine with a load average near 3,
3 epochs of the default synthetic data took 6.9-22.9 s at 2 threads against 1.3-1.4 s at
1 thread (torch 2.13, CPU). The default here counts the cores this process
may use (``os.sched_getaffinity``, lowered by a cgroup v2 ``cpu.max`` quota), keeps the
share of them the 1-minute load average leaves idle, and caps the result at
:data:`MAX_DEFAULT_THREADS`: the small matrix products of these models gain little
from more. Workers of a parallel grid share those threads between them.
"""

from __future__ import annotations

import math
import os

from auditor.parallel import usable_cores

MAX_DEFAULT_THREADS = 8
"""The default never exceeds this many threads (small models gain nothing beyond)."""
def idle_cores() -> int:
    """Usable cores times the share of the machine the 1-minute load average leaves
    idle (at least 1): busy cores make threads wait, never run faster."""
    cores = usable_cores()
    try:
        busy = os.getloadavg()[0] / (os.cpu_count() or cores)
    except (AttributeError, OSError):  # no load average on this platform
        busy = 0.0
    return max(1, math.floor(cores * max(0.0, 1.0 - busy) + 1e-9))


def default_threads(jobs: int = 1) -> int:
    """Threads per process when ``jobs`` processes share the idle usable cores (at
    least 1, at most :data:`MAX_DEFAULT_THREADS`)."""
    return max(1, min(MAX_DEFAULT_THREADS, idle_cores()) // max(1, jobs))


def set_threads(threads: int | None, jobs: int = 1) -> int:
    """Set torch's intra-op threads to ``threads`` (None: :func:`default_threads`) and
    return the number set."""
    import torch

    n = default_threads(jobs) if threads is None else threads
    if n < 1:
        from auditor.errors import InputError, setting

        raise InputError(f"{setting('threads')} must be at least 1, got {n}")
    torch.set_num_threads(n)
    return n
