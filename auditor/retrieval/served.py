"""Served lists measured (``recommendations``, docs/served-lists.md).

With a model, the served lists are one more scoring of :func:`auditor.retrieval.measure_retrieval`
(``served``, beside dot, cosine and popular, with their overlaps); this module describes
the file for the report's ``served`` section (:func:`describe_served`). Without a model,
:func:`measure_served` measures the lists alone: every registered list measure of the
served lists and of the most-popular list at each K, over the catalogue the lists were
read against, and the top-1% items' share of the training interactions that the
lists-only verdict compares the served head share with (:mod:`auditor.lists_verdict`).

The most-popular list of a lists-only audit is the same K most popular items for every
user: which items the service excluded for each user (their history, or anything else)
is not known, so none is excluded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from auditor.config import GroupPolicy
from auditor.loading.served_lists import ServedLists
from auditor.loading.csr import own_rows, own_slots
from auditor.metrics.builtin_measures import LIST_MEASURES
from auditor.metrics.exposure import overlap
from auditor.metrics.user_measures import group_definitions, tied_groups_warning
from auditor.metrics.list_measures import ExposureMeasures
from auditor.metrics.popularity_sets import head_mask
from auditor.model import ItemStats
from auditor.plugin_api import Slots
from auditor.progress import SILENT, Progress
from auditor.retrieval.popularity import popularity_of
from auditor.retrieval.serving import Exclusions, popular_lists
from auditor.sections import ListMeasures
from auditor.served_section import ServedCutoff, ServedSection

if TYPE_CHECKING:
    from auditor.hookspecs import ListMeasure

HEAD_PERCENT = 1.0
"""The verdict's head: the top 1% of items by popularity (ties at the cut included)."""
POPULAR_DEFINITION = (
    "popular: the K most popular items of the training log (ties by catalogue row) that the served user did not "
    "train on, as with a model (the same list for every user where the log names no users, or with keep_seen)"
)
CATALOGUE_DEFINITION = (
    "catalogue: the distinct items of the training log and of the served lists; items served but never trained "
    "count as popularity 0 (coverage and Gini are over this catalogue)"
)


@dataclass
class ServedOutcome:
    """A lists-only audit's measures, exposure counts and warnings."""

    section: ServedSection
    exposure: dict[str, dict[int, np.ndarray]] = field(default_factory=dict)
    """``served``/``popular`` -> K -> exposure count per catalogue row."""
    warnings: list[str] = field(default_factory=list)
    lists: dict[str, np.ndarray] = field(default_factory=dict)
    """``served``/``popular`` -> (users, K) item rows measured (held-out accuracy reads the same lists)."""


def describe_served(served: ServedLists, n_without_list: int | None = None) -> ServedSection:
    """The ``served`` section of a file: who was served, how it was read, what was counted."""
    filled = (served.lists >= 0).sum(axis=1)
    return ServedSection(
        source=str(served.source),
        n_users=served.n_users,
        n_rows=served.n_rows,
        longest=served.matrix.longest,
        shortest=int(filled.min()) if filled.size else 0,
        order=f"{served.order.kind} column {served.order.name!r}",
        n_catalogue=served.items.n_items,
        n_queried_without_list=n_without_list,
        n_unknown_users=served.n_unknown_users,
        n_cold_items=served.n_cold_items,
        n_unknown_items=served.n_unknown_items,
        cold_slot_share=served.cold_slot_share,
    )


def short_lists_beside(rows: np.ndarray, ks: Sequence[int]) -> dict[int, int]:
    """Beside a model: per K, the queried users' served lists (``rows``, -1 empty slots; users
    without a list left out) filling fewer than K of their first K slots, as lists alone count
    them (a slot of an item without a table row is empty)."""
    filled = np.asarray(rows) >= 0
    listed = filled[filled.any(axis=1)]
    return {int(k): int((listed[:, :k].sum(axis=1) < k).sum()) for k in ks}


def short_lists_said(short: Mapping[int, int], n_lists: int, lists: str) -> list[str]:
    """A warning per K where some of the ``n_lists`` ``lists`` fill fewer than K slots (``short``:
    K -> how many, the counts of ``served.short_lists``)."""
    return [f"at K={k}, {n:,} of the {n_lists:,} {lists} hold fewer than {k} items: measured over the slots they fill"
            for k, n in sorted(short.items()) if n]


def training_slots(lists: np.ndarray, profiles: tuple[np.ndarray, np.ndarray], n_items: int) -> tuple[int, int]:
    """(filled slots of ``lists`` holding an item of that user's training items ``profiles``
    (CSR at the list rows), filled slots): served lists are measured as served, so a report says
    how many of their slots a model's lists, which skip training items, could not hold."""
    return own_slots(lists, *profiles, n_items), int((lists >= 0).sum())


def unlisted_users_said(profiles: tuple[np.ndarray, np.ndarray], population: tuple[np.ndarray, np.ndarray]) -> list[str]:
    """A warning when some users of the training log (``population``) have no served list
    (``profiles``: the listed users' training items): they are grouped, not measured."""
    n_users = int((np.diff(population[0]) > 0).sum())
    unlisted = n_users - int((np.diff(profiles[0]) > 0).sum())
    if unlisted <= 0:
        return []
    return [f"{unlisted:,} of the {n_users:,} users of the training log have no served list: the user groups are "
            "drawn among all of them (a user's group is a property of their training profile, as beside a model), "
            "and those users contribute no list figure (each group's figures are over its users with a list; with a "
            "holdout, their held-out items are misses of the accuracy and the group NDCG, as beside a model)"]


def reserved_said(
    lists: np.ndarray, profiles: tuple[np.ndarray, np.ndarray], n_items: int, seen_kept: bool = False,
    log_read_whole: bool = False,
) -> list[str]:
    """A warning when some served lists (``lists``, rows of ``profiles``: each user's training
    items) re-serve training items of their user: PopRSP and PopREO count those users'
    training items among their candidates, or every user's with ``seen_kept`` (keep_seen)
    (docs/measures.md, "Item-side measures"). ``log_read_whole``: the log is a whole RecBole
    ``.inter`` (:func:`auditor.loading.served_inputs.whole_inter_said`), held-out part
    included, so an item a list shares with it may be a test hit: said so, never claimed
    to be a training item."""
    users = own_rows(lists, *profiles, n_items)
    if not users:
        return []
    listed = int((np.asarray(lists) >= 0).any(axis=1).sum())
    if log_read_whole:
        return [f"{users:,} of the {listed:,} served lists hold some items their user has in the training log, a "
                "RecBole .inter read whole (its test and validation interactions included): these may be held-out "
                "hits rather than re-served training items; for those users PopRSP and PopREO count them among the "
                + ("candidates, as every user's with keep_seen" if seen_kept else
                   "candidates (Σ_u |g| instead of Σ_u |g − T_u|); every other user's exclude them, as Elliot's")]
    if seen_kept:
        return [f"{users:,} of the {listed:,} served lists re-serve some of their user's training items; with "
                "keep_seen PopRSP and PopREO count every user's training items among the candidates (Σ_u |g|), "
                "as for a model's scorings"]
    return [f"{users:,} of the {listed:,} served lists re-serve some of their user's training items: for those "
            "users PopRSP and PopREO count their training items among the candidates (Σ_u |g| instead of "
            "Σ_u |g − T_u|); every other user's exclude them, as Elliot's"]


HELD_OUT_MEASURES = ("ndcg_", "pop_reo")
"""The measures read on held-out users (prefixes): the popular list's are over every evaluated user."""


def _popular_measures(measures: ExposureMeasures, popular: Slots, n_listed: int) -> ListMeasures:
    """The popular list's measures: its exposure figures over the served users (rows before
    ``n_listed``), as the served lists'; its held-out figures over every evaluated user, the
    held-out log users without a served list included (the rows past), as its accuracy."""
    if popular.lists.shape[0] == n_listed:
        return measures.measure(popular)
    listed = np.array(popular.lists)
    listed[n_listed:] = -1  # no exposure figure counts an empty list
    exposure, held = measures.measure(Slots(listed, popular.n_items)), measures.measure(popular)
    return ListMeasures({name: held[name] if name.startswith(HELD_OUT_MEASURES) else value
                         for name, value in exposure.items()})


def graded_popularity(served: ServedLists, stats: ItemStats, kind: str) -> np.ndarray:
    """The grade's popularity (``kind``: :func:`popularity_of`) per grade item: the lists' item rows (a model's,
    or the lists' catalogue alone), then beside a model the items it has no row for, by raw id
    (:attr:`ServedLists.rowless`: listed, or in the training log), as lists alone count them (QA "Served N3")."""
    rows = popularity_of(stats, kind)
    return rows if served.rowless is None else np.concatenate((rows, served.rowless.popularity(kind)))


def _rowless_slots(served: ServedLists) -> tuple[np.ndarray, np.ndarray]:
    """(position, grade item) of each slot the lists left empty for an item without a row (none alone)."""
    rowless = served.rowless
    if rowless is None:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    return rowless.slot_positions, served.items.n_items + rowless.slot_items


def graded_head(served: ServedLists, popularity: np.ndarray) -> np.ndarray:
    """The grade's top-1% head (ties at the cut in) over the grade items (``popularity``, :func:`graded_popularity`),
    one catalogue with a model or without: the items with training popularity and the items served, as lists
    alone number them (the log's items and the lists', by raw id where a model has no row for them). A model's
    rows neither trained on nor served (new catalogue entries, RecBole's rows of valid/test-only items), or a
    counts file's items with count 0, would put the cut at another c (QA "Served N1": 3 items of 300 rows instead
    of 1 of 97): they are left out of the count, so adding MODEL never moves the head."""
    catalogue = np.asarray(popularity) > 0
    catalogue[served.lists[served.lists >= 0]] = True
    catalogue[_rowless_slots(served)[1]] = True
    head = np.zeros(catalogue.shape[0], dtype=bool)
    head[catalogue] = head_mask(np.asarray(popularity)[catalogue], HEAD_PERCENT)
    return head


def graded_shares(served: ServedLists, stats: ItemStats, kind: str,
                  ks: Sequence[int]) -> tuple[float | None, dict[int, float | None]]:
    """The served lists' grade, one policy with a model or without (docs/served-lists.md, "Severity"):
    (the head's share of all training popularity (``kind``), ``head_share_log``; K -> the head's share of the
    filled top-K slots (as ``head_share_1pct``) over every list of the file, at each of ``ks`` at most the lists'
    length (:meth:`ServedLists.cutoffs`), ``head_share_every_list``), the head over the grade's catalogue
    (:func:`graded_head`). The lists are a record of what was served: grading them needs only their slots and the
    log's popularity, by raw id, nothing of the model, so adding MODEL never drops a list (a user the log lacks,
    one sampled out or not queried), a K, or an item it has no row for from the severity, nor moves its head
    (QA "Served F1", "Served F2", "Served N1", "Served N3")."""
    popularity = graded_popularity(served, stats, kind)
    head = graded_head(served, popularity)
    total = float(popularity.sum())
    log = float(popularity[head].sum()) / total if total > 0 else None
    return log, head_shares(served.lists, head, served.cutoffs(ks), _rowless_slots(served))


def popular_reference(served: ServedLists, stats: ItemStats, kind: str, popular: np.ndarray, rows: np.ndarray,
                      ks: Sequence[int]) -> dict[int, float | None]:
    """The reference quoted beside the grade (QA "Served N2", "Served N4"): K -> the grade's head's
    (:func:`graded_head`) share of the most-popular list's filled top-K slots (``popular``, item rows aligned with
    ``rows``: the served lists of the same users), over the users with a list, at the grade's K's. Beside a model
    the lists the model does not query (users the log lacks, sampled out) have no popular list of the model's: the
    sentence says whose lists the reference covers."""
    listed = (rows >= 0).any(axis=1)
    head = graded_head(served, graded_popularity(served, stats, kind))
    return head_shares(popular[listed], head, served.cutoffs(ks))


def _grade(section: ServedSection, served: ServedLists, stats: ItemStats, kind: str, popular: np.ndarray,
           ks: Sequence[int]) -> None:
    """Lists alone: the grade (:func:`graded_shares`, as beside a model) and the reference quoted beside it, the
    most-popular list (``popular``, the served users' rows) over the grade's head (:func:`popular_reference`)."""
    section.head_share_log, section.head_share_every_list = graded_shares(served, stats, kind, ks)
    section.head_share_popular = popular_reference(served, stats, kind, popular, served.lists, ks)


def graded_apart_said(served: ServedLists, n_apart: int, apart: str) -> list[str]:
    """Beside a model: the warning saying that the grade covers ``n_apart`` lists the served
    scoring's per-K figures do not (``apart``: why). Empty when none (a K past the lists' length
    graded at their length is said where the served scoring is not measured there)."""
    if not n_apart:
        return []
    return [f"the severity grades the served lists of {served.source} by the lists-only rule over all "
            f"{served.n_users:,} lists, as lists alone do (served.head_share_every_list); {apart}: adding the model "
            "never drops a list from the grade"]


def head_shares(rows: np.ndarray, head: np.ndarray, ks: Sequence[int],
                rowless: tuple[np.ndarray, np.ndarray] | None = None) -> dict[int, float | None]:
    """K -> the share of the filled top-K slots of ``rows`` (-1: empty slot) holding an item of
    ``head`` (a mask over the grade items), as ``head_share_1pct`` (None: no slot filled); ``rowless``:
    (position, grade item) of the empty slots that hold an item without a row, counted as filled."""
    positions, items = rowless if rowless is not None else (np.empty(0, dtype=np.int64),) * 2
    shares: dict[int, float | None] = {}
    for k in ks:  # one gather per cut-off, over every list at once
        filled = rows[:, :k][rows[:, :k] >= 0]
        extra = items[positions < k]
        n = filled.size + extra.size
        shares[int(k)] = float((head[filled].sum() + head[extra].sum()) / n) if n else None
    return shares


def measure_served(
    served: ServedLists,
    stats: ItemStats,
    ks: Sequence[int],
    popularity: str = "interactions",
    list_measures: Sequence[ListMeasure] = LIST_MEASURES,
    progress: Progress = SILENT,
    *,
    profiles: tuple[np.ndarray, np.ndarray] | None = None,
    relevant: tuple[np.ndarray, np.ndarray] | None = None,
    groups: GroupPolicy | None = None,
    exclude_popular: Exclusions | None = None,
    population: tuple[np.ndarray, np.ndarray] | None = None,
    n_unlisted: int = 0,
    seen_kept: bool = False,
    log_read_whole: bool = False,
) -> ServedOutcome:
    """Every list measure of the served lists and of the most-popular list at each of
    ``ks`` (each at most the lists' width), over ``served``'s catalogue; ``profiles`` and
    ``relevant`` (CSR at the list rows: training and held-out items) feed the user- and
    item-side measures, grouped by ``groups`` among ``population`` (CSR of every log user's
    training items, as a model's queried users: a user's group does not depend on who else
    was served a list; None: among the list rows). The most-popular list skips each user's
    ``exclude_popular`` rows (their training items), as a model's popular list skips them:
    ``*_popular@K`` is one list under one name with or without a model. ``n_unlisted``:
    rows of ``profiles`` and ``relevant`` past the lists' (held-out users of the log without a
    list), served an empty list, as beside a model: their held-out items are misses; no
    exposure or list figure counts an empty list. ``seen_kept`` (keep_seen): every user's
    training items are PopRSP/PopREO candidates, as for a model's scorings. ``log_read_whole``:
    the log is a whole RecBole ``.inter`` (:func:`reserved_said`)."""
    lists = served.lists if not n_unlisted else np.vstack(
        (served.lists, np.full((n_unlisted, served.k), -1, dtype=served.lists.dtype)))
    listed = slice(0, served.n_users)
    weights = popularity_of(stats, popularity)
    n_items = served.items.n_items
    groups = groups or GroupPolicy()
    measures = ExposureMeasures(weights, stats.user_counts, stats.n_users, measures=list_measures,
                                item_ids=served.items.item_ids, profiles=profiles, relevant=relevant,
                                groups=groups, population=None if profiles is None else population,
                                seen_kept=seen_kept)
    popular = popular_lists(measures, max(ks), lists.shape[0], exclude_popular)
    section = describe_served(served)
    exposure: dict[str, dict[int, np.ndarray]] = {"served": {}, "popular": {}}
    warnings: list[str] = [note] if (note := tied_groups_warning(measures.context)) else []
    if profiles is not None and population is not None:
        warnings += unlisted_users_said((profiles[0][:served.n_users + 1], profiles[1]), population)
    if profiles is not None:
        warnings += reserved_said(lists, profiles, n_items, seen_kept, log_read_whole)
    with progress.track("served lists: exposure measures", len(ks)) as advance:
        for k in ks:
            mine, theirs = Slots(lists[:, :k], n_items), Slots(popular[:, :k], n_items)
            short = int(((served.lists[:, :k] >= 0).sum(axis=1) < k).sum())
            warnings += short_lists_said({k: short}, served.n_users, "served lists")
            # k <= the longest list <= the catalogue (a list shows an item once): both are k wide.
            section.at[k] = ServedCutoff(served=measures.measure(mine),
                                         popular=_popular_measures(measures, theirs, served.n_users),
                                         overlap_popular=overlap(theirs.lists[listed], mine.lists[listed]),
                                         n_short_lists=short)
            exposure["served"][k], exposure["popular"][k] = mine.counts, theirs.counts
            advance(1)
    _grade(section, served, stats, popularity, popular[listed], ks)
    section.list_measures = measures.info
    section.definitions = {m.name: m.definition for m in list_measures}
    section.definitions.update(
        popular=POPULAR_DEFINITION, catalogue=CATALOGUE_DEFINITION,
        overlap_served_popular="overlap_served_popular: mean over users of |served list ∩ popular list| / K",
        head_share_log="head_share_log: the top-1% items' share of the training popularity "
                       f"({'distinct users' if popularity == 'users' else 'interactions'}), the verdict's reference; "
                       "the top 1% counted over the items trained on or served, as beside a model",
        **group_definitions(measures.context),
    )
    return ServedOutcome(section=section, exposure=exposure, warnings=warnings,
                         lists={"served": lists, "popular": np.asarray(popular)})
