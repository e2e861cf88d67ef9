"""SIGTERM ends a command as Ctrl-C does: cleaned up, said, exit 143.

SIGTERM is what ``timeout``, a cancelled CI job, ``docker stop`` and Kubernetes send. Its
default action ends the process at once: no ``finally``, no atexit, so a streamed table's
temporary ``.npy`` (as large as the table), the worker pool's folder and a batch's
unsaved rows were left behind. The console-script entry point therefore installs one
handler (:func:`term_handler`) that raises :class:`~auditor.errors.Terminated`, a
KeyboardInterrupt, in the main thread: every path that cleans up after Ctrl-C runs
(workers killed, finished batch rows saved and the resume command printed, temporary
files removed), and the command exits 143 (:func:`~auditor.errors.interruption`).

* **Once**: ``timeout`` signals the command and then its whole process group, so a
  second SIGTERM often follows the first; raised again it would break off the clean-up
  the first started. Later ones are ignored (SIGKILL still ends the process).
* **This process only**: a process forked from this one inherits the handler; there it
  restores the default action and re-sends the signal to itself, so it ends as it would
  have (pool workers and the child plugin code runs in ignore SIGTERM anyway, and are
  stopped by this process, as for Ctrl-C).
* **An ignored SIGTERM stays ignored** (a caller that chose so, as ``nohup`` does for
  SIGHUP).
* **After the command**: SIGTERM is ignored while the process exits (its exit code is
  decided; atexit clean-up runs to the end).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from auditor.errors import TERMINATED_EXIT, Terminated

_STATE: dict[str, int] = {}
"""``owner``: the process that installed the handler; ``fired``: 1 once SIGTERM came."""


def term_handler(signum: int, frame: FrameType | None) -> None:
    """The SIGTERM handler: raise Terminated once, in the process that installed it."""
    if os.getpid() != _STATE.get("owner"):  # a forked process: end as the default action does
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        return
    if _STATE.get("fired"):  # a clean-up is under way: a second SIGTERM must not break it off
        return
    _STATE["fired"] = 1
    raise Terminated()


def terminated() -> bool:
    """Whether SIGTERM stopped this process's command."""
    return bool(_STATE.get("fired"))


@contextmanager
def stopped_by_sigterm() -> Iterator[None]:
    """Around the whole command in the console-script entry point: SIGTERM raises
    Terminated inside (unless it is ignored on entry), and whatever the command's exit
    code would have been, a run it stopped exits :data:`~auditor.errors.TERMINATED_EXIT`
    (a SIGTERM before the command's own handling began, while click parses, reaches click
    as a KeyboardInterrupt and would exit 1 "Aborted!"). SIGTERM is ignored on leaving."""
    installed = False
    try:
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            _STATE.clear()
            _STATE["owner"] = os.getpid()
            signal.signal(signal.SIGTERM, term_handler)
            installed = True
    except (ValueError, OSError, AttributeError):  # not the main thread, or no SIGTERM here
        pass
    try:
        yield
    except SystemExit as exc:
        if terminated() and exc.code != TERMINATED_EXIT:
            raise SystemExit(TERMINATED_EXIT) from exc
        raise
    except Terminated:  # raised outside click's handling (after its main returned)
        raise SystemExit(TERMINATED_EXIT) from None
    finally:
        if installed:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
