"""Results that grow batch by batch and are merged rarely, so streaming a log of any
length costs memory for its distinct keys, not for its rows.

:class:`Merger` holds pyarrow tables (per-batch group-bys); :class:`SortedKeys` holds
int64 keys as one sorted numpy array, far smaller than a hash set.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa

# Merge pending per-batch partial results once they hold this many rows (or as many as the merged).
MERGE_ROWS = 1 << 22
_DEDUP_CHUNK = 1 << 20  # keys deduplicated per chunk by _sorted_unique


class Merger:
    """Per-batch partial results (pyarrow tables), merged rarely.

    A merge runs once the pending rows reach ``MERGE_ROWS`` and the merged rows: memory
    stays within about twice the distinct keys (plus ``MERGE_ROWS``) and the total merge
    work within a few passes over the partial rows.
    """

    def __init__(self, merge: Callable[[pa.Table], pa.Table]) -> None:
        self.merge = merge
        self.merged: pa.Table | None = None
        self.pending: list[pa.Table] = []
        self.pending_rows = 0

    def add(self, part: pa.Table) -> None:
        self.pending.append(part)
        self.pending_rows += part.num_rows
        if self.pending_rows >= max(MERGE_ROWS, self.merged.num_rows if self.merged is not None else 0):
            self.flush()

    def flush(self) -> pa.Table | None:
        parts = ([self.merged] if self.merged is not None else []) + self.pending
        if parts:
            self.merged = self.merge(pa.concat_tables(parts).combine_chunks())
        self.pending, self.pending_rows = [], 0
        return self.merged


def _sorted_unique(keys: np.ndarray) -> np.ndarray:
    """Sort ``keys`` (an array owning its data) and drop repeats, both in place.

    Returns ``keys`` shrunk to its distinct values. Repeats are dropped chunk by chunk
    so the extra memory is one chunk, not a mask and a copy of the whole array.
    ``np.unique`` is avoided on purpose: in numpy >= 2.3 it hashes, ~40x slower here
    than numpy's vectorised sort for int64.
    """
    keys.sort()
    if keys.size < 2:
        return keys
    write = 0
    previous = None
    for start in range(0, keys.size, _DEDUP_CHUNK):
        chunk = keys[start : start + _DEDUP_CHUNK]
        keep = np.empty(chunk.size, dtype=bool)
        keep[0] = previous is None or chunk[0] != previous
        np.not_equal(chunk[1:], chunk[:-1], out=keep[1:])
        previous = chunk[-1]  # a copy: the writes below may reach this chunk
        kept = chunk[keep]
        keys[write : write + kept.size] = kept  # write <= start, so unread keys stay intact
        write += kept.size
    keys.resize(write, refcheck=False)  # shrinks in place (realloc)
    return keys


class SortedKeys:
    """A set of int64 keys kept as one sorted numpy array, merged by sorting.

    Each batch is sorted and deduplicated on arrival; the pending sorted runs are merged
    into the set once they reach ``MERGE_ROWS`` and the set's size (so each key is
    re-sorted only a few times). A merge extends the set's array in place (realloc),
    copies the pending runs in, sorts and deduplicates in place: about 8 bytes per
    distinct key plus the pending runs, far less than a hash set.
    """

    def __init__(self) -> None:
        self.merged = np.empty(0, dtype=np.int64)
        self.pending: list[np.ndarray] = []
        self.pending_rows = 0

    def add(self, keys: np.ndarray) -> None:
        """Add ``keys`` (an int64 array the set may sort and resize: it takes it over)."""
        part = _sorted_unique(keys)
        self.pending.append(part)
        self.pending_rows += part.size
        if self.pending_rows >= max(MERGE_ROWS, self.merged.size):
            self.flush()

    def flush(self) -> np.ndarray:
        """Merge the pending runs; returns the set (sorted, distinct)."""
        if self.pending:
            keys, at = self.merged, self.merged.size
            self.merged = np.empty(0, dtype=np.int64)
            keys.resize(at + self.pending_rows, refcheck=False)  # large arrays grow by mremap, no copy
            while self.pending:
                part = self.pending.pop(0)
                keys[at : at + part.size] = part
                at += part.size
                del part  # free each run once copied
            self.pending_rows = 0
            self.merged = _sorted_unique(keys)
        return self.merged

