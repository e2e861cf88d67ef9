"""Retrieval skew: exact and approximate top-K search over item tables of any size, and
its measurement (:func:`measure_retrieval`).

Modules: :mod:`~auditor.retrieval.search` (exact FAISS search and the top-K contract,
:func:`select_topk`), :mod:`~auditor.retrieval.approximate` (IVF/HNSW and recall),
:mod:`~auditor.retrieval.dask` (row shards, by file reference where possible
(:mod:`auditor.loading.shards`), on a Dask cluster), :mod:`~auditor.retrieval.measure`
(the measurement).

The public names are imported on first use: the served-lists audit uses this package's
list measures (:mod:`~auditor.retrieval.served`) and no search, so importing the package
must not import torch and FAISS, which the searches need.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from auditor.lazy_names import imported_on_first_use

if TYPE_CHECKING:
    from auditor.retrieval.approximate import approximate_topk, recall_at
    from auditor.retrieval.dask import dask_multi_scoring_topk, search_shard
    from auditor.retrieval.lists import RetrievalSettings
    from auditor.retrieval.measure import EXACT_FLOP_LIMIT, RetrievalOutcome, choose_index, measure_retrieval
    from auditor.retrieval.scorings import multi_scoring_topk
    from auditor.retrieval.search import TopK, blas_path, l2_normalise, merge_topk, select_topk, sharded_topk

_LAZY = {
    "approximate_topk": "auditor.retrieval.approximate",
    "recall_at": "auditor.retrieval.approximate",
    "dask_multi_scoring_topk": "auditor.retrieval.dask",
    "search_shard": "auditor.retrieval.dask",
    "RetrievalSettings": "auditor.retrieval.lists",
    "EXACT_FLOP_LIMIT": "auditor.retrieval.measure",
    "RetrievalOutcome": "auditor.retrieval.measure",
    "choose_index": "auditor.retrieval.measure",
    "measure_retrieval": "auditor.retrieval.measure",
    "multi_scoring_topk": "auditor.retrieval.scorings",
    "TopK": "auditor.retrieval.search",
    "blas_path": "auditor.retrieval.search",
    "l2_normalise": "auditor.retrieval.search",
    "merge_topk": "auditor.retrieval.search",
    "select_topk": "auditor.retrieval.search",
    "sharded_topk": "auditor.retrieval.search",
}
"""Public name -> the module that defines it."""

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

__getattr__, __dir__ = imported_on_first_use(__name__, _LAZY, globals())
