"""The trace file, written a line at a time as training goes.

Writing: each record is one JSON line, flushed to the operating system before the
monitor goes on, so a process that dies leaves every record taken so far in the file
(at worst a last line cut mid-write, which the reader drops and reports); it is also
fsync'd to the disk at most every :data:`FSYNC_SECONDS` and at close (an fsync costs
milliseconds, a large share of a training step), so a machine that loses power loses
at most those last seconds. A trace is not written atomically (that
would hide it until training ends); instead the writer refuses to replace an existing
file that is not a popaudit trace.

Reading is :func:`auditor.loading.trace.read_trace` (the audit's load stage reads traces).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any


from auditor.errors import OutputError
from auditor.io import is_special_file
from auditor.trace_schema import (
    TRACE_SCHEMA,
    TraceHeader,
)


FSYNC_SECONDS = 5.0


class TraceWriter:
    """Appends records to a trace file, each flushed as it is written (see the module docstring)."""

    def __init__(self, path: Path | str, header: TraceHeader, *, fsync: bool = True) -> None:
        self.path = Path(path)
        self.fsync = fsync and not is_special_file(self.path)
        self._synced = -math.inf
        refuse_foreign(self.path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh: IO[str] | None = open(self.path, "w", encoding="utf-8")
        except OSError as exc:
            raise OutputError(f"cannot write trace {self.path}: {exc.strerror or exc}") from exc
        self.write(header.to_json())

    def write(self, record: Mapping[str, Any]) -> None:
        """One record as one line, on disk before this returns."""
        if self._fh is None:
            raise OutputError(f"trace {self.path} is already closed")
        line = json.dumps(dict(record), allow_nan=False, separators=(",", ":"))
        try:
            self._fh.write(line + "\n")
            self._fh.flush()
            if self.fsync and time.monotonic() - self._synced >= FSYNC_SECONDS:
                os.fsync(self._fh.fileno())
                self._synced = time.monotonic()
        except OSError as exc:
            raise OutputError(f"cannot write trace {self.path}: {exc.strerror or exc}") from exc

    def close(self) -> None:
        if self._fh is not None:
            try:
                if self.fsync:
                    os.fsync(self._fh.fileno())
            except OSError as exc:
                raise OutputError(f"cannot write trace {self.path}: {exc.strerror or exc}") from exc
            finally:
                self._fh.close()
                self._fh = None


def refuse_foreign(path: Path) -> None:
    """OutputError when ``path`` is a folder, or a non-empty file whose first line is not
    a trace header: a mistyped path must never destroy someone's data."""
    if path.is_dir():
        raise OutputError(f"cannot write trace {path}: it is a folder")
    if not path.is_file() or path.stat().st_size == 0:
        return
    with open(path, "rb") as fh:
        first = fh.readline(1 << 16)
    try:
        head = json.loads(first)
    except ValueError:
        head = None
    if not (isinstance(head, dict) and head.get("schema") == TRACE_SCHEMA):
        raise OutputError(
            f"{path} exists and is not a popaudit trace; popaudit replaces only its own traces: choose another path"
        )
