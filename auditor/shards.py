"""Row shards of an item table, searched exactly on a ``dask.distributed`` cluster.

When retrieval is sharded (the table and its normalised copy exceed the memory ceiling)
and ``--scheduler ADDRESS`` is given, each shard's exact dot and cosine top-K search runs
as one Dask task. Workers get the shard by reference whenever the table is file-backed:

* a Parquet item table: (file, vector column, row range), read in record batches;
* a memory-mapped table (a ``.npy`` input, or a table spilled to a temporary ``.npy``):
  (file, byte offset, row range), memory-mapped read-only on the worker;
* otherwise (a table held only in this process's memory) the shard's rows are scattered.

Workers therefore need the files under the same absolute paths (a shared file system;
for a spilled table, set ``TMPDIR`` to a shared folder). Each task returns its shard's
top-K lists with table-wide rows; they are merged here with the tie rule of
:func:`auditor.retrieval.sharded_topk` (higher score, then lower row), a total order, so
the merged lists equal those of the local sharded search whatever order tasks finish in.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from auditor.errors import EmbeddingTableError, InputError
from auditor.loading.tables import PARQUET_BATCH_ROWS, table_file
from auditor.model import ModelBundle
from auditor.progress import SILENT, Progress

DASK_MISSING = "--scheduler needs dask.distributed: pip install 'popaudit[dask]'"

TopK = tuple[np.ndarray, np.ndarray]
"""(scores float32, rows int64), each (n_queries, k), sorted as :func:`sharded_topk` sorts."""


@dataclass(frozen=True)
class MappedRows:
    """Rows [start, stop) of a C-contiguous float32 (rows, dim) matrix stored in a file
    from byte ``offset`` on (a ``.npy`` body or a spilled table)."""

    path: str
    offset: int
    dim: int
    start: int
    stop: int

    def read(self) -> np.ndarray:
        """The rows, memory-mapped read-only (pages are read as the search scans them)."""
        return np.asarray(
            np.memmap(
                self.path,
                dtype=np.float32,
                mode="r",
                offset=self.offset + self.start * self.dim * 4,
                shape=(self.stop - self.start, self.dim),
            )
        )


@dataclass(frozen=True)
class ParquetRows:
    """Rows [start, stop) of a list-of-float column of a Parquet file."""

    path: str
    column: str
    start: int
    stop: int

    def read(self) -> np.ndarray:
        """The rows as float32, decoded from the row groups that hold them only."""
        from auditor.retrieval import _vector_column

        reader = pq.ParquetFile(self.path)
        groups: list[int] = []
        first = None  # table row of the first selected group's first row
        position = 0
        for index in range(reader.metadata.num_row_groups):
            size = reader.metadata.row_group(index).num_rows
            if position < self.stop and position + size > self.start:
                groups.append(index)
                first = position if first is None else first
            position += size
        parts: list[np.ndarray] = []
        row = 0 if first is None else first
        what = f"{self.path} column {self.column!r}"
        for batch in reader.iter_batches(batch_size=PARQUET_BATCH_ROWS, row_groups=groups, columns=[self.column]):
            low, high = max(self.start, row), min(self.stop, row + batch.num_rows)
            if low < high:
                parts.append(_vector_column(batch.column(0).slice(low - row, high - low), what, EmbeddingTableError))
            row += batch.num_rows
            if row >= self.stop:
                break
        rows = np.concatenate(parts) if parts else np.zeros((0, 0), dtype=np.float32)
        if rows.shape[0] != self.stop - self.start:
            raise EmbeddingTableError(
                f"{what}: rows {self.start}-{self.stop} hold {rows.shape[0]} vectors; the file "
                "changed since it was loaded"
            )
        return rows


ShardSource = MappedRows | ParquetRows


def shard_sources(bundle: ModelBundle, bounds: Sequence[int]) -> list[ShardSource] | None:
    """How a worker can read each shard [bounds[j], bounds[j+1]) of ``bundle.item_table``
    from a file; None when the table lives only in this process's memory."""
    table = bundle.item_table
    pairs = list(zip(bounds[:-1], bounds[1:]))
    if bundle.format == "parquet" and bundle.item_key and bundle.source.is_file():
        path = str(bundle.source.resolve())
        return [ParquetRows(path, bundle.item_key, int(a), int(b)) for a, b in pairs]
    backing = table_file(table)
    if backing is not None:
        path, offset = backing
        return [MappedRows(path, offset, int(table.shape[1]), int(a), int(b)) for a, b in pairs]
    return None


def search_shard(source: ShardSource | np.ndarray, queries: np.ndarray, k: int, start: int) -> tuple[TopK, TopK]:
    """Exact dot and cosine top-k of ``queries`` in one shard, rows numbered table-wide.

    The Dask task: the same :func:`auditor.retrieval.sharded_topk` the local path runs,
    single-threaded (the cluster's workers are the parallelism).
    """
    from auditor.retrieval import sharded_topk

    shard = source if isinstance(source, np.ndarray) else source.read()
    found = []
    for normalise in (False, True):
        scores, rows = sharded_topk(queries, [shard], k, normalise, check_finite=False, threads=1)
        found.append((scores, np.where(rows >= 0, rows + start, -1)))
    return found[0], found[1]


def _merge(best: TopK | None, new: TopK, k: int) -> TopK:
    from auditor.retrieval import _sorted_topk

    if best is None:
        return new
    return _sorted_topk(np.concatenate([best[0], new[0]], axis=1), np.concatenate([best[1], new[1]], axis=1), k)


@contextmanager
def dask_client(address: str) -> Iterator[Any]:
    """A client of the cluster at ``address``; inside a Dask task (``popaudit batch
    --scheduler``), the running cluster's client, with the task's thread seceded so
    waiting on shards does not hold a worker slot."""
    try:
        from distributed import Client, get_worker, worker_client
    except ImportError as exc:
        raise InputError(DASK_MISSING) from exc
    try:
        get_worker()
    except ValueError:
        pass
    else:
        with worker_client() as client:
            yield client
        return
    try:
        # Connect timeout: Dask's distributed.comm.timeouts.connect (default 30 s).
        client = Client(address, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        raise InputError(f"cannot connect to the Dask scheduler at {address}: {exc}") from exc
    try:
        yield client
    finally:
        client.close()


def dask_sharded_topk(
    queries: np.ndarray,
    bundle: ModelBundle,
    bounds: Sequence[int],
    k: int,
    address: str,
    progress: Progress = SILENT,
) -> tuple[TopK, TopK]:
    """Exact dot and cosine top-k over the table's shards [bounds[j], bounds[j+1]), one
    Dask task per shard on the cluster at ``address``; equal to the local sharded search.

    Raises InputError when dask.distributed is missing, the scheduler cannot be reached,
    or a worker cannot read a shard's file.
    """
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    sources = shard_sources(bundle, bounds)
    with dask_client(address) as client:
        from distributed import as_completed

        shared = client.scatter(queries, broadcast=True, hash=False)
        futures = {}
        for j, (start, stop) in enumerate(zip(bounds[:-1], bounds[1:])):
            if sources is not None:
                payload: Any = sources[j]
            else:  # in-memory table: ship the rows themselves
                payload = client.scatter(np.ascontiguousarray(bundle.item_table[start:stop]), hash=False)
            future = client.submit(search_shard, payload, shared, k, int(start), pure=False)
            futures[future] = (int(start), int(stop))
        dot: TopK | None = None
        cos: TopK | None = None
        with progress.track(f"retrieval: shard search on Dask ({len(futures)} shards)", len(futures)) as advance:
            for future in as_completed(list(futures), loop=client.loop):
                try:
                    found_dot, found_cos = future.result()
                except OSError as exc:  # AuditErrors (not OSErrors) pass through as they are
                    start, stop = futures[future]
                    raise InputError(
                        f"a Dask worker could not read rows {start}-{stop} of the item table: {exc}. "
                        "Workers need the table's file under the same path (for a table spilled "
                        "to a temporary file, set TMPDIR to a folder the workers share)"
                    ) from exc
                dot, cos = _merge(dot, found_dot, k), _merge(cos, found_cos, k)
                future.release()
                advance(1)
    assert dot is not None and cos is not None, "bounds describe at least one shard"
    return dot, cos
