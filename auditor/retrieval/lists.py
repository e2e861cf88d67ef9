"""Every scoring's top-K lists for the query population: exact (one pass of inner products
ranked under dot, cosine and every norm-aware exponent; row shards past the memory
ceiling, optionally on a Dask cluster) or approximate (IVF/HNSW for dot and cosine, with
measured recall). Each query's excluded rows (its training items) are never served.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

from auditor.devices import resolve_device
from auditor.errors import setting
from auditor.sampling import sample_indices
from auditor.progress import Progress
from auditor.retrieval.approximate import build_index, recall_at, slower_than_exact
from auditor.retrieval.candidates import MAX_EXTRA_FETCH, FetchPlan, candidate_room, fetch_lists, plan_fetch
from auditor.retrieval.search import directions, in_float32_range, l2_normalise
from auditor.retrieval.dask import dask_multi_scoring_topk
from auditor.retrieval.scorings import multi_scoring_topk
from auditor.retrieval.shards import shard_bounds
from auditor.retrieval.serving import Exclusions, subset_exclusions

if TYPE_CHECKING:
    from auditor.model import ModelBundle

class RetrievalSettings(Protocol):
    """The settings retrieval reads (an :class:`~auditor.config.AuditConfig` has them all),
    so this module needs neither the rest of an audit's settings nor the config module."""

    @property
    def ks(self) -> tuple[int, ...]: ...
    @property
    def max_queries(self) -> int | None: ...
    @property
    def index(self) -> str: ...
    @property
    def popularity(self) -> str: ...
    @property
    def seed(self) -> int: ...
    @property
    def max_memory(self) -> int | None: ...
    @property
    def scheduler(self) -> str | None: ...
    @property
    def alphas(self) -> tuple[float, ...]: ...
    @property
    def device(self) -> str: ...


RECALL_SAMPLE = 1000
"""Queries (seeded sample) on which an approximate index's recall is measured."""
EXACT_NOTE = (
    "index: exact (one pass of inner products per block, ranked under every scoring: dot, cosine, "
    "alpha_<a> = |q|^a |k|^a cos(q, k))"
)


@dataclass
class ScoringLists:
    """Each scoring's (n_queries, K) item rows (-1: empty slot), keyed by exponent
    (1 dot, 0 cosine, a for alpha_<a>), and how they were found."""

    rows: dict[float, np.ndarray]
    note: str
    recall: dict[int, float] | None = None
    recall_note: str | None = None
    notes: list[str] = field(default_factory=list)
    """What the caller should warn about (e.g. a scheduler left unused)."""
    sample_dot: tuple[np.ndarray, np.ndarray] | None = None
    """Approximate only: the recall check's sampled queries' dot lists, (exact, approximate)."""


def exact_lists(
    queries: np.ndarray,
    table: np.ndarray,
    k: int,
    exponents: tuple[float, ...],
    exclude: Exclusions | None,
    settings: RetrievalSettings,
    progress: Progress,
    bundle: ModelBundle,
) -> ScoringLists:
    """Exact top-k under every exponent, from one pass over the table (in row shards when
    it and its sorted copy exceed the memory ceiling; those shards on the Dask cluster
    of ``settings.scheduler`` when one is given)."""
    n_items, dim = table.shape
    bounds = shard_bounds(n_items, dim, settings.max_memory)
    merged = f"; {len(bounds)} shards merged" if len(bounds) > 1 else ""
    # Where the shards ran is left out of the note: a Dask run reports what a local one does.
    lists = ScoringLists({}, EXACT_NOTE[:-1] + merged + ")")
    if settings.scheduler and len(bounds) > 1:
        edges = [start for start, _ in bounds] + [bounds[-1][1]]
        found = dask_multi_scoring_topk(queries, bundle, edges, k, exponents, exclude, settings.scheduler, progress)
    else:
        if settings.scheduler:
            lists.notes.append(
                f"{setting('scheduler')} {settings.scheduler} was not used: the table fits in the memory ceiling, so "
                f"it was searched here in one piece (lower {setting('max_memory')} to shard it)"
            )
        found = multi_scoring_topk(
            queries, table, k, exponents, exclude=exclude, progress=progress,
            description="retrieval: every scoring in one pass", max_memory=settings.max_memory,
            device=resolve_device(settings.device),
        )  # fmt: skip
    lists.rows = {a: rows for a, (_, rows) in found.items()}
    lists.notes += shard_cost_note(bounds, settings.max_memory)
    return lists


SHARD_NOTE_MIN = 16
"""Shards from which the sharded search's cost is said: every shard ranks every query
block, so small shards multiply the time (QA measured 84 shards of 1,200 rows at 19x
the CPU of one pass, 4 shards of 262,144 rows at no visible cost)."""


def shard_cost_note(bounds: list[tuple[int, int]], max_memory: int | None) -> list[str]:
    """The note of a search split into :data:`SHARD_NOTE_MIN` or more row shards ([] otherwise)."""
    if len(bounds) < SHARD_NOTE_MIN:
        return []
    rows = max(stop - start for start, stop in bounds)
    ceiling = f"{setting('max_memory')} {max_memory:,} bytes" if max_memory is not None else "half the available memory"
    return [
        f"the item table was searched in {len(bounds)} row shards of up to {rows:,} rows to fit the memory ceiling "
        f"({ceiling}): every shard ranks every query, so the search took about as many passes over the queries as "
        f"there are shards; the figures equal one pass's, and a larger {setting('max_memory')} takes fewer shards"
    ]


def approximate_lists(
    queries: np.ndarray,
    table: np.ndarray,
    kind: str,
    ks: list[int],
    exclude: Exclusions | None,
    seed: int,
    progress: Progress,
    max_memory: int | None = None,
) -> ScoringLists:
    """Approximate dot and cosine top-k rows (each query fetching the extra candidates its
    own exclusions need, :mod:`auditor.retrieval.candidates`; the heaviest histories
    searched exactly), with recall@K against exact search on a sample."""
    k_max = ks[-1]
    n_items, dim = (int(n) for n in table.shape)
    plan = plan_fetch(exclude, queries.shape[0], k_max, n_items, candidate_room(max_memory, n_items, dim))
    table32 = np.ascontiguousarray(table, dtype=np.float32)
    sample = sample_indices(queries.shape[0], RECALL_SAMPLE, seed + 1)
    sample_idx = np.arange(queries.shape[0]) if sample is None else sample
    clock = time.process_time()
    exact = multi_scoring_topk(
        np.ascontiguousarray(queries[sample_idx]), table32, k_max, (1.0, 0.0),
        exclude=subset_exclusions(exclude, sample_idx), progress=progress, description="retrieval: recall check",
        max_memory=max_memory,
    )  # fmt: skip
    exact_cpu = time.process_time() - clock
    clock = time.process_time()
    rows, settings = _approximate_rows(queries, table32, kind, plan, k_max, exclude, seed, progress, max_memory)
    approximate_cpu = time.process_time() - clock
    recall: dict[int, float] = {}
    per_k: dict[int, list[str]] = {k: [] for k in ks}
    for alpha, name in ((1.0, "dot"), (0.0, "cosine")):
        for k in ks:
            value = recall_at(rows[alpha][sample_idx, :k], exact[alpha][1][:, :k])
            recall[k] = min(recall.get(k, value), value)
            per_k[k].append(f"{name} {value:.4f}")
    described = ", ".join(f"{name}={value}" for name, value in settings.items())
    described += " (raised to twice a block's fetch where that is more)" if "efSearch" in settings else ""
    heavy = (f"; {plan.exact.size} {'query' if plan.exact.size == 1 else 'queries'} with more than "
             f"{MAX_EXTRA_FETCH} training items searched exactly" if plan.exact.size else "")
    note = (
        f"index: {kind} (FAISS, inner product; {described}; the cosine index holds the normalised vectors "
        f"with the same settings; each query fetches K plus its own training items as candidates{heavy}; "
        "norm-aware scorings are not measured)"
    )
    recall_note = (
        f"recall@K: mean |approximate ∩ exact| / K over {sample_idx.shape[0]} sampled queries (seed {seed + 1}); "
        "the lower of dot and cosine is reported ("
        + "; ".join(f"@{k}: {', '.join(parts)}" for k, parts in per_k.items()) + ")"
    )
    lists = ScoringLists(rows, note, recall, recall_note, sample_dot=(exact[1.0][1], rows[1.0][sample_idx]))
    lists.notes += slower_than_exact(kind, approximate_cpu, exact_cpu, sample_idx.shape[0], queries.shape[0])
    return lists


def _approximate_rows(
    queries: np.ndarray, table32: np.ndarray, kind: str, plan: FetchPlan, k: int, exclude: Exclusions | None,
    seed: int, progress: Progress, max_memory: int | None,
) -> tuple[dict[float, np.ndarray], dict[str, int]]:
    """Dot's and cosine's rows by the plan: its blocks from the index, its heavy queries exactly."""
    n_items = table32.shape[0]
    rows: dict[float, np.ndarray] = {}
    settings: dict[str, int] = {}
    for alpha, normalise, name in ((1.0, False, "dot"), (0.0, True, "cosine")):
        searched, kept = queries, None
        vectors = table32
        if not normalise:  # a tiny or huge table: powers of two keep its products in float32's range
            vectors, searched, _ = in_float32_range(table32, queries)
        else:  # cosine: unit queries against the directions of the non-zero rows
            searched = l2_normalise(queries)[0]
            vectors, kept = directions(table32)
        if vectors.shape[0] == 0:
            rows[alpha] = np.full((queries.shape[0], k), -1, dtype=np.int64)
            continue
        index, settings = build_index(kind, np.ascontiguousarray(vectors), k, seed)
        rows[alpha] = fetch_lists(index, searched, plan, k, exclude, n_items, kept, progress,
                                  f"retrieval: {name} search ({kind})")
        del index
    if plan.exact.size:  # histories too long to fetch around: exact search skips them instead
        found = multi_scoring_topk(
            np.ascontiguousarray(queries[plan.exact]), table32, k, (1.0, 0.0),
            exclude=subset_exclusions(exclude, plan.exact), progress=progress,
            description="retrieval: long histories, exact", max_memory=max_memory,
        )  # fmt: skip
        for alpha in (1.0, 0.0):
            rows[alpha][plan.exact, : found[alpha][1].shape[1]] = found[alpha][1]
    return rows, settings
