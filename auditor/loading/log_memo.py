"""What a process keeps of a training log between audits: its users and their training items.

A batch audits many models against one log. The query population's log-derived parts
(the users with an interaction on a table row, and the chosen users' training item rows
as CSR) depend only on the log file and on how raw item ids map to table rows, not on
the model's vectors; :class:`LogMemo` keeps them, so the second and later audits of a
worker pay a dictionary look-up instead of two passes over the log.

Keys name everything the values depend on: the log file (resolved path, size and
modification time, so a rewritten log is read again), how it is read (format, columns),
the item mapping (the raw id of every row, or the row count and id offset) and, for the
training items, the chosen users themselves. Entries are few and bounded in bytes (the
newest is always kept); cached arrays are read-only, so no audit can change another's.
"""

from __future__ import annotations

import hashlib
import os
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from auditor.values import ItemRows, LogSpec

MEMO_ENTRIES = 8
"""At most this many log-derived values are kept (each log and item mapping has two)."""
MEMO_BYTES = 1 << 30
"""Older entries are dropped while the kept ones hold more than this (the newest stays)."""

Key = tuple[Any, ...]


def log_identity(spec: LogSpec) -> Key:
    """The log as a key: where it is, how it is read, and its size and modification time."""
    path = spec.path.resolve()
    try:
        stat = os.stat(path)
        state: Key = (stat.st_size, stat.st_mtime_ns)
    except OSError:  # the reader reports a missing file; nothing is kept for it
        state = (None,)
    return (str(path), *state, spec.fmt, spec.user_col, spec.item_col)


def _digest(values: np.ndarray) -> str:
    """A digest of an id array (int64, or str objects hashed through Arrow's buffers)."""
    h = hashlib.blake2b(digest_size=20)
    if values.dtype == object:
        arr = pa.array(values, pa.string())
        h.update(b"str")
        for buffer in arr.buffers()[1:]:
            if buffer is not None:
                h.update(memoryview(buffer))
    else:
        h.update(str(values.dtype).encode())
        h.update(np.ascontiguousarray(values).tobytes())
    h.update(str(values.shape[0]).encode())
    return h.hexdigest()


def mapping_identity(mapping: ItemRows) -> Key:
    """How raw item ids become rows, as a key (the ids hashed, not held)."""
    ids = None if mapping.item_ids is None else _digest(np.asarray(mapping.item_ids))
    return (ids, mapping.n_items, mapping.offset)


def ids_identity(ids: np.ndarray) -> str:
    """A set of chosen users (in query order) as a key."""
    return _digest(ids)


def _nbytes(value: Any) -> int:
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, (pa.Array, pa.ChunkedArray)):
        return int(value.nbytes)
    if isinstance(value, tuple):
        return sum(_nbytes(v) for v in value)
    return 0


def _frozen(value: Any) -> Any:
    """``value`` with its numpy arrays made read-only (a cached value is shared)."""
    if isinstance(value, np.ndarray):
        value.setflags(write=False)
    elif isinstance(value, tuple):
        for v in value:
            _frozen(v)
    return value


@dataclass
class LogMemo:
    """Log-derived values kept between audits, keyed by what they depend on (module docstring)."""

    entries: OrderedDict[Key, Any] = field(default_factory=OrderedDict)
    hits: int = 0
    """Look-ups answered from the memo (tests and benchmarks read it)."""

    def get(self, key: Key, make: Callable[[], Any]) -> Any:
        """The value kept under ``key``, else ``make()``'s (kept; exceptions are not)."""
        if key in self.entries:
            self.entries.move_to_end(key)
            self.hits += 1
            return self.entries[key]
        value = _frozen(make())
        self.entries[key] = value
        self._trim()
        return value

    def peek(self, key: Key) -> Any:
        """The value kept under ``key``, or None (nothing computed)."""
        return self.entries.get(key)

    def _trim(self) -> None:
        total = sum(_nbytes(v) for v in self.entries.values())
        while len(self.entries) > 1 and (len(self.entries) > MEMO_ENTRIES or total > MEMO_BYTES):
            _, dropped = self.entries.popitem(last=False)
            total -= _nbytes(dropped)


__all__ = ["LogMemo", "ids_identity", "log_identity", "mapping_identity"]
