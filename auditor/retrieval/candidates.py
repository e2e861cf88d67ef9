"""How many candidates each query fetches from an approximate index, within the memory ceiling.

An approximate index cannot skip a query's training items, so a query fetches K plus as
many candidates as it has excluded rows, and :func:`~auditor.retrieval.serving.filter_excluded`
drops the excluded ones. Sizing every query's fetch by the longest history made one
account with 25,000 training items cost every one of 20,000 queries 25,010 candidates
(6 GB per scoring, far past the ceiling). The one fetch policy, here:

* queries are sorted by their number of excluded rows and searched in blocks; a block
  fetches K plus its own longest history, so a light query never pays for a heavy one;
* a query with more than :data:`MAX_EXTRA_FETCH` excluded rows is searched exactly
  (:func:`~auditor.retrieval.scorings.multi_scoring_topk` skips its exclusions without
  fetching them): its lists are exact search's, and HNSW is never asked for tens of
  thousands of neighbours;
* a block holds as many queries as its candidates (:data:`CANDIDATE_BYTES` each) fit in
  the memory the ceiling leaves beside the index, checked before anything is allocated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from auditor.errors import InputError, setting
from auditor.config import format_size
from auditor.memory import approximate_index_bytes, memory_budget
from auditor.progress import Progress
from auditor.retrieval.approximate import ranked_search
from auditor.retrieval.search import QUERY_BLOCK
from auditor.retrieval.serving import Exclusions, filter_excluded, subset_exclusions

if TYPE_CHECKING:
    import faiss

MAX_EXTRA_FETCH = 1024
"""Excluded rows past which a query is searched exactly rather than fetched around."""
CANDIDATE_BYTES = 64
"""Memory one fetched candidate costs while its block is filtered: FAISS's float32 score
and int64 row, their ranked copies, and the exclusion filter's int64 codes, positions
and order (measured peak per candidate ~50 bytes; rounded up)."""


UNSET_CEILING_ROOM = 64 << 20
"""Candidate memory per block when no ceiling was given and half the available memory
leaves less beside the index: blocks stay bounded, and nothing the user did not set is refused."""


def candidate_room(max_memory: int | None, n_items: int, dim: int) -> int | None:
    """The bytes a block's candidates may take: what the ceiling (``max_memory``, else half
    the available memory) leaves beside the index and its normalised copy."""
    budget = memory_budget(max_memory)
    if budget is None:
        return None
    room = budget - approximate_index_bytes(n_items, dim)
    return room if max_memory is not None else max(room, UNSET_CEILING_ROOM)


@dataclass(frozen=True)
class FetchPlan:
    """Which queries are searched exactly, and the approximate ones in blocks."""

    exact: np.ndarray
    """Query positions searched exactly (more than :data:`MAX_EXTRA_FETCH` excluded rows)."""
    blocks: tuple[tuple[np.ndarray, int], ...]
    """(query positions, candidates each fetches), fetch ascending."""
    peak_bytes: int
    """The largest block's candidate memory (rows x fetch x :data:`CANDIDATE_BYTES`)."""


def plan_fetch(exclude: Exclusions | None, n_queries: int, k: int, n_items: int, budget: int | None) -> FetchPlan:
    """The fetch plan of ``n_queries`` queries for top-``k`` lists over ``n_items`` rows,
    each block's candidates within ``budget`` bytes (None: no bound but :data:`QUERY_BLOCK`).
    Raises InputError (naming ``max_memory``) when one query's candidates do not fit."""
    extra = np.zeros(n_queries, dtype=np.int64) if exclude is None else np.diff(exclude[0])
    heavy = extra > MAX_EXTRA_FETCH
    light = np.flatnonzero(~heavy)
    order = light[np.argsort(extra[light], kind="stable")]
    widest = min(n_items, k + int(extra[order].max(initial=0)))
    rows = QUERY_BLOCK
    if budget is not None:
        rows = min(rows, budget // max(widest * CANDIDATE_BYTES, 1))
        if rows < 1 and order.size:
            need = widest * CANDIDATE_BYTES
            raise InputError(
                f"{setting('max_memory')} leaves {max(budget, 0):,} bytes beside the approximate index, less than "
                f"one query's {widest:,} candidates need ({need:,} bytes); pass a larger {setting('max_memory')} "
                f"(at least {format_size(need - max(budget, 0))} more) or {setting('index')} exact"
            )
    blocks = tuple(
        (order[start : start + rows], min(n_items, k + int(extra[order[min(start + rows, order.size) - 1]])))
        for start in range(0, order.size, max(rows, 1))
    )
    peak = max((len(positions) * fetch * CANDIDATE_BYTES for positions, fetch in blocks), default=0)
    return FetchPlan(np.flatnonzero(heavy), blocks, peak)


def fetch_lists(
    index: faiss.Index,
    queries: np.ndarray,
    plan: FetchPlan,
    k: int,
    exclude: Exclusions | None,
    n_items: int,
    kept: np.ndarray | None,
    progress: Progress,
    description: str,
) -> np.ndarray:
    """(n_queries, k) approximate rows of the plan's blocks, each query's excluded rows
    dropped; the rows of the plan's exact queries stay -1 (the caller fills them)."""
    out = np.full((queries.shape[0], k), -1, dtype=np.int64)
    with progress.track(description, sum(len(positions) for positions, _ in plan.blocks)) as advance:
        for positions, fetch in plan.blocks:
            _, found = ranked_search(index, np.ascontiguousarray(queries[positions]), fetch, kept)
            out[positions] = filter_excluded(found, subset_exclusions(exclude, positions), n_items, k)
            advance(len(positions))
    return out
