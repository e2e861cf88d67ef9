"""Exact top-K search with FAISS, and the top-K contract every search here keeps.

The contract (:func:`select_topk`): each query's list is ordered by score, highest
first, ties broken by the lower table row; slots no row could fill come last with row
-1 and score -inf. That is a total order, so top-K lists of row shards merged with
:func:`merge_topk` equal one search over the whole table, in whatever order the shards
were searched (locally, or on a Dask cluster).

Search notes
------------
* Exact search is FAISS's flat inner-product kernel (``faiss.knn`` with
  ``METRIC_INNER_PRODUCT``, the function ``IndexFlatIP.search`` calls) run on the table
  itself, so the table is not copied into an index. Cosine runs the same kernel on
  L2-normalised copies.
* faiss-cpu 1.15 takes its BLAS path only when queries x dims >= 128,000
  (``distance_compute_blas_threshold``); below that it rescans the table once per query
  and runs 5-9x slower on large catalogues. :func:`blas_path` forces the BLAS path (with
  one BLAS thread, see there) for the duration of a search and restores the global
  settings afterwards.
* Queries go to FAISS in blocks of :data:`QUERY_BLOCK`, so result buffers stay bounded
  and the progress bar advances. Each block is searched by one thread per core over
  slices of the table, FAISS single-threaded in each, and the slices' lists merged.
* FAISS keeps arbitrary rows among scores tied at the k-th place (higher rows on its BLAS
  path), so each search fetches one more candidate and, where that one still ties, more
  (:func:`_knn_one_thread`); the lists then keep the contract.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np
from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]

from auditor.errors import EmbeddingTableError, InputError, QueryError
from auditor.memory import block_rows
from auditor.progress import SILENT, Advance, Progress

QUERY_BLOCK = 4096
"""Queries per FAISS call: FAISS's own BLAS query block, so blocking costs no extra pass."""

MIN_ROWS_PER_THREAD = 65_536
"""Exact search splits the table across threads only when each slice has this many rows."""

FLOAT32_SAFE_EXPONENT = 126
"""Exact dot-product search keeps dim x max|x| x max|q| below 2**126 (float32's largest
value is just under 2**128), which bounds every inner product and every partial sum."""

FLOAT32_SMALL_EXPONENT = -60
"""Below this, dim x max|x| x max|q| (the bound of every inner product) is lifted to about
2**0 by powers of two: otherwise the products fall into float32's subnormal range or
underflow to 0 (entries near 1e-25 give products near 1e-50) and every list becomes the
lowest unseen rows. Ordinary tables (bounds far above 2**-60) are searched untouched."""

TopK = tuple[np.ndarray, np.ndarray]
"""(scores, rows int64), each (n_queries, k), ordered as :func:`select_topk` orders them."""


def select_topk(scores: np.ndarray, rows: np.ndarray, k: int) -> TopK:
    """The top-K contract: of each query's candidates, the first ``k`` by score
    descending, then row ascending; empty candidates (row -1) last, with score -inf.

    ``scores`` and ``rows`` are (n_queries, n_candidates), rows numbered table-wide
    (fewer than ``k`` candidates give fewer columns). The order is total, so row shards
    searched apart and merged by it (:func:`merge_topk`) give exactly the lists of one
    search over the whole table: ties are real (duplicate items, small integer
    embeddings), and without the row rule they would fall by shard order.
    """
    empty = rows < 0
    primary = np.where(empty, np.inf, -scores.astype(np.float64))
    secondary = np.where(empty, np.iinfo(np.int64).max, rows)
    order = np.lexsort((secondary, primary), axis=-1)[:, :k]
    top_scores = np.take_along_axis(scores, order, axis=1)
    top_rows = np.take_along_axis(rows, order, axis=1)
    top_scores[top_rows < 0] = -np.inf
    return top_scores, top_rows


def merge_topk(best: TopK | None, new: TopK, k: int) -> TopK:
    """Merge a shard's top-K lists into the running ones (None: nothing merged yet);
    the result is :func:`select_topk` over both, independent of merge order."""
    if best is None:
        return new
    return select_topk(np.concatenate([best[0], new[0]], axis=1), np.concatenate([best[1], new[1]], axis=1), k)


@contextmanager
def blas_path() -> Iterator[None]:
    """Force FAISS's BLAS path for exact search; restore the global settings afterwards.

    Also keeps BLAS to one thread meanwhile: FAISS calls sgemm on small blocks (4096
    queries x 1024 items), so a threaded BLAS forks and joins per block; on shared cores
    that dominated (1M x 32 dims x 1,000 queries, K=10: 13.1 s with threaded BLAS, 0.8 s
    with one thread, 6.3 s on FAISS's default non-BLAS path). :func:`_search_blocks`
    gets its parallelism from table slices instead.
    """
    import faiss  # noqa: PLC0415 - heavy; loaded on the first search, not with the section

    previous = faiss.cvar.distance_compute_blas_threshold
    faiss.cvar.distance_compute_blas_threshold = 0
    try:
        with threadpool_limits(limits=1, user_api="blas"):
            yield
    finally:
        faiss.cvar.distance_compute_blas_threshold = previous


def l2_normalise(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Float32 L2-normalised copy of ``vectors`` and the mask of non-zero rows.

    Norms and the division are computed in float64, in row blocks (bounded scratch),
    then rounded once to float32. For float32 input that is overflow- and
    underflow-free without further scaling: a squared entry is at most
    (3.4e38)^2 = 1.2e77 and at least (1.4e-45)^2 = 2e-90, both well inside float64's
    range, so every finite row gets its true norm (float32 squaring made rows near
    ±3e38 inf, i.e. zero vectors). Zero rows stay zero (no division by zero, no NaN).
    """
    vectors = np.asarray(vectors, dtype=np.float32)
    n_rows = vectors.shape[0]
    out = np.empty(vectors.shape, dtype=np.float32)
    nonzero = np.empty(n_rows, dtype=bool)
    step = block_rows(vectors.shape[1] if vectors.ndim == 2 else 1, bytes_per_value=8)
    for start in range(0, n_rows, step):
        rows = vectors[start : start + step].astype(np.float64)
        norms = np.sqrt(np.einsum("ij,ij->i", rows, rows))
        keep = norms > 0
        # Zero rows: ``where`` skips them and they stay 0.
        np.divide(rows, norms[:, None], out=rows, where=keep[:, None])
        out[start : start + step] = rows
        nonzero[start : start + step] = keep
    return out, nonzero


def directions(table: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """The L2-normalised rows cosine search runs on, zero rows left out (no direction, so
    cosine never serves them), and the table rows kept (None: every row)."""
    normalised, nonzero = l2_normalise(table)
    if nonzero.all():
        return normalised, None
    kept = np.flatnonzero(nonzero)
    return np.ascontiguousarray(normalised[kept]), kept


def require_finite(vectors: np.ndarray, what: str, offset: int, error: type[InputError]) -> None:
    """Raise ``error`` naming the first NaN/inf row (``offset``: table row of row 0)."""
    finite = np.isfinite(vectors).all(axis=1)
    if not finite.all():
        bad = np.flatnonzero(~finite)
        raise error(
            f"{what} holds NaN or infinite values ({bad.size} rows, first at row "
            f"{int(bad[0]) + offset}); fix or drop those rows before auditing"
        )


def _knn_one_thread(queries: np.ndarray, table: np.ndarray, k: int) -> TopK:
    """``faiss.knn`` by inner product with FAISS (and OpenMP-built BLAS) on this thread only."""
    # The OpenMP thread count is per calling thread, so this leaves other threads alone.
    import faiss  # noqa: PLC0415 - see blas_path

    faiss.omp_set_num_threads(1)
    n_rows = int(table.shape[0])
    if n_rows <= k or k == 0:  # every row is in the list: no choice among tied rows to get wrong
        found = faiss.knn(queries, table, k, faiss.METRIC_INNER_PRODUCT)
        return np.asarray(found[0]), np.asarray(found[1])
    first = faiss.knn(queries, table, k + 1, faiss.METRIC_INNER_PRODUCT)
    scores, rows = np.asarray(first[0], dtype=np.float32), np.asarray(first[1], dtype=np.int64)
    # FAISS keeps arbitrary rows among scores tied at the k-th place (higher ones on its
    # BLAS path, any with k=1). Where the (k+1)-th score ties the k-th, fetch more until
    # one falls below it: then every tied row is among the candidates and the contract
    # picks the lowest.
    best_scores, best_rows = select_topk(scores, rows, k)
    tied = np.flatnonzero((scores[:, k] == scores[:, k - 1]) & (rows[:, k] >= 0))
    fetch = k + 1
    while tied.size and fetch < n_rows:
        fetch = min(n_rows, 2 * fetch)
        more = faiss.knn(queries[tied], table, fetch, faiss.METRIC_INNER_PRODUCT)
        more_scores, more_rows = np.asarray(more[0], dtype=np.float32), np.asarray(more[1], dtype=np.int64)
        best_scores[tied], best_rows[tied] = select_topk(more_scores, more_rows, k)
        tied = tied[(more_scores[:, -1] == more_scores[:, k - 1]) & (more_rows[:, -1] >= 0)]
    return best_scores, best_rows


def _search_blocks(
    queries: np.ndarray,
    table: np.ndarray,
    k: int,
    advance: Advance,
    block: int,
    threads: int | None = None,
) -> TopK:
    """Exact inner-product top-k of ``queries`` against ``table`` (rows local to it).

    The table is split into one slice per core, each searched by its own thread with
    FAISS single-threaded (FAISS releases the GIL), and the per-slice lists are merged
    by the contract. Compared with FAISS's own threading this drops a fork/join per
    1024-item block, which on shared cores cost up to 16x.
    """
    import faiss  # noqa: PLC0415 - see blas_path

    n = queries.shape[0]
    n_threads = threads if threads is not None else faiss.omp_get_max_threads()
    parts = max(1, min(n_threads, table.shape[0] // MIN_ROWS_PER_THREAD))
    bounds = np.linspace(0, table.shape[0], parts + 1).astype(np.int64)
    slices = [table[bounds[j] : bounds[j + 1]] for j in range(parts)]
    scores = np.empty((n, k), dtype=np.float32)
    rows = np.empty((n, k), dtype=np.int64)
    with blas_path(), ThreadPoolExecutor(parts) as pool:
        for start in range(0, n, block):
            stop = min(start + block, n)
            chunk = queries[start:stop]
            found = list(pool.map(lambda part: _knn_one_thread(chunk, part, k), slices))
            if parts == 1:
                scores[start:stop], rows[start:stop] = found[0]
            else:
                merged_rows = [np.where(i >= 0, i + bounds[j], -1) for j, (_, i) in enumerate(found)]
                scores[start:stop], rows[start:stop] = select_topk(
                    np.concatenate([d for d, _ in found], axis=1),
                    np.concatenate(merged_rows, axis=1),
                    k,
                )
            advance(stop - start)
    return scores, rows


def overflow_shifts(table_peak: float, query_peak: float, dim: int) -> tuple[int, int]:
    """Powers of two ``(t, q)`` to divide the table and the queries by so that no inner
    product (nor partial sum) can overflow float32, nor underflow it: the bound
    |x . q| <= dim x max|x| x max|q| is brought below 2**126 (:data:`FLOAT32_SAFE_EXPONENT`),
    and when it lies below 2**-60 (:data:`FLOAT32_SMALL_EXPONENT`) it is lifted to about
    2**0 with negative powers (a multiplication).

    (0, 0) whenever the bound lies between, so ordinary tables are searched untouched.
    The side farther from the other is shifted first, then both equally: ranking is
    invariant to one positive factor on all items (or on a query), and small shifts
    keep small entries clear of float32's subnormal range (and large ones of overflow).
    """
    if table_peak == 0.0 or query_peak == 0.0:
        return 0, 0
    # frexp: peak < 2**exponent, so the bound is below 2**(e_table + e_query + e_dim).
    e_table, e_query, e_dim = math.frexp(table_peak)[1], math.frexp(query_peak)[1], math.frexp(dim)[1]
    bound = e_table + e_query + e_dim
    if bound > FLOAT32_SAFE_EXPONENT:
        excess = bound - FLOAT32_SAFE_EXPONENT
        shift_table = min(excess, max(0, e_table - e_query))
        shift_query = min(excess - shift_table, max(0, e_query - e_table))
        rest = excess - shift_table - shift_query
        return shift_table + (rest + 1) // 2, shift_query + rest // 2
    if bound >= FLOAT32_SMALL_EXPONENT:
        return 0, 0
    deficit = -bound  # lift the bound to 2**0: the smaller side first, then both
    lift_table = min(deficit, max(0, e_query - e_table))
    lift_query = min(deficit - lift_table, max(0, e_table - e_query))
    rest = deficit - lift_table - lift_query
    return -(lift_table + (rest + 1) // 2), -(lift_query + rest // 2)


def float32_where_it_fits(scores: np.ndarray) -> np.ndarray:
    """Rescaled (float64) scores back in float32 where every finite non-zero one is a
    normal float32; float64 when one lies beyond float32's range, above (huge tables)
    or below it (tiny ones: float32 would round their scores to subnormals or 0)."""
    if scores.dtype == np.float32:
        return scores
    finite = np.abs(scores[np.isfinite(scores) & (scores != 0)])
    f32 = np.finfo(np.float32)
    if finite.size == 0 or (finite.max() <= f32.max and finite.min() >= f32.tiny):
        return scores.astype(np.float32)
    return scores


def in_float32_range(table: np.ndarray, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """``table`` and ``queries`` times the powers of two of :func:`overflow_shifts` (copies
    only when shifted) and the exponent to scale their inner products back by: the same
    rankings, for a search (an approximate index) that cannot shift the scores itself."""
    table_peak, query_peak = _peak(table), _peak(queries)
    if not (math.isfinite(table_peak) and math.isfinite(query_peak)):
        return table, queries, 0  # a non-finite entry is the caller's to refuse, not to scale
    shift_table, shift_query = overflow_shifts(table_peak, query_peak, table.shape[1])
    return _shifted(table, shift_table), _shifted(queries, shift_query), shift_table + shift_query


def _shifted(vectors: np.ndarray, shift: int) -> np.ndarray:
    """``vectors`` divided by 2**shift (exact: powers of two), the array itself for 0."""
    return np.ldexp(vectors, -shift) if shift else vectors


def _peak(vectors: np.ndarray) -> float:
    """max |x| over a matrix, without a full-size temporary (0 for an empty one)."""
    if vectors.size == 0:
        return 0.0
    return float(max(vectors.max(), -vectors.min()))


def _search_shard(
    queries: np.ndarray, shard: np.ndarray, k: int, query_peak: float, advance: Advance, block: int,
    threads: int | None,
) -> TopK:
    """One shard's exact top-k (rows local to it), scaled by powers of two first when
    its inner products could overflow or underflow float32 (:func:`overflow_shifts`);
    the scores are scaled back in float64 so shards still merge on one scale."""
    shift_table, shift_query = overflow_shifts(_peak(shard), query_peak, queries.shape[1]) if query_peak else (0, 0)
    if not (shift_table or shift_query):
        return _search_blocks(queries, shard, k, advance, block, threads)
    scores, local = _search_blocks(_shifted(queries, shift_query), _shifted(shard, shift_table), k, advance, block,
                                   threads)  # fmt: skip
    return np.ldexp(scores.astype(np.float64), shift_table + shift_query), local


def sharded_topk(
    query_vectors: np.ndarray,
    shards: Iterable[np.ndarray],
    k: int,
    normalise: bool,
    progress: Progress = SILENT,
    description: str = "exact search",
    block: int = QUERY_BLOCK,
    check_finite: bool = True,
    threads: int | None = None,
) -> TopK:
    """Exact top-k by inner product over a table given as consecutive row shards.

    Each shard (rows of the table, in order) is searched on its own and merged into the
    running lists (:func:`merge_topk`), so only one shard is in memory at a time; the
    result equals one search over the whole table. With ``normalise`` queries and rows
    are L2-normalised (cosine) and zero-norm rows are never returned. Returns
    ``(scores, rows int64)`` of shape (n_queries, k) under the :func:`select_topk`
    contract. A shard with NaN/inf raises :class:`EmbeddingTableError` unless
    ``check_finite`` is False (caller checked). ``threads`` caps the search threads
    (default: FAISS's OpenMP thread count).

    Extreme values: when dim x max|x| x max|q| could overflow float32 (entries near
    ±1e38) or is so small that the products underflow it (entries near 1e-25), the
    shard and/or the queries are rescaled exactly (:func:`_search_shard`). Scores are
    float32, or float64 when some score lies beyond float32's range (above or below).
    """
    queries = np.ascontiguousarray(query_vectors, dtype=np.float32)
    if queries.ndim != 2:
        raise QueryError(f"query vectors must be a 2-D matrix, got shape {queries.shape}")
    if normalise:
        queries, _ = l2_normalise(queries)
    n = queries.shape[0]
    # Normalised vectors have |x| <= 1, so only dot product needs the overflow check.
    query_peak = 0.0 if normalise else _peak(queries)
    best: TopK = (np.full((n, 0), -np.inf, dtype=np.float32), np.full((n, 0), -1, dtype=np.int64))
    total = n * len(shards) if isinstance(shards, Sequence) else None
    offset = 0
    with progress.track(description, total) as advance:
        for shard in shards:
            shard = np.ascontiguousarray(shard, dtype=np.float32)
            if shard.ndim != 2 or shard.shape[1] != queries.shape[1]:
                raise EmbeddingTableError(
                    f"table shard at row {offset} has shape {shard.shape}; expected "
                    f"(rows, {queries.shape[1]})"
                )
            if check_finite:
                require_finite(shard, "the item table", offset, EmbeddingTableError)
            n_rows = int(shard.shape[0])
            kept: np.ndarray | None = None
            if normalise:
                shard, kept = directions(shard)
            if shard.shape[0] > 0:
                scores, local = _search_shard(queries, shard, k, query_peak, advance, block, threads)
                filled = local >= 0
                local_rows = kept[np.where(filled, local, 0)] if kept is not None else local
                rows = np.where(filled, local_rows + offset, -1)
                best = merge_topk(best, (np.where(filled, scores, -np.inf).astype(scores.dtype), rows), k)
            else:
                advance(n)
            offset += n_rows
    best_scores, best_rows = best
    if best_rows.shape[1] < k:  # no shard at all, or all rows empty
        pad = k - best_rows.shape[1]
        best_scores = np.pad(best_scores, ((0, 0), (0, pad)), constant_values=-np.inf)
        best_rows = np.pad(best_rows, ((0, 0), (0, pad)), constant_values=-1)
    return float32_where_it_fits(best_scores), best_rows
