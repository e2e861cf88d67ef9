"""Sharded exact search on a ``dask.distributed`` cluster (the ``scheduler`` setting).

When retrieval is sharded (the table and its normalised copy exceed the memory ceiling)
each shard's exact dot and cosine top-K search runs as one Dask task, the shard passed
by file reference where possible (:mod:`auditor.retrieval.shards`), else its rows
scattered. Each task returns its shard's lists with table-wide rows; they are merged
here by the top-K contract (:func:`~auditor.retrieval.search.merge_topk`), a total
order, so the result equals the local sharded search whatever order tasks finish in.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from auditor.errors import InputError, setting
from auditor.model import ModelBundle
from auditor.progress import SILENT, Progress
from auditor.retrieval.search import TopK, merge_topk, sharded_topk
from auditor.retrieval.shards import ShardSource, shard_sources


def search_shard(source: ShardSource | np.ndarray, queries: np.ndarray, k: int, start: int) -> tuple[TopK, TopK]:
    """Exact dot and cosine top-k of ``queries`` in one shard, rows numbered table-wide.

    The Dask task: the same :func:`~auditor.retrieval.search.sharded_topk` the local
    path runs, single-threaded (the cluster's workers are the parallelism).
    """
    shard = source if isinstance(source, np.ndarray) else source.read()
    found = []
    for normalise in (False, True):
        scores, rows = sharded_topk(queries, [shard], k, normalise, check_finite=False, threads=1)
        found.append((scores, np.where(rows >= 0, rows + start, -1)))
    return found[0], found[1]


@contextmanager
def dask_client(address: str) -> Iterator[Any]:
    """A client of the cluster at ``address``; inside a Dask task (``popaudit batch
    with a scheduler``), the running cluster's client, with the task's thread seceded so
    waiting on shards does not hold a worker slot."""
    try:
        from distributed import Client, get_worker, worker_client
    except ImportError as exc:
        raise InputError(f"{setting('scheduler')} needs dask.distributed: pip install 'popaudit[dask]'") from exc
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
        client = Client(address, set_as_default=False)  # type: ignore[no-untyped-call]
    except (OSError, TimeoutError, ValueError) as exc:
        raise InputError(f"cannot connect to the Dask scheduler at {address}: {exc}") from exc
    try:
        yield client
    finally:
        client.close()  # type: ignore[no-untyped-call]


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
            for future in as_completed(list(futures), loop=client.loop):  # type: ignore[no-untyped-call]
                try:
                    found_dot, found_cos = future.result()
                except OSError as exc:  # AuditErrors (not OSErrors) pass through as they are
                    start, stop = futures[future]
                    raise InputError(
                        f"a Dask worker could not read rows {start}-{stop} of the item table: {exc}. "
                        "Workers need the table's file under the same path (for a table spilled "
                        "to a temporary file, set TMPDIR to a folder the workers share)"
                    ) from exc
                dot, cos = merge_topk(dot, found_dot, k), merge_topk(cos, found_cos, k)
                future.release()
                advance(1)
    assert dot is not None and cos is not None, "bounds describe at least one shard"
    return dot, cos
