"""The one way a command writes its output to standard output: whole, or an error.

A report, a summary or a listing printed on stdout is the output asked for, as much as a
file named by an option (README: a report with no ``-o`` "still goes to stdout"), so it
gets a file's guarantee: every byte written and flushed before the command goes on to
decide its exit code, and a failed write (a full disk behind ``> audit.json``, a closed
descriptor ``>&-``) is an :class:`~auditor.errors.OutputError`, ``Error: cannot write
stdout: REASON``, exit 1, never a report cut short behind exit 0. Written on the
descriptor itself: Python's buffered ``sys.stdout`` drops the rest of a write the disk
took only part of, and the error with it.

A reader that closed the pipe (``| head``, EPIPE) chose to read no more: that is no failed
audit, and whether the write saw it would depend on the report's size against the pipe's
buffer. So it is one stderr line, ``stdout closed by its reader after N of M bytes``;
stdout is pointed at the null device (later writes, and the interpreter's last flush, go
nowhere) and the command goes on to its gates and exit code (0 or 3) as if the write had
finished.
"""

from __future__ import annotations

import errno
import io
import os
import shutil
import sys
from typing import Any

from auditor.errors import OutputError

STDOUT = "stdout"
"""How an error names standard output."""


_READER_GONE: list[bool] = []
"""Holds True once a reader closed stdout: nothing more is written there."""


def write_stdout(data: str | bytes) -> None:
    """``data`` (text as UTF-8) on standard output after what was printed there before;
    OutputError naming stdout when it cannot all be written (a closed pipe aside: said on
    stderr, and stdout written no more)."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    stream = sys.stdout
    if _READER_GONE:
        return
    if stream is None:  # no descriptor 1 at start (`>&-`, a daemon): Python sets sys.stdout None
        raise OutputError(f"cannot write {STDOUT}: {os.strerror(errno.EBADF)}")
    written = 0
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
            done = os.write(fd, view)
            written += done
            view = view[done:]
    except OSError as exc:
        if exc.errno != errno.EPIPE:
            raise OutputError(f"cannot write {STDOUT}: {exc.strerror or exc}") from exc
        _reader_gone(written, len(payload))


def _reader_gone(written: int, size: int) -> None:
    """Say that the reader closed stdout after ``written`` of ``size`` bytes, and write
    stdout no more: descriptor 1 becomes the null device, so a later print or the
    interpreter's flush at exit meets no closed pipe."""
    _READER_GONE.append(True)
    sys.stderr.write(f"stdout closed by its reader after {written} of {size} bytes: the report was not read whole\n")
    sys.stderr.flush()
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.close(null)
    except OSError:  # no null device: later writes meet EPIPE and are dropped here again
        pass


def stdout_is_terminal() -> bool:
    """Whether standard output is a terminal; False when there is none (``>&-``) or its
    stream cannot say."""
    try:
        return bool(sys.stdout is not None and sys.stdout.isatty())
    except (AttributeError, OSError, ValueError):
        return False


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


def stdout_console(width: int) -> Any:
    """A rich Console for text meant for stdout, kept in memory (print it with
    ``write_stdout(console.file.getvalue())``): rich's own writes would go to
    ``sys.stdout``, around this module's errors. Laid out for the terminal on a terminal,
    else ``width`` columns (logs and pipes: no folding at 80)."""
    from rich.console import Console  # here: `popaudit --help` needs no rich

    terminal = stdout_is_terminal()
    return Console(file=io.StringIO(), highlight=False, force_terminal=terminal,
                   width=shutil.get_terminal_size().columns if terminal else width)
