"""The forkserver pool workers fork from: started early, deaf to Ctrl-C and SIGTERM, killed at exit.

With the forkserver start method (:func:`auditor.parallel.default_start_method`), one
server process imports the modules a pool preloads (torch among them: seconds) and every
worker forks from it. multiprocessing starts that server when a pool starts its first
worker, and leaves three things to its caller, done here:

* **Early start**: :func:`start_server` starts it at once, so its imports run while this
  process does its own work (a batch reads its manifest and hashes its inputs meanwhile)
  instead of after it.
* **Ctrl-C, SIGTERM**: a terminal sends SIGINT to the whole process group (``timeout``
  sends SIGTERM to it), and a server still importing would die of it, of SIGINT with a
  traceback on stderr, of SIGTERM leaving the pool it serves broken. The server is started
  with both blocked (a blocked signal stays blocked across ``exec``), so they are left to
  the main process, as the workers (which ignore them) leave them; none sent to this
  process is lost (one sent meanwhile is delivered when the mask is restored).
* **Exit**: at exit, the process that started the server kills it, once none of the
  processes it forked is left (their exit status comes through the server). It has no
  work left, and left to itself it would first finish its imports (after an early error
  or a Ctrl-C) and then unwind torch at its own exit (about half a second), all the
  while holding the stderr of whoever reads this command's output through a pipe.

Only :mod:`auditor.parallel` starts pools; this module is its helper.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import signal
from collections.abc import Sequence
from multiprocessing import forkserver, resource_tracker

_OWNER: list[int] = []
"""The process that registered the kill at exit (a forked child inherits the handler, not the server)."""


def start_server(preload: Sequence[str] = ()) -> None:
    """Start this process's forkserver now (nothing when it runs already), importing the
    modules ``preload`` names when it starts (an empty ``preload`` keeps the list set before)."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        return  # a new worker importing its main module: starting processes there is refused (by the pool's start)
    if preload:
        multiprocessing.get_context("forkserver").set_forkserver_preload(list(preload))
    if not _OWNER:  # first: a signal delivered as the mask is restored must not skip it
        _OWNER.append(os.getpid())
        atexit.register(_kill_server)
    # The resource tracker first: starting its own process, it unblocks SIGINT afterwards.
    resource_tracker.ensure_running()
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        forkserver.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def _server_pid() -> int | None:
    """The running forkserver's process id (multiprocessing keeps it on its module-level server)."""
    pid = getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None)
    return pid if isinstance(pid, int) else None


def _kill_server() -> None:
    """At exit: kill the forkserver this process started, and reap it."""
    pid = _server_pid()
    if pid is None or _OWNER != [os.getpid()]:
        return
    if multiprocessing.active_children():  # a process of this one's still runs: its exit status comes through the server
        return
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except OSError:  # gone already, or reaped by someone else
        pass
