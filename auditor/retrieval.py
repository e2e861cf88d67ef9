"""Retrieval skew: the same queries served by dot product, by cosine and a popular list.

Dot-product serving multiplies every score by the item norm (SCIENCE.md §4); cosine
serving removes it. :func:`measure_retrieval` runs both searches with FAISS, builds the
most-popular reference list, and measures each set of top-K lists with
:class:`auditor.metrics.exposure.ExposureMeasures`.

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
* Ties are broken deterministically: higher score first, then lower row. FAISS keeps the
  lowest rows among tied scores, so per-shard results merge into exactly the result of
  one search over the whole table (:func:`sharded_topk`).
* Zero vectors: a zero query scores every item 0, so its list would be arbitrary; such
  queries are dropped (counted and warned). A zero-norm item has no direction, so cosine
  never serves it (it is left out of the cosine search); dot still scores it 0.
* Memory: when the table and its normalised copy exceed the ceiling (``--max-memory``,
  else half the available memory) exact search runs over row shards that each fit it,
  and ``--index auto`` stays exact (an approximate index would hold the whole table).
  With ``--scheduler`` the shards are searched on a Dask cluster (:mod:`auditor.shards`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import faiss
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import scipy.sparse
from threadpoolctl import threadpool_limits

from auditor.config import AuditConfig
from auditor.errors import EmbeddingTableError, InputError, QueryError
from auditor.loading.tables import MIN_BLOCK_ROWS, block_rows, check_memory_ceiling, memory_budget
from auditor.metrics.exposure import DEFINITIONS, ExposureMeasures, Slots, overlap, shared_counts
from auditor.model import InteractionPairs, ItemStats, ModelBundle
from auditor.progress import SILENT, Advance, Progress
from auditor.result import CutoffMeasures, Retrieval

QUERY_BLOCK = 4096
"""Queries per FAISS call: FAISS's own BLAS query block, so blocking costs no extra pass."""

EXACT_FLOP_LIMIT = 4e12
"""``--index auto`` searches exactly while one scoring costs at most this many FLOPs
(2 x n_items x n_queries x dim). At the 50-100 GFLOP/s two cores reach with K=100 that
is under about a minute per scoring; 1M items x 10,000 queries x 64 dims (1.3e12) is
still exact, 10M items x 10,000 x 128 (2.6e13) goes approximate (IVF)."""

MIN_ROWS_PER_THREAD = 65_536
"""Exact search splits the table across threads only when each slice has this many rows."""

RECALL_SAMPLE = 1000
"""Queries (seeded sample) on which an approximate index's recall is measured."""

HNSW_M = 32
HNSW_EF_CONSTRUCTION = 80


@dataclass
class RetrievalOutcome:
    """What :func:`measure_retrieval` hands to the audit."""

    retrieval: Retrieval
    exposure: dict[str, dict[int, np.ndarray]]
    """scoring ("dot", "cosine", "popular") -> K -> exposure count per item row (int64)."""
    warnings: list[str] = field(default_factory=list)


@contextmanager
def blas_path() -> Iterator[None]:
    """Force FAISS's BLAS path for exact search; restore the global settings afterwards.

    Also keeps BLAS to one thread meanwhile: FAISS calls sgemm on small blocks (4096
    queries x 1024 items), so a threaded BLAS forks and joins per block; on shared cores
    that dominated (1M x 32 dims x 1,000 queries, K=10: 13.1 s with threaded BLAS, 0.8 s
    with one thread, 6.3 s on FAISS's default non-BLAS path). :func:`_search_blocks`
    gets its parallelism from table slices instead.
    """
    previous = faiss.cvar.distance_compute_blas_threshold
    faiss.cvar.distance_compute_blas_threshold = 0
    try:
        with threadpool_limits(limits=1, user_api="blas"):
            yield
    finally:
        faiss.cvar.distance_compute_blas_threshold = previous


def l2_normalise(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Float32 L2-normalised copy of ``vectors`` and the mask of non-zero rows.

    Zero rows stay zero (no division by zero, no NaN).
    """
    vectors = np.asarray(vectors, dtype=np.float32)
    # einsum gives row norms without a full-size temporary; zero rows get factor 0.
    norms = np.sqrt(np.einsum("ij,ij->i", vectors, vectors).astype(np.float64))
    nonzero = norms > 0
    scale = np.divide(1.0, norms, out=np.zeros_like(norms), where=nonzero).astype(np.float32)
    return vectors * scale[:, None], nonzero


def _sorted_topk(scores: np.ndarray, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The first k of each row by score descending, then row ascending; empty slots last."""
    empty = rows < 0
    primary = np.where(empty, np.inf, -scores.astype(np.float64))
    secondary = np.where(empty, np.iinfo(np.int64).max, rows)
    order = np.lexsort((secondary, primary), axis=-1)[:, :k]
    top_scores = np.take_along_axis(scores, order, axis=1)
    top_rows = np.take_along_axis(rows, order, axis=1)
    top_scores[top_rows < 0] = -np.inf
    return top_scores, top_rows


def _check_finite(vectors: np.ndarray, what: str, offset: int, error: type[InputError]) -> None:
    finite = np.isfinite(vectors).all(axis=1)
    if not finite.all():
        bad = np.flatnonzero(~finite)
        raise error(
            f"{what} holds NaN or infinite values ({bad.size} rows, first at row "
            f"{int(bad[0]) + offset}); fix or drop those rows before auditing"
        )


def _knn_one_thread(queries: np.ndarray, table: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``faiss.knn`` by inner product with FAISS (and OpenMP-built BLAS) on this thread only."""
    # The OpenMP thread count is per calling thread, so this leaves other threads alone.
    faiss.omp_set_num_threads(1)
    return faiss.knn(queries, table, k, faiss.METRIC_INNER_PRODUCT)


def _search_blocks(
    queries: np.ndarray,
    table: np.ndarray,
    k: int,
    advance: Advance,
    block: int,
    threads: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact inner-product top-k of ``queries`` against ``table`` (rows local to it).

    The table is split into one slice per core, each searched by its own thread with
    FAISS single-threaded (FAISS releases the GIL), and the per-slice lists are merged
    (ties: lower row first, as in one search). Compared with FAISS's own threading this
    drops a fork/join per 1024-item block, which on shared cores cost up to 16x.
    """
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
                scores[start:stop], rows[start:stop] = _sorted_topk(
                    np.concatenate([d for d, _ in found], axis=1),
                    np.concatenate(merged_rows, axis=1),
                    k,
                )
            advance(stop - start)
    return scores, rows


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
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k by inner product over a table given as consecutive row shards.

    Each shard (rows of the table, in order) is searched on its own and the running
    top-k lists are merged, so only one shard is in memory at a time; the result equals
    one search over the whole table (ties: higher score, then lower row). With
    ``normalise`` queries and rows are L2-normalised (cosine) and zero-norm rows are never
    returned. Returns ``(scores float32, rows int64)`` of shape (n_queries, k), sorted;
    slots no row could fill hold row -1 and score -inf. A shard with NaN/inf raises
    :class:`EmbeddingTableError` unless ``check_finite`` is False (caller checked).
    ``threads`` caps the search threads (default: FAISS's OpenMP thread count).
    """
    queries = np.ascontiguousarray(query_vectors, dtype=np.float32)
    if queries.ndim != 2:
        raise QueryError(f"query vectors must be a 2-D matrix, got shape {queries.shape}")
    if normalise:
        queries, _ = l2_normalise(queries)
    n = queries.shape[0]
    best_scores = np.full((n, 0), -np.inf, dtype=np.float32)
    best_rows = np.full((n, 0), -1, dtype=np.int64)
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
                _check_finite(shard, "the item table", offset, EmbeddingTableError)
            n_rows = int(shard.shape[0])
            kept: np.ndarray | None = None
            if normalise:
                shard, nonzero = l2_normalise(shard)
                if not nonzero.all():
                    kept = np.flatnonzero(nonzero)
                    shard = np.ascontiguousarray(shard[kept])
            if shard.shape[0] > 0:
                scores, local = _search_blocks(queries, shard, k, advance, block, threads)
                filled = local >= 0
                local_rows = kept[np.where(filled, local, 0)] if kept is not None else local
                rows = np.where(filled, local_rows + offset, -1)
                scores = np.where(filled, scores, -np.inf).astype(np.float32)
                best_scores, best_rows = _sorted_topk(
                    np.concatenate([best_scores, scores], axis=1),
                    np.concatenate([best_rows, rows], axis=1),
                    k,
                )
            else:
                advance(n)
            offset += n_rows
    if best_rows.shape[1] < k:  # no shard at all, or all rows empty
        pad = k - best_rows.shape[1]
        best_scores = np.pad(best_scores, ((0, 0), (0, pad)), constant_values=-np.inf)
        best_rows = np.pad(best_rows, ((0, 0), (0, pad)), constant_values=-1)
    return best_scores, best_rows


def table_shards(table: np.ndarray, rows_per_shard: int) -> list[np.ndarray]:
    """Consecutive row slices of ``table`` (views; a memory-mapped table stays on disk)."""
    if rows_per_shard < 1:
        raise ValueError(f"rows_per_shard must be positive, got {rows_per_shard}")
    starts = range(0, table.shape[0], rows_per_shard)
    return [table[start : start + rows_per_shard] for start in starts]


def parquet_shards(path: Path, column: str, rows_per_shard: int = 65_536) -> Iterator[np.ndarray]:
    """Float32 row shards of a list/fixed-size-list vector column of a Parquet file.

    Reads record batches, so a table larger than memory can feed :func:`sharded_topk`.
    """
    reader = pq.ParquetFile(path)
    for batch in reader.iter_batches(batch_size=rows_per_shard, columns=[column]):
        yield _vector_column(batch.column(0), f"{path} column {column!r}", EmbeddingTableError)


def _vector_column(array: pa.Array, what: str, error: type[InputError]) -> np.ndarray:
    """A list/fixed-size-list float Arrow column as a (rows, dim) float32 matrix."""
    if array.null_count:
        raise error(f"{what} has {array.null_count} null vectors")
    if len(array) == 0:
        return np.zeros((0, 0), dtype=np.float32)
    if pa.types.is_fixed_size_list(array.type):
        dim = array.type.list_size
    else:
        lengths = np.asarray(array.value_lengths())
        dim = int(lengths[0])
        if (lengths != dim).any():
            bad = int(np.flatnonzero(lengths != dim)[0])
            raise error(
                f"{what}: vectors differ in length ({dim} at row 0, {lengths[bad]} at row {bad})"
            )
    values = array.flatten()
    if values.null_count:
        raise error(f"{what} has null values inside vectors")
    return np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.float32).reshape(-1, dim)


def _is_vector_type(type_: pa.DataType) -> bool:
    types = pa.types
    if not (types.is_list(type_) or types.is_large_list(type_) or types.is_fixed_size_list(type_)):
        return False
    return bool(types.is_floating(type_.value_type) or types.is_integer(type_.value_type))


def load_query_file(path: Path) -> np.ndarray:
    """Query vectors from a ``.npy`` (2-D) or Parquet file (one list-of-float column)."""
    if not path.exists():
        raise QueryError(f"query file {path} does not exist")
    suffix = path.suffix.lower()
    if suffix == ".npy":
        try:
            vectors = np.load(path, mmap_mode="r", allow_pickle=False)
        except (ValueError, EOFError, OSError) as exc:  # EOFError: empty or cut-off file
            detail = "the file is empty (0 bytes)" if path.is_file() and path.stat().st_size == 0 else exc
            raise QueryError(f"cannot read query vectors from {path}: {detail}") from exc
        if vectors.ndim != 2:
            raise QueryError(
                f"{path} holds an array of shape {vectors.shape}; expected (n_queries, dim)"
            )
        if not np.issubdtype(vectors.dtype, np.number) or np.iscomplexobj(vectors):
            raise QueryError(f"{path} holds {vectors.dtype} values; expected floats")
        return vectors
    if suffix in (".parquet", ".pq"):
        try:
            reader = pq.ParquetFile(path)
        except (pa.ArrowInvalid, OSError) as exc:
            raise QueryError(f"cannot read {path} as Parquet: {exc}") from exc
        columns = [f.name for f in reader.schema_arrow if _is_vector_type(f.type)]
        if len(columns) != 1:
            found = ", ".join(columns) if columns else "none"
            raise QueryError(
                f"{path} must hold exactly one list-of-float column of query vectors; found {found}"
            )
        parts = [
            _vector_column(batch.column(0), f"{path} column {columns[0]!r}", QueryError)
            for batch in reader.iter_batches(columns=columns)
        ]
        parts = [p for p in parts if p.size]
        if not parts:
            raise QueryError(f"{path} holds no query vectors")
        if len({p.shape[1] for p in parts}) > 1:
            raise QueryError(f"{path}: query vectors differ in length across row groups")
        return np.concatenate(parts)
    raise QueryError(
        f"--queries must be users, history, or a path to a .npy or .parquet file; got {str(path)!r}"
    )


def history_queries(
    pairs: InteractionPairs, table: np.ndarray, users: np.ndarray | None = None
) -> np.ndarray:
    """Per-user mean of the item vectors in each user's history (one sparse matmul).

    ``users`` selects dense user indices (all users with history when None); repeated
    interactions count as often as they occur.
    """
    n_users = int(pairs.user_index.max()) + 1 if len(pairs) else 0
    if users is None:
        users = np.flatnonzero(np.bincount(pairs.user_index, minlength=n_users) > 0)
    position = np.full(max(n_users, 1), -1, dtype=np.int64)
    position[users] = np.arange(users.shape[0])
    selected = position[pairs.user_index]
    keep = selected >= 0
    user_pos, item_rows = selected[keep], pairs.item_rows[keep]
    counts = np.bincount(user_pos, minlength=users.shape[0])
    history = scipy.sparse.csr_matrix(
        (np.ones(user_pos.shape[0], dtype=np.float32), (user_pos, item_rows)),
        shape=(users.shape[0], table.shape[0]),
    )
    sums = np.asarray(history @ np.asarray(table, dtype=np.float32), dtype=np.float32)
    return sums / np.maximum(counts, 1)[:, None].astype(np.float32)


def _sample(n: int, max_n: int | None, seed: int) -> np.ndarray | None:
    """Sorted seeded sample of max_n of n indices without replacement; None: keep all."""
    if max_n is None or n <= max_n:
        return None
    return np.sort(np.random.default_rng(seed).choice(n, size=max_n, replace=False))


def _queries(
    bundle: ModelBundle, config: AuditConfig, pairs: InteractionPairs | None
) -> tuple[np.ndarray, str]:
    """The query matrix and a description of where it came from."""
    source = config.queries
    if source == "auto":
        if bundle.user_table is not None:
            source = "users"
        elif pairs is not None:
            source = "history"
        else:
            raise QueryError(
                "retrieval needs queries: the model has no user table, so pass --queries PATH "
                "(a .npy or Parquet file of query vectors) or --interactions (history queries)"
            )
    if source == "users":
        if bundle.user_table is None:
            raise QueryError(
                f"--queries users: {bundle.source} has no user table (use --user-key, "
                "--queries history with --interactions, or --queries PATH)"
            )
        table, what = bundle.user_table, f"user table {bundle.user_key or ''}".strip()
    elif source == "history":
        if pairs is None or len(pairs) == 0:
            raise QueryError(
                "--queries history needs --interactions with at least one mapped interaction"
            )
        n_users = int(pairs.user_index.max()) + 1
        eligible = np.flatnonzero(np.bincount(pairs.user_index, minlength=n_users) > 0)
        picked = _sample(eligible.shape[0], config.max_queries, config.seed)
        users = eligible if picked is None else eligible[picked]
        vectors = history_queries(pairs, bundle.item_table, users)
        sampled = "" if picked is None else f", {users.shape[0]} sampled with seed {config.seed}"
        described = f"{eligible.shape[0]} users{sampled}"
        return vectors, f"history: mean item vector of each user's history ({described})"
    else:
        path = Path(source)
        table, what = load_query_file(path), f"query file {path}"
    if table.ndim != 2 or table.shape[0] == 0:
        raise QueryError(f"{what} holds no query vectors (shape {table.shape})")
    if table.shape[1] != bundle.dim:
        raise QueryError(
            f"{what} has dimension {table.shape[1]} but the item table has dimension {bundle.dim}"
        )
    picked = _sample(table.shape[0], config.max_queries, config.seed)
    vectors = np.asarray(table if picked is None else table[picked], dtype=np.float32)
    if not np.isfinite(vectors).all():
        bad = int(np.flatnonzero(~np.isfinite(vectors).all(axis=1))[0])
        row = bad if picked is None else int(picked[bad])
        raise QueryError(f"{what} holds NaN or infinite values (first at row {row})")
    sampled = "" if picked is None else f", {vectors.shape[0]} sampled with seed {config.seed}"
    kind = "users" if source == "users" else "file"
    return vectors, f"{kind}: {what} ({table.shape[0]} rows{sampled})"


def choose_index(kind: str, n_items: int, n_queries: int, dim: int) -> str:
    """The index ``--index`` means here: ``auto`` is exact up to :data:`EXACT_FLOP_LIMIT`."""
    if kind != "auto":
        return kind
    return "exact" if 2.0 * n_items * n_queries * dim <= EXACT_FLOP_LIMIT else "ivf"


def _approximate_index(
    kind: str, table: np.ndarray, k: int, seed: int
) -> tuple[faiss.Index, dict[str, int]]:
    """An IVF or HNSW inner-product index over ``table`` and its settings."""
    n, dim = table.shape
    if kind == "ivf":
        # ~4 sqrt(n) lists with >= 39 training points each (FAISS's minimum per centroid);
        # probing 1/8 of them: MIPS clusters are coarse (norms vary), so probe generously.
        nlist = int(min(max(1, round(4 * math.sqrt(n))), max(1, n // 39)))
        nprobe = int(min(nlist, max(1, math.ceil(nlist / 8))))
        quantizer = faiss.IndexFlatIP(dim)
        index = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
        train_rows = _sample(n, 64 * nlist, seed)
        index.train(table if train_rows is None else np.ascontiguousarray(table[train_rows]))
        index.add(table)
        index.nprobe = nprobe
        return index, {"nlist": nlist, "nprobe": nprobe}
    if kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, HNSW_M, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
        index.add(table)
        ef_search = max(128, 2 * k)
        index.hnsw.efSearch = ef_search
        return index, {"M": HNSW_M, "efConstruction": HNSW_EF_CONSTRUCTION, "efSearch": ef_search}
    raise InputError(f"unknown index kind {kind!r}")


def approximate_topk(
    queries: np.ndarray,
    table: np.ndarray,
    k: int,
    normalise: bool,
    kind: str,
    seed: int = 0,
    progress: Progress = SILENT,
    description: str = "approximate search",
    check_finite: bool = True,
) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    """Top-k by an approximate FAISS index (``ivf`` or ``hnsw``), same layout as exact.

    Returns (scores, rows, index settings); zero-norm rows are left out when normalising.
    """
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    table = np.ascontiguousarray(table, dtype=np.float32)
    if check_finite:
        _check_finite(table, "the item table", 0, EmbeddingTableError)
    kept: np.ndarray | None = None
    if normalise:
        queries, _ = l2_normalise(queries)
        table, nonzero = l2_normalise(table)
        if not nonzero.all():
            kept = np.flatnonzero(nonzero)
            table = np.ascontiguousarray(table[kept])
    n = queries.shape[0]
    scores = np.full((n, k), -np.inf, dtype=np.float32)
    rows = np.full((n, k), -1, dtype=np.int64)
    if table.shape[0] == 0:
        return scores, rows, {}
    index, settings = _approximate_index(kind, table, k, seed)
    with progress.track(description, n) as advance:
        for start in range(0, n, QUERY_BLOCK):
            stop = min(start + QUERY_BLOCK, n)
            d, i = index.search(queries[start:stop], k)
            scores[start:stop], rows[start:stop] = d, i
            advance(stop - start)
    filled = rows >= 0
    if kept is not None:
        rows = np.where(filled, kept[np.where(filled, rows, 0)], -1)
    scores = np.where(filled, scores, -np.inf).astype(np.float32)
    scores, rows = _sorted_topk(scores, rows, k)
    return scores, rows, settings


def recall_at(approx_rows: np.ndarray, exact_rows: np.ndarray) -> float:
    """Mean over queries of |approximate ∩ exact| / |exact| (filled slots only)."""
    if exact_rows.shape[0] == 0:
        return math.nan
    expected = np.maximum((exact_rows >= 0).sum(axis=1), 1)
    return float((shared_counts(approx_rows, exact_rows) / expected).mean())


def _popularity(stats: ItemStats, kind: str, n_items: int) -> np.ndarray:
    if stats.frequencies.shape[0] != n_items:
        raise InputError(
            f"item statistics cover {stats.frequencies.shape[0]} items but the item table has "
            f"{n_items} rows"
        )
    if kind == "users":
        if stats.user_counts is None:
            raise InputError(
                "--popularity users needs distinct users per item, but the interaction log has "
                "no user column (pass --user-col, or use --popularity interactions)"
            )
        return np.asarray(stats.user_counts, dtype=np.int64)
    return np.asarray(stats.frequencies, dtype=np.int64)


def measure_retrieval(
    bundle: ModelBundle,
    stats: ItemStats,
    config: AuditConfig,
    pairs: InteractionPairs | None,
    progress: Progress = SILENT,
) -> RetrievalOutcome:
    """Retrieve the same queries by dot product, by cosine and by popularity; measure each.

    Queries follow ``config.queries`` (see CLI.md); cut-offs ``config.ks`` (clamped to the
    catalogue with a warning); index ``config.index``. Raises :class:`QueryError` when
    no queries can be formed, :class:`InputError` for ``--popularity users`` without user
    counts.
    """
    warnings: list[str] = []
    n_items, dim = bundle.n_items, bundle.dim
    popularity = _popularity(stats, config.popularity, n_items)
    measures = ExposureMeasures(popularity, stats.user_counts, stats.n_users)

    queries, query_source = _queries(bundle, config, pairs)
    zero = ~np.any(queries, axis=1)
    n_zero = int(zero.sum())
    if n_zero:
        if n_zero == queries.shape[0]:
            raise QueryError(f"all {n_zero} query vectors are zero; nothing can be retrieved")
        warnings.append(
            f"{n_zero} of {queries.shape[0]} query vectors are zero (they score every item 0) "
            "and were left out of retrieval"
        )
        queries = np.ascontiguousarray(queries[~zero])
    n_queries = int(queries.shape[0])

    ks = sorted({min(k, n_items) for k in config.ks})
    for k in sorted(set(config.ks)):
        if k > n_items:
            warnings.append(
                f"cut-off K={k} exceeds the catalogue ({n_items} items); clamped to {n_items}"
            )
    k_max = ks[-1]

    table = bundle.item_table
    check_memory_ceiling(config.max_memory, dim, "the item table", n_items)
    # One pass in slices (a memory-mapped table is never loaded whole): NaN/inf rows are
    # an error, zero rows are counted; the searches below then skip their own checks.
    n_zero_items = 0
    step = block_rows(dim, bytes_per_value=1, max_memory=config.max_memory)
    for start in range(0, n_items, step):
        part = np.asarray(table[start : start + step])
        _check_finite(part, "the item table", start, EmbeddingTableError)
        n_zero_items += int((~np.any(part, axis=1)).sum())
    if n_zero_items:
        warnings.append(
            f"{n_zero_items} item vectors are zero: cosine never serves them (no direction), "
            "dot scores them 0"
        )

    index_kind = choose_index(config.index, n_items, n_queries, dim)
    budget = memory_budget(config.max_memory)
    over_budget = budget is not None and 2 * n_items * dim * 4 > budget
    if index_kind != "exact" and over_budget:
        if config.index == "auto":
            index_kind = "exact"
        elif config.max_memory is not None:
            raise InputError(
                f"--index {index_kind} builds an in-memory index of the whole item table and its "
                f"normalised copy ({2 * n_items * dim * 4:,} bytes), more than --max-memory "
                f"({config.max_memory:,} bytes); use --index exact (searched in shards) or a "
                "larger --max-memory"
            )
    popularity_kind = (
        "distinct training users" if config.popularity == "users" else "training interactions"
    )
    definitions = dict(DEFINITIONS)
    definitions["popularity"] = (
        f"popularity: {popularity_kind} per item (head share, arp, aplt, most-popular list)"
    )
    definitions["queries"] = f"queries: {query_source}"
    definitions["ties"] = (
        "ties: higher score first, then lower item row; popular list: by popularity, then row"
    )
    definitions["zero_vectors"] = (
        "zero vectors: zero queries are dropped; zero-norm items are never served by cosine"
    )
    recall: dict[int, float] | None = None
    if index_kind == "exact":
        dot_rows, cos_rows, note = _exact_lists(queries, table, k_max, config, progress, bundle)
        if config.scheduler and "shards" not in note:
            warnings.append(
                f"--scheduler {config.scheduler} was not used: the table fits in the memory "
                "ceiling, so it was searched here in one piece (lower --max-memory to shard it)"
            )
    else:
        dot_rows, cos_rows, note, recall, recall_note = _approximate_lists(
            queries, table, index_kind, ks, config, progress
        )
        definitions["recall"] = recall_note
    definitions["index"] = note
    if config.index == "auto" and over_budget and choose_index("auto", n_items, n_queries, dim) != "exact":
        definitions["index"] += (
            "; auto chose exact: an approximate index would hold the whole table, which "
            "exceeds the memory ceiling"
        )
    elif config.index == "auto":
        relation = "<=" if index_kind == "exact" else ">"
        definitions["index"] += (
            f"; auto chose {index_kind}: 2*n_items*n_queries*dim {relation} {EXACT_FLOP_LIMIT:.0e}"
        )

    popular_rows = measures.popular_list(k_max)
    at: dict[int, CutoffMeasures] = {}
    exposure: dict[str, dict[int, np.ndarray]] = {"dot": {}, "cosine": {}, "popular": {}}
    with progress.track("retrieval: exposure measures", len(ks)) as advance:
        for k in ks:
            dot_k, cos_k = Slots(dot_rows[:, :k], n_items), Slots(cos_rows[:, :k], n_items)
            pop_k = Slots(np.broadcast_to(popular_rows[:k], (n_queries, k)), n_items)
            at[k] = CutoffMeasures(
                dot=measures.measure(dot_k),
                cosine=measures.measure(cos_k),
                popular=measures.measure(pop_k),
                overlap_dot_cosine=overlap(dot_k.lists, cos_k.lists),
            )
            exposure["dot"][k] = dot_k.counts
            exposure["cosine"][k] = cos_k.counts
            exposure["popular"][k] = pop_k.counts
            advance(1)

    retrieval = Retrieval(
        n_queries=n_queries,
        index=index_kind,
        at=at,
        recall=recall,
        queries=query_source,
        popularity=config.popularity,
        n_zero_queries=n_zero,
        definitions=definitions,
    )
    return RetrievalOutcome(retrieval=retrieval, exposure=exposure, warnings=warnings)


def _exact_lists(
    queries: np.ndarray,
    table: np.ndarray,
    k: int,
    config: AuditConfig,
    progress: Progress,
    bundle: ModelBundle | None = None,
) -> tuple[np.ndarray, np.ndarray, str]:
    """Exact dot and cosine top-k rows, sharded when the table and its normalised copy
    exceed the memory ceiling (``config.max_memory``, else half the available memory);
    with ``config.scheduler`` (and ``bundle``) the shards run on that Dask cluster."""
    n_items, dim = table.shape
    shards: list[np.ndarray] = [table]
    budget = memory_budget(config.max_memory)
    if budget is not None and 2 * n_items * dim * 4 > budget:
        # A shard (when read from disk) and its normalised copy fit in the budget.
        rows_per_shard = max(MIN_BLOCK_ROWS, budget // (2 * 4 * dim))
        shards = table_shards(table, rows_per_shard)
    merged = f", {len(shards)} shards merged" if len(shards) > 1 else ""
    # Where the shards ran is left out of the note: a Dask run reports what a local one does.
    note = f"index: exact (FAISS flat inner product, BLAS path{merged})"
    if config.scheduler and bundle is not None and len(shards) > 1:
        from auditor.shards import dask_sharded_topk

        bounds = np.cumsum([0] + [shard.shape[0] for shard in shards]).tolist()
        (_, dot_rows), (_, cos_rows) = dask_sharded_topk(
            queries, bundle, bounds, k, config.scheduler, progress
        )
        return dot_rows, cos_rows, note
    _, dot_rows = sharded_topk(
        queries, shards, k, False, progress, "retrieval: dot-product search", check_finite=False
    )
    _, cos_rows = sharded_topk(
        queries, shards, k, True, progress, "retrieval: cosine search", check_finite=False
    )
    return dot_rows, cos_rows, note


def _approximate_lists(
    queries: np.ndarray,
    table: np.ndarray,
    kind: str,
    ks: list[int],
    config: AuditConfig,
    progress: Progress,
) -> tuple[np.ndarray, np.ndarray, str, dict[int, float], str]:
    """Approximate dot and cosine top-k rows, with recall@K against exact search."""
    k_max = ks[-1]
    table32 = np.ascontiguousarray(table, dtype=np.float32)
    lists: dict[bool, np.ndarray] = {}
    exact: dict[bool, np.ndarray] = {}
    sample = _sample(queries.shape[0], RECALL_SAMPLE, config.seed + 1)
    sample_idx = np.arange(queries.shape[0]) if sample is None else sample
    settings: dict[str, int] = {}
    for normalise, name in ((False, "dot-product"), (True, "cosine")):
        _, lists[normalise], settings = approximate_topk(
            queries, table32, k_max, normalise, kind, config.seed, progress,
            f"retrieval: {name} search ({kind})", check_finite=False,
        )  # fmt: skip
        _, exact[normalise] = sharded_topk(
            np.ascontiguousarray(queries[sample_idx]), [table32], k_max, normalise, progress,
            f"retrieval: recall check ({name})", check_finite=False,
        )  # fmt: skip
    recall: dict[int, float] = {}
    per_k: list[str] = []
    for k in ks:
        r_dot = recall_at(lists[False][sample_idx, :k], exact[False][:, :k])
        r_cos = recall_at(lists[True][sample_idx, :k], exact[True][:, :k])
        recall[k] = min(r_dot, r_cos)
        per_k.append(f"@{k}: dot {r_dot:.4f}, cosine {r_cos:.4f}")
    described = ", ".join(f"{name}={value}" for name, value in settings.items())
    note = (
        f"index: {kind} (FAISS, inner product; {described}; the cosine index holds the "
        "normalised vectors with the same settings)"
    )
    recall_note = (
        f"recall@K: mean |approximate ∩ exact| / K over {sample_idx.shape[0]} sampled queries "
        f"(seed {config.seed + 1}); the lower of dot and cosine is reported ({'; '.join(per_k)})"
    )
    return lists[False], lists[True], note, recall, recall_note
