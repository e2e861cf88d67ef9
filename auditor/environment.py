"""The process environment a library call leaves as it found it (QA diffapi F6).

Libraries popaudit imports on first use write ``os.environ`` as they are imported:
threadpoolctl and scikit-learn set ``KMP_DUPLICATE_LIB_OK=True`` (which silences Intel
OpenMP's abort on a second OpenMP runtime), scikit-learn ``KMP_INIT_AT_FORK=FALSE``. Inside
a run they stay, so the run's own libraries load under them as under the command line; when
the outermost library call returns, every variable it added is removed and every one it
changed is put back, so the caller's process (and its child processes) keep the environment
they had, and a later OpenMP clash of the caller's still aborts with its diagnostic.
Variables the caller deletes meanwhile stay deleted; one it sets from another thread while
an audit runs is put back too, so set them before or after."""

from __future__ import annotations

import os
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
