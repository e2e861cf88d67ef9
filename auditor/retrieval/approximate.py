"""Approximate top-K (FAISS IVF and HNSW indexes) and its recall against exact search.

Used when one exact scoring would cost too much (``index`` setting ``auto``, see
:func:`auditor.retrieval.measure.choose_index`) or when asked for; the lists are put in
the same order as exact ones (:func:`~auditor.retrieval.search.select_topk`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from auditor.errors import EmbeddingTableError, InputError, setting
from auditor.sections import APPROXIMATE_ERROR
from auditor.sampling import sample_indices
from auditor.metrics.exposure import HeadShare, shared_counts
from auditor.progress import SILENT, Progress
from auditor.retrieval.search import (
    QUERY_BLOCK, directions, float32_where_it_fits, in_float32_range, l2_normalise, require_finite, select_topk,
)

if TYPE_CHECKING:
    import faiss

HNSW_M = 32
HNSW_EF_CONSTRUCTION = 80


def ivf_lists(n_items: int) -> tuple[int, int]:
    """IVF's (nlist, nprobe) for a table of ``n_items`` rows."""
    # ~4 sqrt(n) lists with >= 39 training points each (FAISS's minimum per centroid);
    # probing 1/8 of them: MIPS clusters are coarse (norms vary), so probe generously.
    nlist = int(min(max(1, round(4 * math.sqrt(n_items))), max(1, n_items // 39)))
    return nlist, int(min(nlist, max(1, math.ceil(nlist / 8))))


BUILD_QUERIES = {"ivf": 14_000, "hnsw": 34_000}
"""One index build over :data:`BUILD_REFERENCE_ITEMS` items costs at least about as much
CPU as exact search of this many queries over the same table (all their scorings in one
pass, as the recall check times them). From QA's runs on a 2-core box (100k x 32, 2,000
queries): IVF's two builds and its search took 17.1 s of CPU and HNSW's 38.6 s, against
0.55 s of exact search per 1,000 queries (about 31,000 and 70,000 queries' worth); at
300k x 32, 58 s and 199 s against 1 s per 1,000 (about 27,500 and 98,000 per build)."""
BUILD_REFERENCE_ITEMS = 100_000
PREFLIGHT_MIN_FLOPS = 2e10
"""Estimated costs below this (about a second of two cores) are not said before the build."""


def build_queries(kind: str, n_items: int) -> float:
    """One build's CPU in exact searches of one query (:data:`BUILD_QUERIES`), scaled from
    100k items as the items below it and as their square root above it: the lower of the
    growths measured (100k to 300k items: IVF about x1.9, HNSW about x2.9), so a floor."""
    ratio = n_items / BUILD_REFERENCE_ITEMS
    return BUILD_QUERIES[kind] * min(ratio, math.sqrt(ratio))


def index_cost(kind: str, n_items: int, n_queries: int, dim: int) -> float:
    """A low estimate of the CPU of an approximate run in exact-search FLOPs (2 x items x
    dim per query): its two index builds (dot and cosine, :func:`build_queries` each) and
    the recall check's exact search of up to 1,000 queries. The index's own searches are
    left out: on CPU they cost about as much per query as exact search (QA, 100k x 32 IVF:
    0.52 s per 1,000 queries against exact's 0.41 s), so where they are many the real cost
    is higher still."""
    per_query = 2.0 * n_items * dim
    return per_query * (2 * build_queries(kind, n_items) + min(n_queries, 1000))


def preflight_note(kind: str, n_items: int, n_queries: int, dim: int) -> list[str]:
    """Said before an asked-for approximate index is built where its estimated cost
    (:func:`index_cost`, a low estimate) exceeds exact search of every query; [] otherwise."""
    exact = 2.0 * n_items * n_queries * dim
    cost = index_cost(kind, n_items, n_queries, dim)
    if cost <= exact or cost < PREFLIGHT_MIN_FLOPS:
        return []
    return [
        f"{setting('index')} {kind} will likely be slower than exact search here: building its two indexes "
        f"({n_items:,} items x {dim} dims) and checking its recall cost about {cost / exact:.{1 if cost < 10 * exact else 0}f}x or more exact search of "
        f"the {n_queries:,} queries (estimated without the index's own searches, which on CPU cost about as much as "
        f"exact search; an index can pay off only from at least about {_break_even(kind, n_items, dim):,} queries on "
        f"this table (a low estimate); measured at 300k items x 2,000 queries x 32 dims: exact 2 s of CPU, "
        f"IVF 58 s, HNSW 199 s; at 100k items x 20,000 queries IVF still took twice exact's CPU)"
    ]


def _break_even(kind: str, n_items: int, dim: int) -> int:
    """The query count from which :func:`index_cost` falls below exact search's, rounded
    down to three significant figures (a floor, not a figure to the query)."""
    queries = index_cost(kind, n_items, 0, dim) / (2.0 * n_items * dim) + 1000
    step = 10 ** max(0, int(math.floor(math.log10(queries))) - 2)
    return int(queries // step * step)


def build_index(kind: str, table: np.ndarray, k: int, seed: int) -> tuple[faiss.Index, dict[str, int]]:
    """An IVF or HNSW inner-product index over ``table`` (float32, contiguous) for searches
    of ``k`` candidates, and its settings."""
    import faiss  # noqa: PLC0415 - heavy; exact search (the default) never needs this module's indexes
    n, dim = table.shape
    index: faiss.Index
    if kind == "ivf":
        nlist, nprobe = ivf_lists(n)
        quantizer = faiss.IndexFlatIP(dim)
        ivf = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
        train_rows = sample_indices(n, 64 * nlist, seed)
        ivf.train(table if train_rows is None else np.ascontiguousarray(table[train_rows]))
        ivf.add(table)
        ivf.nprobe = nprobe
        return ivf, {"nlist": nlist, "nprobe": nprobe}
    if kind == "hnsw":
        hnsw = faiss.IndexHNSWFlat(dim, HNSW_M, faiss.METRIC_INNER_PRODUCT)
        hnsw.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
        hnsw.add(table)
        ef_search = max(128, 2 * k)
        hnsw.hnsw.efSearch = ef_search
        return hnsw, {"M": HNSW_M, "efConstruction": HNSW_EF_CONSTRUCTION, "efSearch": ef_search}
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
        require_finite(table, "the item table", 0, EmbeddingTableError)
    kept: np.ndarray | None = None
    shift = 0
    if normalise:
        queries, _ = l2_normalise(queries)
        table, kept = directions(table)
    else:  # a tiny or huge table: powers of two keep its products in float32's range
        table, queries, shift = in_float32_range(table, queries)
    n = queries.shape[0]
    scores = np.full((n, k), -np.inf, dtype=np.float32)
    rows = np.full((n, k), -1, dtype=np.int64)
    if table.shape[0] == 0:
        return scores, rows, {}
    index, settings = build_index(kind, table, k, seed)
    with progress.track(description, n) as advance:
        for start in range(0, n, QUERY_BLOCK):
            stop = min(start + QUERY_BLOCK, n)
            found_scores, found_rows = ranked_search(index, queries[start:stop], k, kept)
            width = found_rows.shape[1]
            scores[start:stop, :width], rows[start:stop, :width] = found_scores, found_rows
            advance(stop - start)
    if shift:
        return float32_where_it_fits(np.ldexp(scores.astype(np.float64), shift)), rows, settings
    return scores, rows, settings


def ranked_search(index: faiss.Index, queries: np.ndarray, k: int, kept: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """One FAISS search of ``k`` candidates per query, rows mapped back to table rows
    (``kept``: the table rows the index holds, None: all) and put in the top-K order
    (:func:`~auditor.retrieval.search.select_topk`)."""
    if hasattr(index, "hnsw"):  # HNSW returns at most efSearch results: search twice as wide as asked
        index.hnsw.efSearch = max(int(index.hnsw.efSearch), 2 * k)
    scores, rows = index.search(queries, k)
    filled = rows >= 0
    if kept is not None:
        rows = np.where(filled, kept[np.where(filled, rows, 0)], -1)
    scores = np.where(filled, scores, -np.inf).astype(np.float32)
    return select_topk(scores, rows.astype(np.int64), k)


def recall_at(approx_rows: np.ndarray, exact_rows: np.ndarray) -> float:
    """Mean over queries of |approximate ∩ exact| / |exact| (filled slots only)."""
    if exact_rows.shape[0] == 0:
        return math.nan
    expected = np.maximum((exact_rows >= 0).sum(axis=1), 1)
    return float((shared_counts(approx_rows, exact_rows) / expected).mean())


SLOW_NOTE_CPU = 1.0
"""CPU seconds below which an approximate search is not compared with exact search (too
short to matter, and too short to time reliably)."""


def slower_than_exact(kind: str, approximate_cpu: float, exact_cpu: float, n_sampled: int, n_queries: int) -> list[str]:
    """A note when the approximate search (its index builds included) took more CPU time
    than exact search of every query would, estimated from the recall check's exact search
    of ``n_sampled`` queries (``exact_cpu`` seconds); [] otherwise."""
    estimate = exact_cpu * n_queries / max(n_sampled, 1)
    if approximate_cpu < SLOW_NOTE_CPU or approximate_cpu <= estimate:
        return []
    return [
        f"{setting('index')} {kind} was slower than exact search at this size: its index builds and search took "
        f"{approximate_cpu:.1f} s of CPU, exact search of the {n_queries:,} queries about {estimate:.1f} s (the "
        f"recall check's exact search of {n_sampled:,} took {exact_cpu:.1f} s); {setting('index')} exact gives the "
        "exact lists faster"
    ]


def sampled_head_error(
    kind: str, exact_rows: np.ndarray, approximate_rows: np.ndarray, popularity: np.ndarray, ks: list[int],
) -> list[str]:
    """The note of which way the index erred where it was checked: the top-1% items' share
    of the dot lists' slots at each K, approximate against exact, over the recall check's
    sampled queries (``exact_rows``, ``approximate_rows``: their dot lists, K_max wide).
    Measured, since the sign depends on the index (:data:`~auditor.sections.APPROXIMATE_ERROR`)."""
    if exact_rows.shape[0] == 0:
        return []
    head = HeadShare(popularity, 1)
    parts = []
    for k in ks:
        approx, exact = head.measure(approximate_rows[:, :k]), head.measure(exact_rows[:, :k])
        if not (math.isfinite(approx) and math.isfinite(exact)):
            continue
        points = 100 * (approx - exact)
        way = "higher" if points > 0 else "lower" if points < 0 else "equal"
        parts.append(f"@{k} {100 * approx:.3f}% against {100 * exact:.3f}% ({points:+.3f} points, {way})")
    if not parts:
        return []
    return [
        f"on the recall check's {exact_rows.shape[0]:,} sampled queries the {kind} index's dot lists gave the "
        f"top-1% items this share of the slots, against exact search's: {'; '.join(parts)}; {APPROXIMATE_ERROR}, "
        f"so a gate on its figures is no bound either way ({setting('index')} exact measures them)"
    ]
