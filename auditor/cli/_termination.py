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
* **Never swallowed**: a handler raises where the main thread happens to be, and inside a
  garbage collector's or a weakref's callback Python swallows the exception ("Exception
  ignored in ...") and runs on. :func:`resend_swallowed` (``sys.unraisablehook`` while the
  handler is installed) re-arms the handler and has SIGTERM sent again, every few
  milliseconds from a short-lived thread until the handler has raised outside the hook
  (inside it, the handler does not raise: Python would swallow that too). Terminated is
  then raised at the next bytecode the main thread runs (or ends its sleep or wait), and
  one swallowed again is sent again.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any
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
    if _in_the_hook(frame):  # raised there it would be swallowed again: the thread sends it on
        return
    if _STATE.get("fired"):  # a clean-up is under way: a second SIGTERM must not break it off
        return
    _STATE["fired"] = 1
    raise Terminated()


def resend_swallowed(unraisable: Any) -> None:
    """``sys.unraisablehook`` while the handler is installed: a Terminated that Python
    swallowed (raised in a GC or weakref callback) is sent again, to be raised where it
    stops the command; anything else goes to the hook that was there before."""
    if isinstance(unraisable.exc_value, Terminated) and os.getpid() == _STATE.get("owner"):
        _STATE.pop("fired", None)
        threading.Thread(target=_send_again, args=(os.getpid(),), name="popaudit-sigterm", daemon=True).start()
        return
    _PREVIOUS_HOOK[-1](unraisable)


def _send_again(pid: int) -> None:
    """SIGTERM to ``pid`` until its handler has raised (or is no longer installed)."""
    while not _STATE.get("fired") and signal.getsignal(signal.SIGTERM) is term_handler:
        time.sleep(_RESEND_DELAY_S)
        os.kill(pid, signal.SIGTERM)


_RESEND_DELAY_S = 0.01
"""Between two SIGTERMs sent again: short next to a human's wait."""


def _in_the_hook(frame: FrameType | None) -> bool:
    """Whether ``frame`` runs inside :func:`resend_swallowed` (the handler runs in whatever
    frame the main thread is in)."""
    while frame is not None:
        if frame.f_code is resend_swallowed.__code__:
            return True
        frame = frame.f_back
    return False


_PREVIOUS_HOOK: list[Any] = [sys.__unraisablehook__]
"""The unraisable hook :func:`stopped_by_sigterm` replaced (Python's own by default)."""


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
            _PREVIOUS_HOOK.append(sys.unraisablehook)
            sys.unraisablehook = resend_swallowed
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
            sys.unraisablehook = _PREVIOUS_HOOK.pop()
