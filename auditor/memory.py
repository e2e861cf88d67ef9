"""The memory ceiling, row blocks, and the temporary files tables spill to.

Every stage that scans a table (loading, validation, norms, retrieval) reads it in row
blocks sized here, so a table larger than the ceiling (the ``max_memory`` setting, else
half the available memory) is never loaded whole. Such a table lives in a temporary
``.npy`` memory map (:func:`spill_table`) deleted once the table is garbage collected;
one a dead process left (killed, crashed) is removed by :func:`remove_stale_spills`, which
worker pools run as they end (:class:`auditor.parallel.WorkerPool`).
Kept apart from the loaders so metrics and retrieval need no loader to size their blocks.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
import weakref
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

from auditor.config import format_size
from auditor.errors import InputError, setting

BLOCK_BYTES = 1 << 20
"""Scratch memory of one row block in the block-wise scans (validation, norms, finite checks)."""
MAX_BLOCK_ROWS = 1 << 16
MIN_BLOCK_ROWS = 1024
"""The smallest row shard a memory ceiling must hold (with its normalised copy)."""
SPILL_PREFIX = "popaudit-table-"
"""Name prefix of the temporary files that hold tables larger than memory."""
POOL_PREFIX = "pymp-popaudit-"
"""Name prefix of the temporary folder of popaudit's worker pools (multiprocessing's own
``pymp-*`` folder, named with the owner's process id so a later run can remove it;
:func:`auditor.parallel.own_pool_folder` makes it)."""
MAX_EXPANSION = 1100
"""No compression popaudit reads expands data by more than this (deflate cannot do better
than about 1032:1): data declared beyond it was never in the file (a lie or a bomb)."""
EXPANSION_SLACK = 1 << 20
"""Declared bytes allowed beyond :data:`MAX_EXPANSION` times the stored ones (fill values
of small unwritten datasets, headers)."""


def available_memory() -> int | None:
    """Bytes of memory available now: Linux's MemAvailable (free plus reclaimable page
    cache), else free physical pages (``os.sysconf``); None where the OS does not say."""
    try:
        with open("/proc/meminfo", "rb") as fh:
            for line in fh:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024  # reported in kB
    except (OSError, ValueError, IndexError):
        pass
    try:
        pages, page_size = os.sysconf("SC_AVPHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None
    return pages * page_size if pages > 0 and page_size > 0 else None


def memory_budget(max_memory: int | None) -> int | None:
    """The ceiling tables must respect: ``max_memory``, else half the available memory."""
    if max_memory is not None:
        return max_memory
    free = available_memory()
    return None if free is None else free // 2


def min_memory(dim: int, n_rows: int | None = None) -> int:
    """The smallest ceiling for ``dim``-wide rows: one block of :data:`MIN_BLOCK_ROWS`
    float32 rows (fewer when the table has fewer) and its normalised copy (what one
    retrieval shard holds)."""
    rows = MIN_BLOCK_ROWS if n_rows is None else max(1, min(MIN_BLOCK_ROWS, int(n_rows)))
    return rows * max(int(dim), 1) * 4 * 2


def check_memory_ceiling(max_memory: int | None, dim: int, what: str, n_rows: int | None = None) -> None:
    """Raise InputError when ``max_memory`` cannot hold one block of ``dim``-wide rows
    (:func:`min_memory`; ``n_rows``: the table's rows, when known)."""
    if max_memory is None:
        return
    need = min_memory(dim, n_rows)
    if max_memory < need:
        rows = need // (max(int(dim), 1) * 8)
        flag = setting("max_memory")
        raise InputError(
            f"{flag} {max_memory:,} bytes is too small for {what}: one block of "
            f"{rows} rows x {dim} dimensions and its normalised copy need {need:,} "
            f"bytes; pass {flag} {format_size(need)} or more"
        )


def approximate_index_bytes(n_items: int, dim: int) -> int:
    """What an approximate index (``index`` ivf or hnsw) holds at once: the whole table in
    float32 and its normalised copy (the cosine index); it cannot be searched in shards."""
    return 2 * int(n_items) * max(int(dim), 1) * 4


def check_index_ceiling(index: str, max_memory: int | None, n_items: int, dim: int) -> None:
    """Refuse an approximate ``index`` whose table and normalised copy exceed ``max_memory``:
    known from the table's shape alone, so said before any other work."""
    need = approximate_index_bytes(n_items, dim)
    if index in ("ivf", "hnsw") and max_memory is not None and need > max_memory:
        raise InputError(
            f"{setting('index')} {index} builds an in-memory index of the whole item table and its "
            f"normalised copy ({need:,} bytes), more than {setting('max_memory')} "
            f"({max_memory:,} bytes); use {setting('index')} exact (searched in shards) or a "
            f"larger {setting('max_memory')}"
        )


def check_expansion(
    what: str,
    declared: int,
    stored: int,
    max_memory: int | None,
    error: type[InputError] = InputError,
    *,
    in_memory: bool = True,
) -> None:
    """Refuse data a file declares but did not pay for, before anything is decompressed.

    ``declared``: bytes the data takes once read; ``stored``: bytes the file holds for
    it (compressed, or none at all for unwritten chunks). The one policy of compressed
    data (HDF5 filters, zip members, Parquet pages): read only when the declared size
    is within :data:`MAX_EXPANSION` of the stored one and, when it expands at all, fits
    the memory ceiling (``max_memory``, else half the available memory), so no file can
    make popaudit inflate data to find out how large it is. Raises ``error`` naming ``what``.
    ``in_memory`` False: the data is streamed (a column chunk read page by page), so
    only the ratio applies.
    """
    if declared > MAX_EXPANSION * max(stored, 0) + EXPANSION_SLACK:
        raise error(
            f"{what} declares {declared:,} bytes of data from {stored:,} bytes stored in the file, "
            f"more than any compression yields (at most {MAX_EXPANSION}:1): the file is corrupt "
            "or a decompression bomb"
        )
    if not in_memory or declared <= max(stored, EXPANSION_SLACK):
        return  # data the file stores as it is read is paid for; a MiB always fits (no /proc read per page)
    budget = memory_budget(max_memory)
    if budget is not None and declared > budget:
        raise error(f"{what} declares {declared:,} bytes of data ({stored:,} stored in the file), "
                    + _beyond_ceiling(declared, max_memory, budget))


def _beyond_ceiling(declared: int, max_memory: int | None, budget: int) -> str:
    flag = setting("max_memory")
    ceiling = f"{flag} ({max_memory:,} bytes)" if max_memory is not None else f"half the available memory ({budget:,} bytes)"
    return (f"more than {ceiling}; it is read only when it fits the memory ceiling (pass {flag} "
            f"{format_size(declared * 2)} if the file is trusted and the memory is there)")


class InflationBudget:
    """The compressed members of one archive (``.pt`` storages, ``.npz`` arrays), counted
    together: each is checked as :func:`check_expansion` checks it, and what they inflate
    to in all must fit the memory ceiling too, so that many members, each under the
    ceiling (or each under a MiB), cannot add up to more than a file paid for."""

    def __init__(self, what: str, max_memory: int | None, error: type[InputError] = InputError) -> None:
        """``what``: the archive's error prefix (``cannot read PATH``), or empty."""
        self.what, self.max_memory, self.error = what, max_memory, error
        self.budget: int | None = None  # read at the first member, once: MemAvailable falls as members inflate
        self.declared = self.stored = self.members = 0

    def plan(self, members: list[tuple[str, int, int]]) -> None:
        """Check every compressed member the archive's directory lists, (name, declared,
        stored), before the first is inflated: each one's ratio, and their declared total
        against the ceiling, so that one refusal names a ceiling enough for all of them
        (admitting them one by one named only the total so far, so following its advice led
        to the next refusal, after members were inflated). One member: :func:`check_expansion`."""
        prefix = f"{self.what}: " if self.what else ""
        for member, declared, stored in members:
            check_expansion(f"{prefix}{member}", declared, stored, self.max_memory, self.error, in_memory=len(members) == 1)
        total = sum(declared for _, declared, _ in members)
        if len(members) < 2 or total <= EXPANSION_SLACK:
            return
        budget = memory_budget(self.max_memory)
        if budget is not None and total > budget:
            largest, size, _ = max(members, key=lambda m: m[1])
            raise self.error(
                f"{prefix}its compressed members declare {total:,} bytes of data in all ({len(members)} members, the "
                f"largest {largest} of {size:,}; {sum(stored for _, _, stored in members):,} bytes stored in the file), "
                + _beyond_ceiling(total, self.max_memory, budget)
            )

    def admit(self, member: str, declared: int, stored: int) -> None:
        """Count member ``member`` (``declared`` bytes once inflated, ``stored`` in the file)
        before it is inflated; raise ``error`` when it, or the total so far, does not fit."""
        prefix = f"{self.what}: " if self.what else ""  # none: the caller names the file
        check_expansion(f"{prefix}{member}", declared, stored, self.max_memory, self.error)
        self.declared, self.stored, self.members = self.declared + declared, self.stored + stored, self.members + 1
        if self.members == 1:  # an archive without compressed members reads no /proc file
            self.budget = memory_budget(self.max_memory)
        if self.budget is not None and self.declared > self.budget:
            raise self.error(
                f"{prefix}its compressed members declare {self.declared:,} bytes of data in all ({self.members} "
                f"members up to {member}, {self.stored:,} bytes stored in the file), "
                + _beyond_ceiling(self.declared, self.max_memory, self.budget)
            )


def block_rows(dim: int, bytes_per_value: int = 4, max_memory: int | None = None) -> int:
    """Rows per block so that one block of ``bytes_per_value`` scratch stays within
    :data:`BLOCK_BYTES` (and within a quarter of ``max_memory`` when that is smaller)."""
    budget = BLOCK_BYTES if max_memory is None else max(1, min(BLOCK_BYTES, max_memory // 4))
    return int(min(MAX_BLOCK_ROWS, max(1, budget // (max(int(dim), 1) * bytes_per_value))))


# ---------------------------------------------------------------- spill files


def _remove_file(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


_STALE = re.compile(rf"(?:{re.escape(SPILL_PREFIX)}(\d+)-[^/]*\.npy|{re.escape(POOL_PREFIX)}(\d+)-[^/]*)")


def remove_stale_spills(folder: str | None = None) -> list[str]:
    """Delete spill files and pool folders left by popaudit runs that were killed (their
    owner process is gone); return their paths. Those of live runs and of other users
    are kept."""
    folder = folder or tempfile.gettempdir()
    removed: list[str] = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    uid = os.getuid() if hasattr(os, "getuid") else None
    for name in names:
        match = _STALE.fullmatch(name)
        if match is None or _pid_alive(int(match.group(1) or match.group(2))):
            continue
        path = os.path.join(folder, name)
        try:
            st = os.lstat(path)
            if uid is not None and st.st_uid != uid:
                continue
            if stat.S_ISDIR(st.st_mode):
                shutil.rmtree(path)
            else:
                os.unlink(path)
            removed.append(path)
        except OSError:
            continue  # gone meanwhile, or not ours to remove
    return removed


def spill_table(n_rows: int, dim: int, source: object) -> np.memmap:
    """A new float32 (n_rows, dim) ``.npy`` memory map in :func:`tempfile.gettempdir`.

    The file is allocated in full up front (a full disk fails here with a clear error,
    not later with SIGBUS) and deleted when the array and every view of it are garbage
    collected, or at interpreter exit. Its name carries this process's id, so a later
    run removes it (:func:`remove_stale_spills`) if this one is killed before cleaning up.
    """
    import numpy as np  # noqa: PLC0415 - here: error paths of `check` reach this module (via parallel.py) and need no numpy

    remove_stale_spills()
    fd, name = tempfile.mkstemp(prefix=f"{SPILL_PREFIX}{os.getpid()}-", suffix=".npy")
    os.close(fd)
    try:
        table = np.lib.format.open_memmap(name, mode="w+", dtype=np.float32, shape=(n_rows, dim))
        if hasattr(os, "posix_fallocate") and table.nbytes:
            with open(name, "r+b") as fh:
                os.posix_fallocate(fh.fileno(), 0, table.offset + table.nbytes)
    except (OSError, ValueError) as exc:
        _remove_file(name)
        raise InputError(
            f"cannot create a {n_rows * dim * 4:,}-byte temporary file for the item table of "
            f"{source} in {tempfile.gettempdir()}: {exc} (free disk space there, or set TMPDIR "
            "to a folder with room)"
        ) from exc
    weakref.finalize(table, _remove_file, name)
    return table


def spill_note(n_rows: int, dim: int, source: object, max_memory: int | None, path: str | Path) -> str:
    """The warning that says a table was streamed to disk, and why.

    Names the folder, not the random file name, so two runs' reports stay identical.
    """
    size = n_rows * dim * 4
    ceiling = (
        f"{setting('max_memory')} ({max_memory:,} bytes)" if max_memory is not None else "half the available memory"
    )
    return (
        f"item table of {source} ({n_rows:,} x {dim} float32, {size:,} bytes) exceeds {ceiling}: "
        f"streamed to a temporary file in {os.path.dirname(path)} and read in row blocks "
        "(deleted when the audit ends; set TMPDIR to place it elsewhere)"
    )


def table_file(table: np.ndarray) -> tuple[str, int] | None:
    """(file, byte offset of row 0) when ``table`` is a C-contiguous float32 2-D view into a
    memory-mapped file (a spilled table, a memory-mapped ``.npy``); None otherwise.

    Lets another process (a Dask worker) open the same rows without copying the array.
    """
    import numpy as np  # noqa: PLC0415 - see spill_table

    if table.dtype != np.float32 or table.ndim != 2 or not table.flags.c_contiguous:
        return None
    root: np.memmap | None = None
    obj: object = table
    while isinstance(obj, np.ndarray):
        if isinstance(obj, np.memmap):
            root = obj  # the outermost memmap is the one whose offset matches its data
        obj = obj.base
    if root is None or not getattr(root, "filename", None):
        return None
    start = table.__array_interface__["data"][0] - root.__array_interface__["data"][0]
    return str(root.filename), int(root.offset) + int(start)
