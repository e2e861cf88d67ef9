"""Running third-party plugin code where its death cannot be taken for success.

A plugin is code the user chose to run, but a CI gate must not pass because that code
ended the process: ``os._exit(0)`` in a measure cannot be caught, and the parent would
exit 0 on a biased model. So ``check``, ``mitigate`` (whose output files the parent
stages and renames only after the child finished) and the plugin part of ``batch``'s gates
run plugin code in a forked child process whose result the parent reads back: the exit code
is derived only from a completed run, a child that dies or outlives ``--plugin-timeout``
is an error (exit 1) naming the cause, and the child's standard output is sent to
standard error at the file-descriptor level, so a plugin's ``print`` never mixes with a
report written to stdout. Built-in plugins need none of this: with no third-party plugin
the work runs in this process, as before.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import click

from auditor.errors import AuditError
from auditor.plugin_names import installed_entry_points

T = TypeVar("T")


class ChildError(AuditError):
    """An error raised in the isolated child, carried back with its exit code."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def third_party_plugins(plugins: Iterable[Path]) -> bool:
    """True when plugin code other than popaudit's built-ins would run: ``--plugin`` files
    or installed entry points (listed without importing them)."""
    return bool(tuple(plugins)) or bool(installed_entry_points())


def run_isolated(fn: Callable[..., T], *args: Any, timeout: float | None, what: str, debug: bool = False,
                 consequence: str = "no report is written and no gate is passed") -> T:
    """``fn(*args)`` in a forked child; its return value, or the error it raised.

    AuditError and click's usage errors come back as they were raised (message, exit
    code); a child that ends without a result, or runs past ``timeout`` seconds (then it
    is killed), is a :class:`ChildError` saying so, ending with ``consequence`` (what the
    command does not do then). Where fork is not available the call runs in this process.
    """
    if not hasattr(os, "fork"):
        return fn(*args)
    for stream in (sys.stdout, sys.stderr):  # None where the descriptor was closed at start (`>&-`)
        if stream is not None:
            stream.flush()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read_end)
        _child(fn, args, write_end, debug)
    os.close(write_end)
    try:
        data = _read_all(read_end, pid, timeout, what, consequence)
    except BaseException:  # Ctrl-C, SIGTERM, the time limit: the child is killed, and what it streamed goes
        _kill(pid)
        _sweep_child_files()
        raise
    finally:
        os.close(read_end)
    status = _wait(pid)
    _sweep_child_files()
    if not data:
        raise ChildError(
            f"{what} ended without finishing ({status}): plugin code ended the process (os._exit, a signal, "
            f"a crash in native code); {consequence}"
        )
    kind, payload = pickle.loads(data)
    if kind == "ok":
        return payload
    if kind == "usage":
        raise click.UsageError(payload)
    message, code = payload
    raise ChildError(message, code)


def _child(fn: Callable[..., Any], args: tuple[Any, ...], write_end: int, debug: bool) -> None:
    """Run ``fn`` and send its outcome; stdout goes to stderr; exits without cleanup."""
    code = 0
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C and SIGTERM are the parent's to handle
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        from auditor.parallel import die_with_parent  # here: `popaudit --help` needs no multiprocessing

        die_with_parent()  # the kernel kills the child with its parent: no audit outlives it
        os.dup2(2, 1)  # plugin prints (and any native writes to fd 1) go to stderr
        sys.stdout = sys.stderr
        try:
            outcome: tuple[str, Any] = ("ok", fn(*args))
        except click.ClickException as exc:
            outcome = ("usage", exc.format_message())
        except AuditError as exc:
            outcome = ("error", (str(exc), exc.exit_code))
        except (MemoryError, OSError) as exc:
            outcome = ("error", (f"{type(exc).__name__}: {exc}", 1))
        except BaseException as exc:  # noqa: BLE001  (a bug: say it, with the traceback on --debug)
            if debug:
                traceback.print_exc()
            outcome = ("error", (f"{type(exc).__name__}: {exc}" + ("" if debug else " (--debug shows the traceback)"), 1))
        data = pickle.dumps(outcome)
        view = memoryview(data)
        while view:
            view = view[os.write(write_end, view) :]
    except BaseException:  # noqa: BLE001  (nothing may escape the child: it must not run the parent's code)
        code = 1
    finally:
        try:
            sys.stderr.flush()
        finally:
            os._exit(code)


def _read_all(fd: int, pid: int, timeout: float | None, what: str, consequence: str) -> bytes:
    """Everything the child writes until it closes the pipe, within ``timeout`` seconds."""
    deadline = None if not timeout else time.monotonic() + timeout
    chunks: list[bytes] = []
    while True:
        wait = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready, _, _ = select.select([fd], [], [], wait)
        if not ready:
            _kill(pid)
            raise ChildError(
                f"{what} did not finish within {timeout:g} s (the plugin time limit) and was stopped; {consequence}"
            )
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _sweep_child_files() -> None:
    """Remove the temporary files of a streamed table the child left: it exits without
    clean-up (``os._exit``) or is killed (time limit, Ctrl-C), and a failed audit's
    exception may still hold its table as it exits. Only files of dead processes go."""
    from auditor.memory import remove_stale_spills  # here: `popaudit --help` imports no more than it needs

    remove_stale_spills()


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


def _wait(pid: int) -> str:
    """Reap the child; how it ended, in words."""
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return "its exit status is unknown"
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        return f"killed by {name}"
    return f"exit status {os.WEXITSTATUS(status)}"


__all__ = ["ChildError", "run_isolated", "third_party_plugins"]
