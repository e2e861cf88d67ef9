"""Retrieval skew: exact and approximate top-K search over item tables of any size, and
its measurement (:func:`measure_retrieval`).

Modules: :mod:`~auditor.retrieval.search` (exact FAISS search and the top-K contract,
:func:`select_topk`), :mod:`~auditor.retrieval.approximate` (IVF/HNSW and recall),
:mod:`~auditor.retrieval.shards`
(row shards and their file references), :mod:`~auditor.retrieval.dask` (shards on a
Dask cluster), :mod:`~auditor.retrieval.measure` (the measurement).
"""

from auditor.retrieval.approximate import approximate_topk, recall_at
from auditor.retrieval.dask import dask_client, dask_multi_scoring_topk, search_shard
from auditor.retrieval.lists import RetrievalSettings
from auditor.retrieval.measure import (
    EXACT_FLOP_LIMIT,
    RetrievalOutcome,
    choose_index,
    measure_retrieval,
)
from auditor.loading.parquet_table import parquet_shards
from auditor.loading.queries import load_query_file
from auditor.retrieval.scorings import multi_scoring_topk
from auditor.retrieval.search import TopK, blas_path, l2_normalise, merge_topk, select_topk, sharded_topk
from auditor.retrieval.shards import MappedRows, ParquetRows, ShardSource, shard_sources, table_shards

__all__ = [
    "EXACT_FLOP_LIMIT",
    "MappedRows",
    "ParquetRows",
    "RetrievalOutcome",
    "RetrievalSettings",
    "ShardSource",
    "TopK",
    "approximate_topk",
    "blas_path",
    "choose_index",
    "dask_client",
    "dask_multi_scoring_topk",
    "l2_normalise",
    "load_query_file",
    "measure_retrieval",
    "merge_topk",
    "multi_scoring_topk",
    "parquet_shards",
    "recall_at",
    "search_shard",
    "select_topk",
    "shard_sources",
    "sharded_topk",
    "table_shards",
]
