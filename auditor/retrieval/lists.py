"""The dot and cosine top-K lists of retrieval: exact (FAISS, sharded past the memory
ceiling, optionally on a Dask cluster) or approximate (IVF/HNSW, with measured recall)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from auditor.loading.history import sample_indices
from auditor.memory import MIN_BLOCK_ROWS, memory_budget
from auditor.model import ModelBundle
from auditor.progress import Progress
from auditor.retrieval.approximate import approximate_topk, recall_at
from auditor.retrieval.dask import dask_sharded_topk
from auditor.retrieval.search import sharded_topk
from auditor.retrieval.shards import table_shards

if TYPE_CHECKING:
    from auditor.retrieval.measure import RetrievalSettings

RECALL_SAMPLE = 1000
"""Queries (seeded sample) on which an approximate index's recall is measured."""


def exact_lists(
    queries: np.ndarray,
    table: np.ndarray,
    k: int,
    settings: RetrievalSettings,
    progress: Progress,
    bundle: ModelBundle,
) -> tuple[np.ndarray, np.ndarray, str]:
    """Exact dot and cosine top-k rows, sharded when the table and its normalised copy
    exceed the memory ceiling (``settings.max_memory``, else half the available memory);
    with ``settings.scheduler`` the shards run on that Dask cluster."""
    n_items, dim = table.shape
    shards: list[np.ndarray] = [table]
    budget = memory_budget(settings.max_memory)
    if budget is not None and 2 * n_items * dim * 4 > budget:
        # A shard (when read from disk) and its normalised copy fit in the budget.
        rows_per_shard = max(MIN_BLOCK_ROWS, budget // (2 * 4 * dim))
        shards = table_shards(table, rows_per_shard)
    merged = f", {len(shards)} shards merged" if len(shards) > 1 else ""
    # Where the shards ran is left out of the note: a Dask run reports what a local one does.
    note = f"index: exact (FAISS flat inner product, BLAS path{merged})"
    if settings.scheduler and len(shards) > 1:
        bounds = np.cumsum([0] + [shard.shape[0] for shard in shards]).tolist()
        (_, dot_rows), (_, cos_rows) = dask_sharded_topk(
            queries, bundle, bounds, k, settings.scheduler, progress
        )
        return dot_rows, cos_rows, note
    _, dot_rows = sharded_topk(
        queries, shards, k, False, progress, "retrieval: dot-product search", check_finite=False
    )
    _, cos_rows = sharded_topk(
        queries, shards, k, True, progress, "retrieval: cosine search", check_finite=False
    )
    return dot_rows, cos_rows, note


def approximate_lists(
    queries: np.ndarray,
    table: np.ndarray,
    kind: str,
    ks: list[int],
    seed: int,
    progress: Progress,
) -> tuple[np.ndarray, np.ndarray, str, dict[int, float], str]:
    """Approximate dot and cosine top-k rows, with recall@K against exact search."""
    k_max = ks[-1]
    table32 = np.ascontiguousarray(table, dtype=np.float32)
    lists: dict[bool, np.ndarray] = {}
    exact: dict[bool, np.ndarray] = {}
    sample = sample_indices(queries.shape[0], RECALL_SAMPLE, seed + 1)
    sample_idx = np.arange(queries.shape[0]) if sample is None else sample
    settings: dict[str, int] = {}
    for normalise, name in ((False, "dot-product"), (True, "cosine")):
        _, lists[normalise], settings = approximate_topk(
            queries, table32, k_max, normalise, kind, seed, progress,
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
        f"(seed {seed + 1}); the lower of dot and cosine is reported ({'; '.join(per_k)})"
    )
    return lists[False], lists[True], note, recall, recall_note
