"""The results journal: each finished row appended to disk as it arrives, between rewrites.

The results Parquet file cannot grow in place (its footer indexes every row), so
:class:`~auditor.batch.results.ResultsWriter` rewrites it whole, rarely, and appends the
rows finished since its last rewrite here: a JSON Lines file beside it
(``.<name>.journal``), one record a line, each written to the operating system at once.
Saving a row costs the row (a JSON line), not the table, and records become Arrow
columns in bulk, when the file is rewritten. A crash or a kill loses only the audits in
flight: ``resume`` reads the rows the journal holds beyond the results file (a line cut
mid-write is dropped). The journal is removed whenever the results file is rewritten
(it then holds every row), so it never outlives a run that ends; a special output
(``/dev/null``, a FIFO) has none.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from auditor.errors import OutputError
from auditor.io import is_special_file

MAX_JOURNAL_LINE = 1 << 30
"""A longer line is not a record popaudit wrote (a report is tens of kilobytes)."""


def journal_path(output: Path) -> Path | None:
    """Where the journal of the results file ``output`` lives (None: a special file has none)."""
    output = Path(output)
    return None if is_special_file(output) else output.with_name(f".{output.name}.journal")


class Journal:
    """Records appended as JSON lines; removed once the results file holds them."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._fd: int | None = None

    def append(self, records: Iterable[dict[str, Any]]) -> None:
        """Write ``records`` at the journal's end, one line each, in one write."""
        if self.path is None:
            return
        text = "".join(json.dumps(record, allow_nan=True) + "\n" for record in records)
        if not text:
            return
        try:
            if self._fd is None:
                self._fd = _open_fresh(self.path)
            data = memoryview(text.encode())
            while data:  # a short write (a signal, a full pipe) goes on where it stopped
                data = data[os.write(self._fd, data):]
        except OSError as exc:
            self.remove()  # never what another process put under the journal's name
            raise OutputError(f"cannot write {self.path} (the results journal): {exc.strerror or exc}") from exc

    def remove(self) -> None:
        """Close and delete the journal (the results file now holds every row)."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
        if self.path is not None and self.path.is_file() and not self.path.is_symlink():
            with contextlib.suppress(OSError):
                self.path.unlink()


_NOT_A_FILE = "something other than a regular file (a FIFO, a device, a folder) has its name"


def check_journal_place(path: Path | None) -> None:
    """OutputError, before any audit runs, when something the journal could not replace
    (a FIFO, a device, a folder) has its name (a symlink there is refused with the other
    outputs, :func:`auditor.output_guard.check_not_inputs`)."""
    if path is not None and not path.is_symlink() and path.exists() and not path.is_file():
        raise OutputError(f"cannot write {path} (the results journal): {_NOT_A_FILE}; remove it or choose another output")


def _open_fresh(path: Path) -> int:
    """An empty journal at ``path`` opened for appending. Whatever is planted under the
    journal's name is never written through: a symlink is refused before the run (as
    every output is, see :mod:`auditor.io`); one put there since is removed, never
    followed; anything but a regular file (a FIFO, a device) is refused without blocking."""
    if path.is_symlink():
        path.unlink()
    not_a_file = OSError(0, _NOT_A_FILE)
    if path.exists() and not path.is_file():
        raise not_a_file
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK
    fd = os.open(path, flags, 0o666)
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # put there since the check above
        os.close(fd)
        raise not_a_file
    os.ftruncate(fd, 0)
    return fd


def read_journal(path: Path | None) -> list[dict[str, Any]]:
    """The records a journal holds, in the order written (a line cut mid-write, or one that
    is not a record, is dropped); none without a journal. A symlink under the journal's
    name is not followed: a journal is only ever a file popaudit wrote there."""
    if path is None or path.is_symlink() or not path.is_file():
        return []
    records: list[dict[str, Any]] = []
    try:
        with open(path, "rb") as fh:
            for line in iter(lambda: fh.readline(MAX_JOURNAL_LINE), b""):
                if not line.endswith(b"\n"):  # the last line, cut by a crash
                    break
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict) and isinstance(record.get("row"), int):
                    records.append(record)
    except OSError:
        return records
    return records


__all__ = ["Journal", "check_journal_place", "journal_path", "read_journal"]
