"""Approximate top-K (FAISS IVF and HNSW indexes) and its recall against exact search.

Used when one exact scoring would cost too much (``index`` setting ``auto``, see
:func:`auditor.retrieval.measure.choose_index`) or when asked for; the lists are put in
the same order as exact ones (:func:`~auditor.retrieval.search.select_topk`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from auditor.errors import EmbeddingTableError, InputError
from auditor.sampling import sample_indices
from auditor.metrics.exposure import shared_counts
from auditor.progress import SILENT, Progress
from auditor.retrieval.search import QUERY_BLOCK, directions, l2_normalise, require_finite, select_topk

if TYPE_CHECKING:
    import faiss

HNSW_M = 32
HNSW_EF_CONSTRUCTION = 80


def _approximate_index(kind: str, table: np.ndarray, k: int, seed: int) -> tuple[faiss.Index, dict[str, int]]:
    """An IVF or HNSW inner-product index over ``table`` and its settings."""
    import faiss  # noqa: PLC0415 - heavy; exact search (the default) never needs this module's indexes
    n, dim = table.shape
    index: faiss.Index
    if kind == "ivf":
        # ~4 sqrt(n) lists with >= 39 training points each (FAISS's minimum per centroid);
        # probing 1/8 of them: MIPS clusters are coarse (norms vary), so probe generously.
        nlist = int(min(max(1, round(4 * math.sqrt(n))), max(1, n // 39)))
        nprobe = int(min(nlist, max(1, math.ceil(nlist / 8))))
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
    if normalise:
        queries, _ = l2_normalise(queries)
        table, kept = directions(table)
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
    scores, rows = select_topk(scores, rows, k)
    return scores, rows, settings


def recall_at(approx_rows: np.ndarray, exact_rows: np.ndarray) -> float:
    """Mean over queries of |approximate ∩ exact| / |exact| (filled slots only)."""
    if exact_rows.shape[0] == 0:
        return math.nan
    expected = np.maximum((exact_rows >= 0).sum(axis=1), 1)
    return float((shared_counts(approx_rows, exact_rows) / expected).mean())
