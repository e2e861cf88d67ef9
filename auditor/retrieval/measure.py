"""Retrieval skew: the query population served by dot product, by cosine, by the
norm-aware scorings and by a most-popular list, each measured the same way.

Dot-product serving multiplies every score by the item norm (docs/theory.md §2); cosine
serving removes it. :func:`measure_retrieval` ranks the population's queries
(:mod:`auditor.loading.population`: the training users, their training items excluded)
under every scoring, builds the most-popular list under the same exclusions, and
measures each set of top-K lists with the registered list measures
(:class:`auditor.metrics.list_measures.ExposureMeasures`).

* One population, one set of lists: held-out accuracy reads these same lists, so no
  option but the population's own (``queries``, ``max_queries``, ``seed``,
  ``keep_seen``) changes an exposure figure.
* Ties: every list keeps the top-K contract of :func:`~auditor.retrieval.search.select_topk`
  (higher score, then lower row), so sharded and Dask searches equal one search.
* Zero vectors: a zero query is not ranked; its user stays a row served nothing
  (:attr:`~auditor.model.QueryPopulation.n_unserved`); a zero-norm item has no direction,
  so cosine never serves it; dot still scores it 0.
* Memory: when the table and its sorted copy exceed the ceiling (``max_memory``,
  else half the available memory) exact search runs over row shards that each fit it,
  and ``index`` ``auto`` stays exact (an approximate index would hold the whole table).
  With a ``scheduler`` the shards are searched on that Dask cluster.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from auditor.errors import EmbeddingTableError, InputError, setting
from auditor.model import QueryPopulation
from auditor.memory import approximate_index_bytes, block_rows, check_index_ceiling, check_memory_ceiling, memory_budget
from auditor.metrics.builtin_measures import LIST_MEASURES
from auditor.metrics.exposure import filled_overlap, overlap
from auditor.config import GroupPolicy
from auditor.plugin_api import ListContext, Slots
from auditor.metrics.list_measures import ExposureMeasures
from auditor.metrics.user_measures import group_definitions, group_sizes, group_table, tied_groups_warning, tied_ratio
from auditor.model import ItemStats, ModelBundle
from auditor.progress import SILENT, Progress
from auditor.alpha import alpha_scoring
from auditor.sections import OVERLAP_SERVED, OVERLAP_SERVED_DEFINITION, SERVED
from auditor.result import CutoffMeasures, ListMeasures, Retrieval
from auditor.retrieval.approximate import preflight_note
from auditor.retrieval.popularity import popularity_of
from auditor.retrieval.lists import RetrievalSettings, ScoringLists, approximate_lists, exact_lists
from auditor.retrieval.search import require_finite
from auditor.retrieval.measure_text import (
    alphas_unmeasured,
    low_recall_warning,
    population_section,
    retrieval_definitions,
    sampled_error_warning,
)
from auditor.retrieval.served import reserved_said
from auditor.retrieval.serving import popular_lists, saturation

if TYPE_CHECKING:
    from auditor.hookspecs import ListMeasure
    from auditor.loading.served_catalogue import ServedCatalogue

GroupTables = dict[int, dict[str, list[dict[str, Any]]]]
"""K -> scoring -> the per-user-group rows (``Retrieval.user_groups``)."""
EXACT_FLOP_LIMIT = 4e12
"""``index`` ``auto`` searches exactly while one scoring costs at most this many FLOPs
(2 x n_items x n_queries x dim). At the 50-100 GFLOP/s two cores reach with K=100 that
is under about a minute per scoring; 1M items x 10,000 queries x 64 dims (1.3e12) is
still exact, 10M items x 10,000 x 128 (2.6e13) goes approximate (IVF)."""

@dataclass
class RetrievalOutcome:
    """What :func:`measure_retrieval` hands to the audit."""

    retrieval: Retrieval
    exposure: dict[str, dict[int, np.ndarray]]
    """scoring ("dot", "cosine", "popular", "alpha_<a>") -> K -> exposure count per item row (int64)."""
    warnings: list[str] = field(default_factory=list)
    lists: dict[str, np.ndarray] = field(default_factory=dict)
    """scoring -> (n_queries, K_max) item rows served (-1: empty slot)."""
    popularity: np.ndarray | None = None
    """The popularity per item row the measures used (``popularity`` setting)."""
    context: ListContext | None = None
    """What the list measures were bound to (the per-group table of the report reads it)."""
    not_measured: dict[str, str] = field(default_factory=dict)
    """Scorings asked for but not measured (``alpha_<a>`` under an approximate index), with why."""


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
    return popularity_of(stats, kind)


def _settings_notes(settings: RetrievalSettings, n_items: int) -> list[str]:
    """What the retrieval section measures otherwise than asked: a K clamped to the
    catalogue, an α that is dot or cosine serving (the same lists: no column of their own)."""
    notes = [f"cut-off K={k} exceeds the catalogue ({n_items} items); clamped to {n_items}"
             for k in sorted(set(settings.ks)) if k > n_items]
    notes += [f"{setting('alphas')} {alpha:g} is {scoring} serving, not measured apart: its figures are the {scoring} "
              "column's" for alpha, scoring in ((0.0, "cosine"), (1.0, "dot")) if alpha in settings.alphas]
    return notes


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


def _zero_items_said(n_zero_items: int, said: bool) -> list[str]:
    """The warning on the table's zero rows (``said``: the load stage already gave it)."""
    if not n_zero_items or said:
        return []
    return [f"{n_zero_items} item vectors are zero: cosine never serves them (no direction), dot scores them 0"]


def _scoring_lists(
    population: QueryPopulation,
    table: np.ndarray,
    ks: list[int],
    settings: RetrievalSettings,
    bundle: ModelBundle,
    progress: Progress,
) -> tuple[str, ScoringLists, dict[str, str]]:
    """The index used, every scoring's lists (exact: dot, cosine and each alpha; approximate:
    dot and cosine), and the index's definitions for the report."""
    n_items, dim = table.shape
    queries, exclude = population.vectors, population.exclude
    index_kind = choose_index(settings.index, n_items, population.n_queries, dim)
    budget = memory_budget(settings.max_memory)
    over_budget = budget is not None and approximate_index_bytes(n_items, dim) > budget
    check_index_ceiling(settings.index, settings.max_memory, n_items, dim)
    if index_kind != "exact" and over_budget and settings.index == "auto":
        index_kind = "exact"
    definitions: dict[str, str] = {}
    if index_kind == "exact":
        exponents = tuple(dict.fromkeys((1.0, 0.0, *settings.alphas)))
        lists = exact_lists(queries, table, ks[-1], exponents, exclude, settings, progress, bundle)
    else:
        if settings.index != "auto":  # asked for: say before the build when it will not pay off
            for note in preflight_note(index_kind, n_items, population.n_queries, dim):
                progress.note(f"Warning: {note}")
        lists = approximate_lists(queries, table, index_kind, ks, exclude, settings.seed, progress, settings.max_memory)
        definitions["recall"] = lists.recall_note or ""
    definitions["index"] = lists.note
    if settings.index == "auto" and over_budget and choose_index("auto", n_items, population.n_queries, dim) != "exact":
        definitions["index"] += (
            "; auto chose exact: an approximate index would hold the whole table, which exceeds the memory ceiling"
        )
    elif settings.index == "auto":
        relation = "<=" if index_kind == "exact" else ">"
        definitions["index"] += f"; auto chose {index_kind}: 2*n_items*n_queries*dim {relation} {EXACT_FLOP_LIMIT:.0e}"
    return index_kind, lists, definitions


def with_untrained_lists(
    lists: dict[str, np.ndarray], bundle: ModelBundle, stats: ItemStats, settings: RetrievalSettings,
    untrained: QueryPopulation, progress: Progress = SILENT, served: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """``lists`` (each scoring's, over the queried users) with the ``untrained`` users' rows
    after them, served by every scoring alike: users accuracy alone ranks (RecBole's test
    users without a training interaction), in no exposure figure. The served scoring takes
    their rows of ``served`` (the file's lists, -1 where it has none: a miss)."""
    n_items, n = bundle.n_items, untrained.n_queries
    ks = sorted({min(k, n_items) for k in settings.ks})
    _, found, _ = _scoring_lists(untrained, bundle.item_table, ks, settings, bundle, progress)
    popularity = _popularity(stats, settings.popularity, n_items)
    extra = _named(found, popular_lists(ExposureMeasures(popularity, item_ids=bundle.item_ids), ks[-1], n, untrained.exclude))
    if served is not None:
        extra["served"] = served
    joined = {}
    for name, rows in lists.items():
        added = np.full((n, rows.shape[1]), -1, dtype=np.int64)
        if name in extra:
            part = np.asarray(extra[name])[:, : rows.shape[1]]
            added[:, : part.shape[1]] = part
        joined[name] = np.concatenate([np.asarray(rows, dtype=np.int64), added])
    return joined


def _named(lists: ScoringLists, popular: np.ndarray) -> dict[str, np.ndarray]:
    """Scoring name -> lists: dot, cosine, popular, then alpha_<a> in the order given."""
    named = {"dot": lists.rows[1.0], "cosine": lists.rows[0.0], "popular": popular}
    for alpha, rows in lists.rows.items():
        if alpha not in (0.0, 1.0):
            named[alpha_scoring(alpha)] = rows
    return named


def _measure_lists(
    lists: dict[str, np.ndarray], ks: list[int], measures: ExposureMeasures, n_items: int, progress: Progress,
    served_measures: ExposureMeasures | None = None, served_lists: np.ndarray | None = None,
) -> tuple[dict[int, CutoffMeasures], dict[str, dict[int, np.ndarray]], GroupTables]:
    """Every exposure measure of every scoring's lists at each K, the exposure counts, and
    the per-user-group table (from the figures the group measures just computed on the
    same :class:`Slots`, so at no extra cost; empty without training profiles).
    ``served_measures`` measure the served lists (training items may fill them), over the lists-alone
    catalogue where ``served_lists`` (its indices) are given; the overlaps read the model's rows."""
    at: dict[int, CutoffMeasures] = {}
    exposure: dict[str, dict[int, np.ndarray]] = {name: {} for name in lists}
    tables: GroupTables = {}
    with progress.track("retrieval: exposure measures", len(ks) * len(lists)) as advance:
        for k in ks:
            measured: dict[str, ListMeasures] = {}
            slots: dict[str, Slots] = {}
            for name, rows in lists.items():
                if rows.shape[1] < k:  # served lists shorter than K: not measured at K
                    advance(1)
                    continue
                slots[name] = Slots(rows[:, :k], n_items)
                these = served_measures if name == SERVED and served_measures is not None else measures
                own = slots[name] if name != SERVED or served_lists is None else Slots(served_lists[:, :k],
                                                                                       these.n_items)
                measured[name] = these.measure(own)
                exposure[name][k] = own.counts
                if (table := group_table(these.context, own)) is not None:
                    tables.setdefault(k, {})[name] = [row.to_dict() for row in table]
                advance(1)
            at[k] = CutoffMeasures(
                dot=measured.pop("dot"),
                cosine=measured.pop("cosine"),
                popular=measured.pop("popular"),
                overlap_dot_cosine=filled_overlap(slots["dot"].lists, slots["cosine"].lists, n_items),
                norm_aware=measured,
                overlap_served=_served_overlaps(slots),
            )
    return at, exposure, tables


def _served_measures(measures: ExposureMeasures, served: np.ndarray, population: QueryPopulation,
                     warnings: list[str], definitions: dict[str, str], catalogue: ServedCatalogue | None = None,
                     kind: str = "interactions", list_measures: Sequence[ListMeasure] = LIST_MEASURES,
                     ) -> ExposureMeasures:
    """The served lists' measures, with ``warnings`` saying how many lists re-serve their user's
    training items: whose are PopRSP/PopREO candidates (:mod:`auditor.metrics.parity_candidates`).
    With ``catalogue`` (lists, log and holdout by raw id, as lists alone read them) the measures are bound to
    it, so every served figure is the lists-alone one whatever rows the model's table has (QA13 harms F1, F2)."""
    seen_kept = measures.context.seen_kept
    if catalogue is not None:
        stats = catalogue.stats
        served_measures = ExposureMeasures(
            popularity_of(stats, kind), stats.user_counts, stats.n_users,
            measures=list_measures, item_ids=catalogue.item_ids, profiles=catalogue.profiles,
            relevant=catalogue.relevant, groups=measures.context.groups,
            population=None if catalogue.profiles is None else catalogue.population, seen_kept=seen_kept)
        served, trained = catalogue.lists, catalogue.profiles
        _served_groups_said(measures, served_measures, definitions, warnings)
    else:
        trained, served_measures = population.row_profiles, measures
    if trained is not None:
        warnings += reserved_said(served, trained, served_measures.n_items, seen_kept)
    return served_measures


def _served_groups_said(measures: ExposureMeasures, served: ExposureMeasures, definitions: dict[str, str],
                        warnings: list[str]) -> None:
    """Beside a model: the served scoring's user groups, drawn as lists alone draw them (the log's and the lists'
    items by raw id), where they are not the model's scorings' (items without a row in its table: QA13 harms F1)."""
    mine, theirs = group_sizes(served.context), group_sizes(measures.context)
    if mine is None or mine == theirs:
        return
    definitions["served_user_group_sizes"] = "served scoring's " + group_definitions(served.context)["user_group_sizes"]
    said = "/".join(f"{n:,}" for n in mine), "/".join(f"{n:,}" for n in theirs or ())
    warnings.append(f"the served scoring's user groups (niche/diverse/blockbuster: {said[0]} users) are not the "
                    f"model's scorings' ({said[1]}): the served lists are measured as the same files audited alone "
                    "measure them, over the items of the training log and the lists by raw id, while dot, cosine and "
                    "popular read the model's item rows, which lack some of those items or hold others "
                    "(docs/served-lists.md)")
    if (note := tied_groups_warning(served.context)) is not None and note != tied_groups_warning(measures.context):
        warnings.append(f"the served scoring's groups: {note}")


def _served_overlaps(slots: dict[str, Slots]) -> dict[str, float]:
    """The share of dot's, cosine's and popular's top-K found in the served top-K (with served lists)."""
    if SERVED not in slots:
        return {}
    served = slots[SERVED].lists
    # Over the queries the file has a list for, as every other served figure and as the lists alone:
    # a queried user without a list (counted in served.n_queried_without_list) is no 0 of overlap.
    listed = (served >= 0).any(axis=1) & (slots["dot"].lists >= 0).any(axis=1)  # not an unserved user's
    return {name: overlap(slots[name].lists[listed], served[listed], slots[SERVED].n_items) for name in OVERLAP_SERVED}


def measure_retrieval(
    bundle: ModelBundle,
    stats: ItemStats,
    settings: RetrievalSettings,
    population: QueryPopulation,
    progress: Progress = SILENT,
    list_measures: Sequence[ListMeasure] = LIST_MEASURES,
    *,
    relevant: tuple[np.ndarray, np.ndarray] | None = None,
    groups: GroupPolicy | None = None,
    served: np.ndarray | None = None,
    zero_rows_said: bool = False,
    served_catalogue: ServedCatalogue | None = None,
) -> RetrievalOutcome:
    """Serve the ``population`` by dot product, cosine, every ``settings.alphas`` and
    popularity; measure each scoring's lists at every cut-off. ``zero_rows_said``: the
    load stage already warned of this very table's zero rows (not repeated).

    Cut-offs ``settings.ks`` are clamped to the catalogue with a warning; index
    ``settings.index``. ``list_measures``: the registered list measures (default: the
    built-in ones); ``relevant``: CSR of each query's held-out items (the group NDCG and
    PopREO); ``groups``: the popularity groups' cut-offs (default: GroupPolicy's);
    ``served``: the served lists of the queried users (rows aligned with the population,
    as wide as the longest list), measured as the ``served`` scoring at each K up to its width, over
    ``served_catalogue`` where given (as lists alone). Raises :class:`InputError` for ``popularity`` ``users`` without
    user counts, :class:`EmbeddingTableError` for NaN/inf item vectors.
    """
    warnings: list[str] = list(population.warnings)
    n_items, dim = bundle.n_items, bundle.dim
    popularity = _popularity(stats, settings.popularity, n_items)
    groups = groups or GroupPolicy()
    measures = ExposureMeasures(popularity, stats.user_counts, stats.n_users, measures=list_measures,
                                item_table=bundle.item_table, item_ids=bundle.item_ids,
                                profiles=population.row_profiles, relevant=relevant, groups=groups,
                                seen_kept=population.seen_items == "kept")
    warnings += [note] if (note := tied_groups_warning(measures.context)) else []
    ks = sorted({min(k, n_items) for k in settings.ks})
    warnings += _settings_notes(settings, n_items)
    table = bundle.item_table
    check_memory_ceiling(settings.max_memory, dim, "the item table", n_items)
    warnings += _zero_items_said(_scan_items(table, settings.max_memory), zero_rows_said)
    index_kind, found, definitions = _scoring_lists(population, table, ks, settings, bundle, progress)
    warnings += low_recall_warning(index_kind, found.recall) + found.notes + sampled_error_warning(index_kind, found, popularity, ks)
    exclude = None if population.exclude is None else population.row_profiles
    lists = _unserved_empty(_named(found, popular_lists(measures, ks[-1], population.n_rows, exclude)), population)
    definitions.update(retrieval_definitions(list_measures, settings, population))
    definitions.update(group_definitions(measures.context))
    served_measures = None
    if served is not None:
        lists[SERVED] = served
        definitions["overlap_served"] = OVERLAP_SERVED_DEFINITION
        served_measures = _served_measures(measures, served, population, warnings, definitions, served_catalogue,
                                           settings.popularity, list_measures)
    at, exposure, group_tables = _measure_lists(lists, ks, measures, n_items, progress, served_measures,
                                                None if served_catalogue is None else served_catalogue.lists)
    retrieval = Retrieval(
        n_queries=population.n_queries,
        index=index_kind,
        at=at,
        recall=found.recall,
        queries=population.description,
        popularity=settings.popularity,
        n_zero_queries=population.n_zero,
        definitions=definitions,
        list_measures=measures.info,
        population=population_section(population),
        user_groups=group_tables,
        tied_ratio=tied_ratio(measures.context),
        **saturation(ks, n_items, population.n_queries, population.exclude),
    )
    return RetrievalOutcome(retrieval=retrieval, exposure=exposure, warnings=warnings, lists=lists,
                            popularity=popularity, context=measures.context,
                            not_measured=alphas_unmeasured(settings, index_kind))


def _unserved_empty(lists: dict[str, np.ndarray], population: QueryPopulation) -> dict[str, np.ndarray]:
    """``lists`` with an empty row per unserved user (a zero query vector) for every scoring
    but the most-popular list, which reads no vector: in their group, a miss, in no exposure."""
    if not population.n_unserved:
        return lists
    return {name: rows if name == "popular" else np.vstack(
        (rows, np.full((population.n_unserved, rows.shape[1]), -1, dtype=rows.dtype))) for name, rows in lists.items()}
