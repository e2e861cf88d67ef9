"""Exact top-K under several scorings at once: dot, cosine and the norm-aware
``|q|^a |k|^a cos(q, k)`` for any exponents a in [0, 1] (1 is dot, 0 is cosine), from
one pass of inner products, with each query's excluded rows never served.

:func:`multi_scoring_topk` computes each block of ``Q . K^T`` once (sgemm, torch/MKL)
and ranks it under every scoring (:mod:`~auditor.retrieval.scoring_blocks`); every list
keeps the top-K contract of :func:`~auditor.retrieval.search.select_topk` (score
descending, then lower row; empty slots row -1, score -inf), so the a = 1 and a = 0
lists are those of :func:`~auditor.retrieval.search.sharded_topk` without and with
``normalise``.

* A table that fits in one tile (a small model: K is a large share of its rows, so
  there is nothing to prune) is ranked densely by :mod:`~auditor.retrieval.one_tile`,
  in the calling thread unless the problem is large and there are several threads.
* Rows are scanned shard by shard (a table larger than the memory ceiling is read in
  row shards, :func:`~auditor.retrieval.shards.shard_bounds`); inside a shard by
  decreasing norm, so the floors of the scorings with a > 0 rise within a few tiles.
* Every scan starts from floors seeded by a sample of 2,048 rows ranked densely
  (:class:`~auditor.retrieval.one_tile.FloorSeed`): without them the first tiles pass
  nearly every entry.
* Zero vectors: never served by cosine (no direction); score 0 for a > 0 (the limit).
* Query blocks run on one thread each (torch single-threaded in each; sgemm and the
  elementwise passes release the GIL).
* Huge and tiny values: when an inner product could overflow float32 (dim x max|x| x
  max|q| near 2**126) or underflow it (that bound below 2**-60: entries near 1e-25),
  queries and table are scaled by powers of two first (ranking unchanged; the rule of
  :func:`~auditor.retrieval.search.overflow_shifts`, shared with
  :func:`~auditor.retrieval.search.sharded_topk`) and the scores scaled back in float64;
  scores are float32, or float64 when one lies beyond float32's range (above or below).
* NaN/inf vectors are the caller's to refuse first (they are never served, or give
  NaN/inf scores, but nothing fails).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Executor, ThreadPoolExecutor, as_completed
import numpy as np
import torch

from auditor.alpha import query_factors
from auditor.errors import EmbeddingTableError, QueryError
from auditor.memory import block_rows, memory_budget
from auditor.progress import SILENT, Progress
from auditor.retrieval.one_tile import ONE_TILE_ROWS, FloorSeed, OneTile, dense_query_block, one_tile_topk
from auditor.retrieval.device_scan import DeviceShard, device_blocks, scan_on_device, to_device
from auditor.retrieval.scoring_blocks import (
    ROW_LIMIT,
    PreparedShard,
    TopKBuffer,
    buffer_capacity,
    block_exclusions,
    decode,
    scan_block,
)
from auditor.retrieval.search import TopK, float32_where_it_fits, overflow_shifts
from auditor.retrieval.shards import prepare_shard, shard_bounds

QUERY_BLOCK = 512
"""Queries per block: one thread's unit of work, and the rows of one score tile."""
ITEM_BLOCK = 2048
"""Rows per score tile (512 x 2048 float32 = 4 MiB, within L2 plus L3 on small machines)."""
STATE_BYTES = 1 << 28
"""Bound on the per-query buffers held at once; more queries are ranked in chunks."""
MIN_QUERY_BLOCK = 16
"""Fewest queries per block when a small memory ceiling shrinks the score tiles."""
INLINE_ENTRIES = 1 << 23
"""Scores (queries x rows) up to which a one-tile problem runs in the calling thread."""


def multi_scoring_topk(
    queries: np.ndarray,
    table: np.ndarray,
    k: int,
    alphas: Sequence[float],
    exclude: tuple[np.ndarray, np.ndarray] | None = None,
    progress: Progress = SILENT,
    description: str = "exact search, every scoring",
    max_memory: int | None = None,
    query_block: int = QUERY_BLOCK,
    item_block: int | None = None,
    threads: int | None = None,
    device: str = "cpu",
) -> dict[float, TopK]:
    """Exact top-``k`` of each query under every scoring ``a`` in ``alphas``.

    ``queries`` (n, dim) and ``table`` (m, dim) are float32 (``table`` may be a memory
    map: it is read in shards within ``max_memory``, else half the available memory).
    ``alphas``: distinct exponents in [0, 1]. ``exclude``: ``(indptr int64 (n+1,), rows
    int64)``, CSR of each query's excluded table rows, or None. Returns ``{a: (scores,
    rows int64)}``, each (n, k) under the top-K contract, scores ``|q|^a |k|^a cos``.
    ``query_block``/``item_block`` size the score tiles (default: up to :data:`ONE_TILE_ROWS`
    rows are one tile); ``threads`` caps the threads (default: torch's). ``device``: ``"cuda"``
    scans on the GPU (:mod:`~auditor.retrieval.device_scan`: the table held there, TF32 off,
    each query's K best keys brought back), so lists equal the CPU's up to float32
    near-ties of the inner products.
    """
    exponents = _check_alphas(alphas)
    if k < 1:
        raise ValueError(f"k must be positive, got {k}")
    q = np.ascontiguousarray(queries, dtype=np.float32)
    if not q.flags.writeable:  # a memory-mapped query file: torch wants writable memory
        q = q.copy()
    if q.ndim != 2:
        raise QueryError(f"query vectors must be a 2-D matrix, got shape {q.shape}")
    if table.ndim != 2 or table.shape[1] != q.shape[1]:
        raise EmbeddingTableError(f"the item table has shape {table.shape}; expected (rows, {q.shape[1]})")
    n, dim = q.shape
    m = int(table.shape[0])
    if m > ROW_LIMIT + 1:
        raise ValueError(f"tables of more than {ROW_LIMIT + 1:,} rows are not supported, got {m:,}")
    if exclude is not None:
        exclude = _check_exclude(exclude, n, m)
    norms, table_peak = _norms_and_peak(table, max_memory)
    query_norms = np.sqrt(np.einsum("ij,ij->i", q.astype(np.float64), q.astype(np.float64)))
    shift_table, shift_query = overflow_shifts(table_peak, _finite_peak(q), dim)
    scaled = np.ldexp(q, -shift_query) if shift_query else q
    bounds = shard_bounds(m, dim, max_memory)
    n_threads = max(1, threads if threads is not None else torch.get_num_threads())
    state_bytes = STATE_BYTES
    on_device = scans_on_device(device)
    dense = not on_device and len(bounds) == 1 and m <= (ONE_TILE_ROWS if item_block is None else item_block)
    if on_device:
        query_block, item_block = device_blocks(device, n) if item_block is None else (query_block, item_block)
    item_block, query_block = (m, dense_query_block(query_block, m, MIN_QUERY_BLOCK)) if dense else (
        item_block or ITEM_BLOCK, query_block)
    budget = memory_budget(max_memory)
    if budget is not None and not on_device:  # the scan's working set (score tiles, per-query buffers): an eighth of the ceiling each
        query_block = max(MIN_QUERY_BLOCK, min(query_block, budget // (8 * 4 * item_block * n_threads)))
        state_bytes = min(state_bytes, budget // 8)
    tile = OneTile(table, norms, exponents, shift_table) if dense else None
    if tile is not None and tile.fits:  # one tile: nothing for the scan to prune
        keys = _one_tile_keys(scaled, tile, k, exclude, query_block, n_threads, progress, description)
        lists = [_final_lists(best, k, a, query_norms, shift_table, shift_query, True) for a, best in zip(exponents, keys)]
        return {a: (float32_where_it_fits(scores), rows) for a, (scores, rows) in zip(exponents, lists)}
    chunk = max(query_block, state_bytes // (len(exponents) * buffer_capacity(k) * 8))
    # Without rescaling every |score| <= |q| |k| <= dim max|x| max|q| fits float32.
    dtype = np.float64 if shift_table or shift_query else np.float32
    found = {a: (np.empty((n, k), dtype=dtype), np.empty((n, k), dtype=np.int64)) for a in exponents}
    cached: list[PreparedShard | DeviceShard] = []
    seed = FloorSeed(table, norms, exponents, shift_table, k)

    def shard_at(s0: int, s1: int, pool: Executor | None) -> PreparedShard | DeviceShard:
        if cached:  # one shard: prepared once for every chunk of queries
            return cached[0]
        prepared = prepare_shard(table, s0, s1, norms, exponents, shift_table, item_block, k, pool)
        shard = to_device(prepared, device) if on_device else prepared
        if len(bounds) == 1:
            cached.append(shard)
        return shard

    previous_threads = torch.get_num_threads()
    previous_tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        if on_device:  # full float32 products: TF32's 10-bit mantissa would reorder lists
            torch.backends.cuda.matmul.allow_tf32 = False
        with progress.track(description, n * len(bounds)) as advance, ThreadPoolExecutor(n_threads) as pool:
            for c0 in range(0, n, chunk):
                c1 = min(c0 + chunk, n)
                buffers = [_ChunkBuffers(c1 - c0, k) for _ in exponents]
                if seed.usable and not on_device:  # the device ranks every entry: nothing to prune
                    chunk_norms = np.ldexp(query_norms[c0:c1], -shift_query)
                    seeded = seed.floors(
                        scaled[c0:c1], chunk_norms, _rows_of(exclude, c0, c1), query_block, pool if n_threads > 1 else None
                    )
                    for buffer, floor in zip(buffers, seeded):
                        buffer.floor[:] = floor
                for s0, s1 in bounds:
                    shard = shard_at(s0, s1, pool if n_threads > 1 else None)

                    def run(b0: int, b1: int, shard: PreparedShard | DeviceShard = shard, c0: int = c0) -> int:
                        torch.set_num_threads(1)  # this thread's operations; restored below
                        views = [b.block(b0 - c0, b1 - c0) for b in buffers]
                        block = torch.from_numpy(scaled[b0:b1]).to(device)  # the CPU's: the same tensor
                        if isinstance(shard, DeviceShard):
                            scan_on_device(block, shard, views, block_exclusions(shard.host, b0, b1, exclude), k)
                        else:
                            scratch = torch.empty((b1 - b0) * item_block, dtype=torch.float32)
                            scan_block(block, shard, views, block_exclusions(shard, b0, b1, exclude), scratch)
                        return b1 - b0

                    blocks = [(b0, min(b0 + query_block, c1)) for b0 in range(c0, c1, query_block)]
                    if n_threads == 1 or on_device:  # inline (and visible to a profiler); one stream
                        for b0, b1 in blocks:
                            advance(run(b0, b1))
                    else:
                        for done in as_completed([pool.submit(run, b0, b1) for b0, b1 in blocks]):
                            advance(done.result())
                for a, buffer in zip(exponents, buffers):
                    scores, rows = _final_lists(buffer.keys, k, a, query_norms[c0:c1], shift_table, shift_query)
                    found[a][0][c0:c1], found[a][1][c0:c1] = scores, rows
    finally:
        torch.set_num_threads(previous_threads)
        if on_device:
            torch.backends.cuda.matmul.allow_tf32 = previous_tf32
    return {a: (float32_where_it_fits(scores), rows) for a, (scores, rows) in found.items()}


def scans_on_device(device: str) -> bool:
    """Whether ``device`` (resolved: ``"cpu"`` or ``"cuda"``) takes the device scan."""
    return device != "cpu"


def _one_tile_keys(
    queries: np.ndarray,
    tile: OneTile,
    k: int,
    exclude: tuple[np.ndarray, np.ndarray] | None,
    query_block: int,
    n_threads: int,
    progress: Progress,
    description: str,
) -> list[np.ndarray]:
    """:func:`~auditor.retrieval.one_tile.one_tile_topk`, on a pool only when there are
    several query blocks and threads and more than :data:`INLINE_ENTRIES` scores (a
    pool, and the cores a batch's other workers use, cost more than a small problem's
    work: an ML-100K-size model is ranked in the calling thread)."""
    n = queries.shape[0]
    previous_threads = torch.get_num_threads()
    try:
        with progress.track(description, n) as advance:
            if n_threads == 1 or n <= query_block or n * tile.m <= INLINE_ENTRIES:
                return one_tile_topk(queries, tile, k, exclude, query_block, None, advance)
            with ThreadPoolExecutor(n_threads) as pool:
                return one_tile_topk(queries, tile, k, exclude, query_block, pool, advance)
    finally:
        torch.set_num_threads(previous_threads)


class _ChunkBuffers:
    """One scoring's buffers for a chunk of queries (see :class:`TopKBuffer`)."""

    def __init__(self, n: int, k: int) -> None:
        self.keys = np.zeros((n, buffer_capacity(k)), dtype=np.uint64)
        self.fill = np.zeros(n, dtype=np.int64)
        self.floor = np.full(n, -np.inf, dtype=np.float32)
        self.k = k

    def block(self, b0: int, b1: int) -> TopKBuffer:
        return TopKBuffer(self.keys[b0:b1], self.fill[b0:b1], self.floor[b0:b1], self.k)


def _rows_of(exclude: tuple[np.ndarray, np.ndarray] | None, q0: int, q1: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The exclusions (CSR) of queries [q0, q1)."""
    if exclude is None:
        return None
    indptr, rows = exclude
    return indptr[q0 : q1 + 1] - indptr[q0], rows[indptr[q0] : indptr[q1]]


def _check_alphas(alphas: Sequence[float]) -> tuple[float, ...]:
    exponents = tuple(float(a) for a in alphas)
    if not exponents:
        raise ValueError("at least one scoring exponent is needed")
    if len(set(exponents)) != len(exponents):
        raise ValueError(f"scoring exponents must be distinct, got {exponents}")
    bad = [a for a in exponents if not 0.0 <= a <= 1.0]
    if bad:
        raise ValueError(f"scoring exponents must lie in [0, 1], got {bad}")
    return exponents


def _check_exclude(exclude: tuple[np.ndarray, np.ndarray], n: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    indptr = np.asarray(exclude[0], dtype=np.int64)
    rows = np.asarray(exclude[1], dtype=np.int64)
    if indptr.shape != (n + 1,) or indptr[0] != 0 or indptr[-1] != rows.size or np.any(np.diff(indptr) < 0):
        raise ValueError(f"exclude must be a CSR (indptr of {n + 1} non-decreasing offsets from 0 to {rows.size})")
    if rows.size and (rows.min() < 0 or rows.max() >= m):
        raise ValueError(f"excluded rows must lie in [0, {m})")
    return indptr, rows


def _finite_peak(vectors: np.ndarray) -> float:
    """max |x| over the finite entries (0 when none)."""
    if vectors.size == 0:
        return 0.0
    peak = float(max(vectors.max(), -vectors.min()))
    if np.isfinite(peak):
        return peak
    finite = np.abs(vectors[np.isfinite(vectors)])
    return float(finite.max()) if finite.size else 0.0


def _norms_and_peak(table: np.ndarray, max_memory: int | None) -> tuple[np.ndarray, float]:
    """Float64 norms of every row and max |x| over finite entries, in row blocks."""
    m, dim = table.shape
    norms = np.empty(m, dtype=np.float64)
    peak = 0.0
    step = block_rows(dim, bytes_per_value=8, max_memory=max_memory)
    for start in range(0, m, step):
        rows = np.asarray(table[start : start + step], dtype=np.float32).astype(np.float64)
        norms[start : start + rows.shape[0]] = np.sqrt(np.einsum("ij,ij->i", rows, rows))
        peak = max(peak, _finite_peak(rows))
    return norms, peak


def _final_lists(
    keys: np.ndarray,
    k: int,
    alpha: float,
    query_norms: np.ndarray,
    shift_table: int,
    shift_query: int,
    ranked: bool = False,
) -> TopK:
    """Each query's K best keys in contract order, as (scores |q|^a |k|^a cos, rows);
    ``ranked``: ``keys`` already hold them, in order."""
    best = keys if ranked else np.sort(keys, axis=1)[:, ::-1][:, :k]
    ranking, rows = decode(best)
    scores = ranking.astype(np.float64)
    scale = shift_query + shift_table * alpha
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if scale:
            scores = scores * 2.0**scale
        if alpha < 1:
            # A zero query scores 0 everywhere (its inner products are all 0).
            scores = scores * query_factors(query_norms, alpha)[:, None]
    scores[rows < 0] = -np.inf
    return scores, rows
