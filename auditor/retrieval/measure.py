"""Retrieval skew: the same queries served by dot product, by cosine and a popular list.

Dot-product serving multiplies every score by the item norm (docs/theory.md §2); cosine
serving removes it. :func:`measure_retrieval` runs both searches with FAISS, builds the
most-popular reference list, and measures each set of top-K lists with
:class:`auditor.metrics.exposure.ExposureMeasures`.

* Ties: every list keeps the top-K contract of :func:`~auditor.retrieval.search.select_topk`
  (higher score, then lower row), so sharded and Dask searches equal one search.
* Zero vectors: zero queries are dropped (counted and warned); a zero-norm item has no
  direction, so cosine never serves it; dot still scores it 0.
* Memory: when the table and its normalised copy exceed the ceiling (``max_memory``,
  else half the available memory) exact search runs over row shards that each fit it,
  and ``index`` ``auto`` stays exact (an approximate index would hold the whole table).
  With a ``scheduler`` the shards are searched on that Dask cluster.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from auditor.errors import EmbeddingTableError, InputError, setting
from auditor.loading.history import HistoryQueries, sample_indices
from auditor.memory import MIN_BLOCK_ROWS, block_rows, check_memory_ceiling, memory_budget
from auditor.metrics.exposure import DEFINITIONS, ExposureMeasures, Slots, overlap
from auditor.model import ItemStats, ModelBundle
from auditor.progress import SILENT, Progress
from auditor.result import CutoffMeasures, Retrieval
from auditor.retrieval.approximate import approximate_topk, recall_at
from auditor.retrieval.dask import dask_sharded_topk
from auditor.retrieval.queries import drop_zero_queries, query_vectors
from auditor.retrieval.search import require_finite, sharded_topk
from auditor.retrieval.shards import table_shards

EXACT_FLOP_LIMIT = 4e12
"""``index`` ``auto`` searches exactly while one scoring costs at most this many FLOPs
(2 x n_items x n_queries x dim). At the 50-100 GFLOP/s two cores reach with K=100 that
is under about a minute per scoring; 1M items x 10,000 queries x 64 dims (1.3e12) is
still exact, 10M items x 10,000 x 128 (2.6e13) goes approximate (IVF)."""

RECALL_SAMPLE = 1000
"""Queries (seeded sample) on which an approximate index's recall is measured."""


class RetrievalSettings(Protocol):
    """The settings retrieval reads (an :class:`~auditor.config.AuditConfig` has them all),
    so this module needs neither the rest of an audit's settings nor the config module."""

    @property
    def ks(self) -> tuple[int, ...]: ...
    @property
    def queries(self) -> str: ...
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


@dataclass
class RetrievalOutcome:
    """What :func:`measure_retrieval` hands to the audit."""

    retrieval: Retrieval
    exposure: dict[str, dict[int, np.ndarray]]
    """scoring ("dot", "cosine", "popular") -> K -> exposure count per item row (int64)."""
    warnings: list[str] = field(default_factory=list)


def choose_index(kind: str, n_items: int, n_queries: int, dim: int) -> str:
    """The index the ``index`` setting means here: ``auto`` is exact up to :data:`EXACT_FLOP_LIMIT`."""
    if kind != "auto":
        return kind
    return "exact" if 2.0 * n_items * n_queries * dim <= EXACT_FLOP_LIMIT else "ivf"


def _popularity(stats: ItemStats, kind: str, n_items: int) -> np.ndarray:
    if stats.frequencies.shape[0] != n_items:
        raise InputError(
            f"item statistics cover {stats.frequencies.shape[0]} items but the item table has "
            f"{n_items} rows"
        )
    if kind == "users":
        if stats.user_counts is None:
            flag = setting("popularity")
            raise InputError(
                f"{flag} users needs distinct users per item, but the interaction log has "
                f"no user column (pass {setting('user_col')}, or use {flag} interactions)"
            )
        return np.asarray(stats.user_counts, dtype=np.int64)
    return np.asarray(stats.frequencies, dtype=np.int64)


def _scan_items(table: np.ndarray, max_memory: int | None) -> int:
    """One pass in slices (a memory-mapped table is never loaded whole): NaN/inf rows are
    an error; returns the number of zero rows. The searches then skip their own checks."""
    n_items, dim = table.shape
    n_zero = 0
    step = block_rows(dim, bytes_per_value=1, max_memory=max_memory)
    for start in range(0, n_items, step):
        part = np.asarray(table[start : start + step])
        require_finite(part, "the item table", start, EmbeddingTableError)
        n_zero += int((~np.any(part, axis=1)).sum())
    return n_zero


def measure_retrieval(
    bundle: ModelBundle,
    stats: ItemStats,
    settings: RetrievalSettings,
    history: HistoryQueries | None,
    progress: Progress = SILENT,
) -> RetrievalOutcome:
    """Retrieve the same queries by dot product, by cosine and by popularity; measure each.

    Queries follow ``settings.queries`` (see docs/measures.md); cut-offs ``settings.ks`` (clamped
    to the catalogue with a warning); index ``settings.index``. Raises
    :class:`QueryError` when no queries can be formed, :class:`InputError` for
    ``popularity`` ``users`` without user counts.
    """
    warnings: list[str] = []
    n_items, dim = bundle.n_items, bundle.dim
    popularity = _popularity(stats, settings.popularity, n_items)
    measures = ExposureMeasures(popularity, stats.user_counts, stats.n_users)

    queries, query_source = query_vectors(bundle, settings.queries, history, settings.max_queries, settings.seed)
    n_all = queries.shape[0]
    queries, n_zero = drop_zero_queries(queries)
    if n_zero:
        warnings.append(
            f"{n_zero} of {n_all} query vectors are zero (they score every item 0) "
            "and were left out of retrieval"
        )
    n_queries = int(queries.shape[0])

    ks = sorted({min(k, n_items) for k in settings.ks})
    for k in sorted(set(settings.ks)):
        if k > n_items:
            warnings.append(
                f"cut-off K={k} exceeds the catalogue ({n_items} items); clamped to {n_items}"
            )
    k_max = ks[-1]

    table = bundle.item_table
    check_memory_ceiling(settings.max_memory, dim, "the item table", n_items)
    n_zero_items = _scan_items(table, settings.max_memory)
    if n_zero_items:
        warnings.append(
            f"{n_zero_items} item vectors are zero: cosine never serves them (no direction), "
            "dot scores them 0"
        )

    index_kind = choose_index(settings.index, n_items, n_queries, dim)
    budget = memory_budget(settings.max_memory)
    over_budget = budget is not None and 2 * n_items * dim * 4 > budget
    if index_kind != "exact" and over_budget:
        if settings.index == "auto":
            index_kind = "exact"
        elif settings.max_memory is not None:
            raise InputError(
                f"{setting('index')} {index_kind} builds an in-memory index of the whole item table and its "
                f"normalised copy ({2 * n_items * dim * 4:,} bytes), more than {setting('max_memory')} "
                f"({settings.max_memory:,} bytes); use {setting('index')} exact (searched in shards) or a "
                f"larger {setting('max_memory')}"
            )
    popularity_kind = (
        "distinct training users" if settings.popularity == "users" else "training interactions"
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
        dot_rows, cos_rows, note = _exact_lists(queries, table, k_max, settings, progress, bundle)
        if settings.scheduler and "shards" not in note:
            warnings.append(
                f"{setting('scheduler')} {settings.scheduler} was not used: the table fits in the memory "
                f"ceiling, so it was searched here in one piece (lower {setting('max_memory')} to shard it)"
            )
    else:
        dot_rows, cos_rows, note, recall, recall_note = _approximate_lists(
            queries, table, index_kind, ks, settings.seed, progress
        )
        definitions["recall"] = recall_note
    definitions["index"] = note
    if settings.index == "auto" and over_budget and choose_index("auto", n_items, n_queries, dim) != "exact":
        definitions["index"] += (
            "; auto chose exact: an approximate index would hold the whole table, which "
            "exceeds the memory ceiling"
        )
    elif settings.index == "auto":
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
        popularity=settings.popularity,
        n_zero_queries=n_zero,
        definitions=definitions,
    )
    return RetrievalOutcome(retrieval=retrieval, exposure=exposure, warnings=warnings)


def _exact_lists(
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


def _approximate_lists(
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
