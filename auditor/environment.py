"""The process environment a library call leaves as it found it (QA diffapi F6).

Libraries popaudit imports on first use write ``os.environ`` as they are imported:
threadpoolctl and scikit-learn set ``KMP_DUPLICATE_LIB_OK=True`` (which silences Intel
OpenMP's abort on a second OpenMP runtime), scikit-learn ``KMP_INIT_AT_FORK=FALSE``. Inside
a run they stay, so the run's own libraries load under them as under the command line; when
the outermost library call returns, every variable it added is removed and every one it
changed is put back, so the caller's process (and its child processes) keep the environment
they had, and a later OpenMP clash of the caller's still aborts with its diagnostic.
Variables the caller deletes meanwhile stay deleted; one it sets from another thread while
an audit runs is put back too, so set them before or after.

Python's global ``random`` state is kept the same way where a library draws from it as it is
imported: rich's ``rich.style`` seeds its style ids with ``random.getrandbits(24)``, so the
first report rendered in a process (every format registers the console one, which imports
rich) moved a seeded caller's next ``random.random()`` (QA13 diffapi F3); rich is imported
through :func:`import_rich`, in ``auditor.report`` before any of its modules."""

from __future__ import annotations

import os
import random
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0
_before: dict[str, str] = {}


@contextmanager
def environment_kept() -> Iterator[None]:
    """``os.environ`` as it was when the outermost of nested or concurrent (threads) calls
    entered, once the last of them leaves."""
    global _depth, _before
    with _lock:
        if _depth == 0:
            _before = dict(os.environ)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                _restore(_before)


def _restore(before: dict[str, str]) -> None:
    for key in os.environ.keys() - before.keys():
        del os.environ[key]
    for key, value in before.items():
        if key in os.environ and os.environ[key] != value:
            os.environ[key] = value


def import_rich() -> None:
    """Import rich with Python's global ``random`` state left as it was (module docstring):
    its first import draws from it; a later one, or one the caller made first, draws nothing."""
    if "rich.style" in sys.modules:
        return
    state = random.getstate()
    try:
        import rich.style  # noqa: F401  (imported for its side effect, undone below)
    finally:
        random.setstate(state)
