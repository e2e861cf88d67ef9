"""The lists a held-out evaluation serves: every scoring for the same queries, each
query's excluded rows (its training items) left out.

Dot, cosine and the norm-aware ``alpha_<a>`` scorings come from one pass of inner
products ranked under every scoring (:mod:`auditor.retrieval.scorings`); the popular
list is the most popular rows a query has not been excluded from, so every scoring
competes for the same candidates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from auditor.metrics.list_measures import ExposureMeasures
from auditor.progress import Progress
from auditor.result import alpha_scoring

SERVED_INDEX_NOTE = (
    "index: exact (one pass of inner products per block, ranked under every scoring: dot, cosine, "
    "alpha_<a> = |q|^a |k|^a cos(q, k)); each query's excluded items are never served"
)
POPULAR_BLOCK = 1024
"""Queries per block of the popular lists (bounds the candidate matrix)."""


@dataclass(frozen=True)
class ServedQueries:
    """Queries to rank under every scoring (held-out evaluation), with their exclusions."""

    vectors: np.ndarray
    """(n_queries, dim) float32, no zero rows."""
    description: str
    alphas: tuple[float, ...]
    """Norm-aware exponents besides dot (1) and cosine (0)."""
    exclude_indptr: np.ndarray | None = None
    """CSR of each query's excluded item rows (None: nothing excluded)."""
    exclude_rows: np.ndarray | None = None

    @property
    def exclude(self) -> tuple[np.ndarray, np.ndarray] | None:
        if self.exclude_indptr is None or self.exclude_rows is None:
            return None
        return self.exclude_indptr, self.exclude_rows


def served_lists(
    queries: np.ndarray,
    table: np.ndarray,
    k: int,
    served: ServedQueries,
    measures: ExposureMeasures,
    progress: Progress,
    max_memory: int | None,
) -> dict[str, np.ndarray]:
    """Scoring name -> (n_queries, k) item rows: dot, cosine, popular, then alpha_<a>."""
    from auditor.retrieval.scorings import multi_scoring_topk

    exponents = {"dot": 1.0, "cosine": 0.0}
    exponents.update({alpha_scoring(a): a for a in served.alphas if alpha_scoring(a) not in ("alpha_0", "alpha_1")})
    found = multi_scoring_topk(
        queries, table, k, tuple(dict.fromkeys(exponents.values())), exclude=served.exclude,
        progress=progress, description="held-out evaluation: every scoring", max_memory=max_memory,
    )  # fmt: skip
    lists = {"dot": found[1.0][1], "cosine": found[0.0][1]}
    lists["popular"] = popular_lists(measures, k, queries.shape[0], served.exclude)
    for name, alpha in exponents.items():
        if name not in lists:
            lists[name] = found[alpha][1]
    return lists


def popular_lists(
    measures: ExposureMeasures, k: int, n_queries: int, exclude: tuple[np.ndarray, np.ndarray] | None
) -> np.ndarray:
    """(n_queries, k): the most popular rows (ties by row) each query was not excluded
    from; -1 where fewer remain."""
    if exclude is None:
        return np.broadcast_to(measures.popular_list(k), (n_queries, k))
    indptr, rows = exclude
    per_query = np.diff(indptr)
    depth = min(measures.n_items, k + int(per_query.max(initial=0)))
    order = measures.popular_list(depth)
    out = np.full((n_queries, k), -1, dtype=np.int64)
    # Excluded (query, row) pairs as sorted codes; a candidate is excluded when found.
    codes = np.sort(np.repeat(np.arange(n_queries, dtype=np.int64), per_query) * measures.n_items + rows)
    for start in range(0, n_queries, POPULAR_BLOCK):
        stop = min(start + POPULAR_BLOCK, n_queries)
        candidates = np.arange(start, stop, dtype=np.int64)[:, None] * measures.n_items + order[None, :]
        at = np.minimum(np.searchsorted(codes, candidates), max(codes.size - 1, 0))
        excluded = codes[at] == candidates if codes.size else np.zeros(candidates.shape, dtype=bool)
        # Stable: the kept candidates stay in popularity order, excluded ones move last.
        keep = np.argsort(excluded, axis=1, kind="stable")[:, :k]
        picked = np.take_along_axis(np.broadcast_to(order, candidates.shape), keep, axis=1)
        picked[np.take_along_axis(excluded, keep, axis=1)] = -1
        out[start:stop, : picked.shape[1]] = picked
    return out
