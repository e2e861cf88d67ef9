"""Sharded exact search on a ``dask.distributed`` cluster (the ``scheduler`` setting).

When retrieval is sharded (the table and its sorted copy exceed the memory ceiling)
each shard's exact top-K search under every scoring runs as one Dask task, the shard passed
by file reference where possible (:mod:`auditor.loading.shards`), else its rows
scattered. Each task returns its shard's lists with table-wide rows; they are merged
here by the top-K contract (:func:`~auditor.retrieval.search.merge_topk`), a total
order, so the result equals the local sharded search whatever order tasks finish in.
The client is :func:`auditor.parallel.dask_client` (inside a batch row running on Dask,
the cluster that runs it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from auditor.errors import InputError
from auditor.model import ModelBundle
from auditor.parallel import dask_client
from auditor.progress import SILENT, Progress
from auditor.retrieval.scorings import multi_scoring_topk
from auditor.retrieval.search import TopK, merge_topk
from auditor.retrieval.serving import Exclusions, shard_exclusions
from auditor.loading.shards import ShardSource, shard_sources


def search_shard(
    source: ShardSource | np.ndarray,
    queries: np.ndarray,
    k: int,
    start: int,
    exponents: tuple[float, ...],
    exclude: Exclusions | None,
) -> dict[float, TopK]:
    """Exact top-k of ``queries`` in one shard under every exponent, rows numbered table-wide.

    The Dask task: the same one-pass :func:`~auditor.retrieval.scorings.multi_scoring_topk`
    the local path runs, single-threaded (the cluster's workers are the parallelism);
    ``exclude`` holds the excluded rows inside this shard, numbered from its first row.
    """
    shard = source if isinstance(source, np.ndarray) else source.read()
    found = multi_scoring_topk(queries, shard, k, exponents, exclude=exclude, threads=1)
    return {a: (scores, np.where(rows >= 0, rows + start, -1)) for a, (scores, rows) in found.items()}


def dask_multi_scoring_topk(
    queries: np.ndarray,
    bundle: ModelBundle,
    bounds: Sequence[int],
    k: int,
    exponents: tuple[float, ...],
    exclude: Exclusions | None,
    address: str,
    progress: Progress = SILENT,
) -> dict[float, TopK]:
    """Exact top-k under every exponent over the table's shards [bounds[j], bounds[j+1]),
    one Dask task per shard on the cluster at ``address``; equal to the local search up
    to float32 near-ties (shards merge by score, then row).

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
            local = shard_exclusions(exclude, int(start), int(stop))
            future = client.submit(search_shard, payload, shared, k, int(start), exponents, local, pure=False)
            futures[future] = (int(start), int(stop))
        merged: dict[float, TopK] = {}
        with progress.track(f"retrieval: shard search on Dask ({len(futures)} shards)", len(futures)) as advance:
            for future in as_completed(list(futures), loop=client.loop):  # type: ignore[no-untyped-call]
                try:
                    found = future.result()
                except OSError as exc:  # AuditErrors (not OSErrors) pass through as they are
                    start, stop = futures[future]
                    raise InputError(
                        f"a Dask worker could not read rows {start}-{stop} of the item table: {exc}. "
                        "Workers need the table's file under the same path (for a table spilled "
                        "to a temporary file, set TMPDIR to a folder the workers share)"
                    ) from exc
                for a, lists in found.items():
                    merged[a] = merge_topk(merged.get(a), lists, k)
                future.release()
                advance(1)
    return merged
