"""Retrieval skew: the same queries served by dot product, by cosine and a popular list.

Dot-product serving multiplies every score by the item norm (docs/theory.md §2); cosine
serving removes it. :func:`measure_retrieval` runs both searches with FAISS, builds the
most-popular reference list, and measures each set of top-K lists with the registered
list measures (:class:`auditor.metrics.list_measures.ExposureMeasures`).

* Ties: every list keeps the top-K contract of :func:`~auditor.retrieval.search.select_topk`
  (higher score, then lower row), so sharded and Dask searches equal one search.
* Zero vectors: zero queries are dropped (counted and warned); a zero-norm item has no
  direction, so cosine never serves it; dot still scores it 0.
* Memory: when the table and its normalised copy exceed the ceiling (``max_memory``,
  else half the available memory) exact search runs over row shards that each fit it,
  and ``index`` ``auto`` stays exact (an approximate index would hold the whole table).
  With a ``scheduler`` the shards are searched on that Dask cluster.
* Held-out evaluation (``served``): the given queries are ranked exactly under every
  scoring in one pass (:mod:`auditor.retrieval.serving`), each query's training items
  excluded, and the same measures are taken for every scoring.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

from auditor.errors import EmbeddingTableError, InputError, setting
from auditor.loading.history import HistoryQueries
from auditor.memory import block_rows, check_memory_ceiling, memory_budget
from auditor.metrics.builtin_measures import LIST_MEASURES
from auditor.metrics.exposure import OVERLAP_DEFINITION, Slots, overlap
from auditor.metrics.list_measures import ExposureMeasures
from auditor.model import ItemStats, ModelBundle
from auditor.progress import SILENT, Progress
from auditor.result import CutoffMeasures, ListMeasures, Retrieval
from auditor.retrieval.lists import approximate_lists, exact_lists
from auditor.retrieval.queries import drop_zero_queries, query_vectors
from auditor.retrieval.search import require_finite
from auditor.retrieval.serving import SERVED_INDEX_NOTE, ServedQueries, served_lists

if TYPE_CHECKING:
    from auditor.hookspecs import ListMeasure

EXACT_FLOP_LIMIT = 4e12
"""``index`` ``auto`` searches exactly while one scoring costs at most this many FLOPs
(2 x n_items x n_queries x dim). At the 50-100 GFLOP/s two cores reach with K=100 that
is under about a minute per scoring; 1M items x 10,000 queries x 64 dims (1.3e12) is
still exact, 10M items x 10,000 x 128 (2.6e13) goes approximate (IVF)."""

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
    """scoring ("dot", "cosine", "popular", "alpha_<a>") -> K -> exposure count per item row (int64)."""
    warnings: list[str] = field(default_factory=list)
    lists: dict[str, np.ndarray] = field(default_factory=dict)
    """scoring -> (n_queries, K_max) item rows served (-1: empty slot)."""


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


def _dot_cosine_popular(
    queries: np.ndarray,
    table: np.ndarray,
    ks: list[int],
    settings: RetrievalSettings,
    measures: ExposureMeasures,
    bundle: ModelBundle,
    progress: Progress,
    definitions: dict[str, str],
    warnings: list[str],
) -> tuple[str, dict[str, np.ndarray], dict[int, float] | None]:
    """The index used, the dot, cosine and popular lists, and an approximate index's recall."""
    n_items, dim = table.shape
    n_queries, k_max = queries.shape[0], ks[-1]
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
    recall: dict[int, float] | None = None
    if index_kind == "exact":
        dot_rows, cos_rows, note = exact_lists(queries, table, k_max, settings, progress, bundle)
        if settings.scheduler and "shards" not in note:
            warnings.append(
                f"{setting('scheduler')} {settings.scheduler} was not used: the table fits in the memory "
                f"ceiling, so it was searched here in one piece (lower {setting('max_memory')} to shard it)"
            )
    else:
        dot_rows, cos_rows, note, recall, recall_note = approximate_lists(
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

    popular = np.broadcast_to(measures.popular_list(k_max), (n_queries, k_max))
    return index_kind, {"dot": dot_rows, "cosine": cos_rows, "popular": popular}, recall


def _measure_lists(
    lists: dict[str, np.ndarray], ks: list[int], measures: ExposureMeasures, n_items: int, progress: Progress
) -> tuple[dict[int, CutoffMeasures], dict[str, dict[int, np.ndarray]]]:
    """Every exposure measure of every scoring's lists at each K, and the exposure counts."""
    at: dict[int, CutoffMeasures] = {}
    exposure: dict[str, dict[int, np.ndarray]] = {name: {} for name in lists}
    with progress.track("retrieval: exposure measures", len(ks) * len(lists)) as advance:
        for k in ks:
            measured: dict[str, ListMeasures] = {}
            slots: dict[str, Slots] = {}
            for name, rows in lists.items():
                slots[name] = Slots(rows[:, :k], n_items)
                measured[name] = measures.measure(slots[name])
                exposure[name][k] = slots[name].counts
                advance(1)
            at[k] = CutoffMeasures(
                dot=measured.pop("dot"),
                cosine=measured.pop("cosine"),
                popular=measured.pop("popular"),
                overlap_dot_cosine=overlap(slots["dot"].lists, slots["cosine"].lists),
                norm_aware=measured,
            )
    return at, exposure


def measure_retrieval(
    bundle: ModelBundle,
    stats: ItemStats,
    settings: RetrievalSettings,
    history: HistoryQueries | None,
    progress: Progress = SILENT,
    served: ServedQueries | None = None,
    list_measures: Sequence[ListMeasure] = LIST_MEASURES,
) -> RetrievalOutcome:
    """Retrieve the same queries by dot product, by cosine and by popularity; measure each.

    Queries follow ``settings.queries`` (see docs/measures.md); cut-offs ``settings.ks`` (clamped
    to the catalogue with a warning); index ``settings.index``. With ``served`` (held-out
    evaluation) its queries are ranked instead, exactly, under every scoring at once
    (dot, cosine, popular and ``served.alphas``) with each query's excluded rows left out.
    ``list_measures``: the registered list measures (default: the built-in ones).
    Raises :class:`QueryError` when no queries can be formed, :class:`InputError` for
    ``popularity`` ``users`` without user counts.
    """
    warnings: list[str] = []
    n_items, dim = bundle.n_items, bundle.dim
    popularity = _popularity(stats, settings.popularity, n_items)
    measures = ExposureMeasures(popularity, stats.user_counts, stats.n_users, measures=list_measures,
                                item_table=bundle.item_table, item_ids=bundle.item_ids)

    if served is None:
        queries, query_source = query_vectors(bundle, settings.queries, history, settings.max_queries, settings.seed)
        n_all = queries.shape[0]
        queries, n_zero = drop_zero_queries(queries)
        if n_zero:
            warnings.append(
                f"{n_zero} of {n_all} query vectors are zero (they score every item 0) "
                "and were left out of retrieval"
            )
    else:  # the caller formed these queries and dropped zero ones
        queries, query_source, n_zero = served.vectors, served.description, 0
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

    popularity_kind = (
        "distinct training users" if settings.popularity == "users" else "training interactions"
    )
    definitions = {m.name: m.definition for m in list_measures}
    definitions["overlap_dot_cosine"] = OVERLAP_DEFINITION
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
    if served is not None:
        index_kind = "exact"
        lists = served_lists(queries, table, k_max, served, measures, progress, settings.max_memory)
        definitions["index"] = SERVED_INDEX_NOTE
        if settings.index not in ("auto", "exact"):
            warnings.append(
                f"{setting('index')} {settings.index} was not used: held-out evaluation ranks exactly"
            )
    else:
        index_kind, lists, recall = _dot_cosine_popular(
            queries, table, ks, settings, measures, bundle, progress, definitions, warnings
        )
    at, exposure = _measure_lists(lists, ks, measures, n_items, progress)
    retrieval = Retrieval(
        n_queries=n_queries,
        index=index_kind,
        at=at,
        recall=recall,
        queries=query_source,
        popularity=settings.popularity,
        n_zero_queries=n_zero,
        definitions=definitions,
        list_measures=measures.info,
    )
    return RetrievalOutcome(retrieval=retrieval, exposure=exposure, warnings=warnings, lists=lists)
