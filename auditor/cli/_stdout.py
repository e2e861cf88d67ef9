"""The one way a command writes its output to standard output: whole, or an error.

A report, a summary or a listing printed on stdout is the output asked for, as much as a
file named by an option (README: a report with no ``-o`` "still goes to stdout"), so it
gets a file's guarantee: every byte written and flushed before the command goes on to
decide its exit code, and a failed write (a full disk behind ``> audit.json``, a closed
pipe) is an :class:`~auditor.errors.OutputError`, ``Error: cannot write stdout: REASON``,
exit 1, never a report cut short behind exit 0. Written on the descriptor itself: Python's
buffered ``sys.stdout`` drops the rest of a write the disk took only part of, and the
error with it. A closed pipe (``| head``) is said the same way, as ``--json /dev/stdout``
says it: the reader got part of the output.
"""

from __future__ import annotations

import os
import sys

from auditor.errors import OutputError

STDOUT = "stdout"
"""How an error names standard output."""


def write_stdout(data: str | bytes) -> None:
    """``data`` (text as UTF-8) on standard output after what was printed there before;
    OutputError naming stdout when it cannot all be written."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    stream = sys.stdout
    try:
        stream.flush()
        fd = _descriptor(stream)
        if fd is None:  # a captured stream (CliRunner, a notebook): its own writer
            binary = getattr(stream, "buffer", None)
            if binary is None:
                stream.write(payload.decode("utf-8"))
                stream.flush()
            else:
                binary.write(payload)
                binary.flush()
            return
        view = memoryview(payload)
        while view:  # a short write (a disk filling up) continued to the error it ends in
            view = view[os.write(fd, view):]
    except OSError as exc:
        raise OutputError(f"cannot write {STDOUT}: {exc.strerror or exc}") from exc


def echo_stdout(line: str) -> None:
    """One line of text on standard output, as :func:`write_stdout` writes."""
    write_stdout(line + "\n")


def _descriptor(stream: object) -> int | None:
    """The descriptor under ``stream``, or None when it has none (io.UnsupportedOperation
    is an OSError and a ValueError)."""
    try:
        fd = stream.fileno()  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):
        return None
    return fd if isinstance(fd, int) else None
