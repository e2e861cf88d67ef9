"""Retrieval skew: exact and approximate top-K search over item tables of any size, and
its measurement (:func:`measure_retrieval`).

Modules: :mod:`~auditor.retrieval.search` (exact FAISS search and the top-K contract,
:func:`select_topk`), :mod:`~auditor.retrieval.approximate` (IVF/HNSW and recall),
:mod:`~auditor.retrieval.dask` (row shards, by file reference where possible
(:mod:`auditor.loading.shards`), on a Dask cluster), :mod:`~auditor.retrieval.measure`
(the measurement).
"""

from auditor.retrieval.approximate import approximate_topk, recall_at
from auditor.retrieval.dask import dask_multi_scoring_topk, search_shard
from auditor.retrieval.lists import RetrievalSettings
from auditor.retrieval.measure import (
    EXACT_FLOP_LIMIT,
    RetrievalOutcome,
    choose_index,
    measure_retrieval,
)
from auditor.retrieval.scorings import multi_scoring_topk
from auditor.retrieval.search import TopK, blas_path, l2_normalise, merge_topk, select_topk, sharded_topk

__all__ = [
    "EXACT_FLOP_LIMIT",
    "RetrievalOutcome",
    "RetrievalSettings",
    "TopK",
    "approximate_topk",
    "blas_path",
    "choose_index",
    "dask_multi_scoring_topk",
    "l2_normalise",
    "measure_retrieval",
    "merge_topk",
    "multi_scoring_topk",
    "recall_at",
    "search_shard",
    "select_topk",
    "sharded_topk",
]
