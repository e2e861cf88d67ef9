"""Served lists in the load stage (``recommendations``, docs/served-lists.md).

Two ways in:

* **with a model** (:func:`served_for_model`): the lists are read through the audit's own
  item rows and lined up with the queried users (row q: user q's served list, -1 where the
  file has none), so retrieval measures them as the ``served`` scoring beside dot, cosine
  and popular, and held-out accuracy scores them on the same users.
* **lists alone** (:func:`load_lists_inputs`): no model, no table rows; the lists are
  numbered over the catalogue of the training log and the lists, and the log's counts are
  aligned to that catalogue.

Every policy of reading (repeats refused, gaps compacted, cold items kept...) is
:mod:`auditor.loading.served_lists`'; this module only decides what the lists are read
against and which cut-offs they can answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from auditor.config import AuditConfig
from auditor.errors import IdMappingError, setting
from auditor.idmap import check_holdout_shift
from auditor.loading.alignment import align_counts
from auditor.loading.counting import count_item_ids
from auditor.loading.history import eligible_users
from auditor.loading.csr import build_csr
from auditor.loading.holdout import read_holdout
from auditor.loading.ids import ids_to_numpy
from auditor.loading.logs import open_log, read_ids
from auditor.loading.served_ids import refuse_unmatched_users, unmatched_users_reason
from auditor.loading.served_lists import NOT_MEASURED, ServedLists, lists_for, read_served_lists
from auditor.loading.served_rowless import with_log_counts
from auditor.loading.sniff import name_as_read
from auditor.loading.statistics import InputCache, counts_users
from auditor.model import HeldOutQueries, ItemStats, ModelBundle, QueryPopulation
from auditor.progress import SILENT, Progress
from auditor.values import ItemRows, LogSpec, lookup_rows
from auditor.wording import plural


@dataclass
class ListsInputs:
    """What a lists-only audit measures: the lists, the log's counts over their catalogue,
    the cut-offs they answer, and what was warned about."""

    served: ServedLists
    stats: ItemStats
    ks: tuple[int, ...]
    """The requested cut-offs the lists can answer (each at most the longest list)."""
    warnings: list[str] = field(default_factory=list)
    heldout: HeldOutQueries | None = None
    """The held-out items of the served users who have some (``holdout``), at their list rows."""
    profiles: tuple[np.ndarray, np.ndarray] | None = None
    """CSR of each served user's training items (list rows; the user- and item-side
    measures read them); None without a log of users, or when no served user is one of its users."""
    population: tuple[np.ndarray, np.ndarray] | None = None
    """CSR of every training-log user's training items (the users the user groups are drawn
    among, as a model's queried users are, with a served list or not); None with ``profiles``."""
    n_unlisted: int = 0
    """Held-out users of the training log without a served list, at the rows past the
    lists' (``heldout``, ``profiles``): served nothing, so each counts as a miss, as
    beside a model (docs/served-lists.md, "Policies")."""
    unmatched_users: str | None = None
    """Why the figures that need each user's training items are not measured: no served
    user is a user of the log (:func:`~auditor.loading.served_ids.unmatched_users_reason`)."""
    log_read_whole: bool = False
    """The training log is a whole RecBole ``.inter`` (:func:`whole_inter_said`): the items a
    list shares with its user's log may be held-out hits, not re-served training items."""


def served_for_model(
    config: AuditConfig, bundle: ModelBundle, population: QueryPopulation | None, cache: InputCache,
    progress: Progress = SILENT, evaluates_untrained: bool = False, log_users: np.ndarray | None = None,
) -> tuple[ServedLists, np.ndarray | None, list[str]]:
    """The served lists read through the model's item rows; their rows lined up with the
    queried users, as wide as the longest list (None: the queries have no user identity:
    the served scoring is measured at each K up to that width, as lists alone are); and
    the warnings (the reader's, queried users without a list, cut-offs above the lists).
    ``log_users``: without a population (retrieval not measured), the training log's users
    (:func:`unqueried_log_users`), whose lists still grade the severity."""
    spec = config.served_log
    assert spec is not None
    counted = config.interactions or config.frequencies
    counts = None if counted is None else cache.item_counts(config, need_users=counts_users(config), progress=progress)
    log_users = log_users if population is None else population.eligible_ids
    served = read_served_lists(
        spec, rank_col=config.rank_col, score_col=config.score_col, items=config.item_rows(bundle),
        log_items=None if counts is None else counts.ids, log_users=log_users, max_k=max(config.ks),
        max_memory=config.max_memory, progress=progress,
    )
    if counts is not None and served.rowless is not None and not evaluates_untrained:
        # The grade counts items without a row by raw id, as lists alone (RecBole's route counts the run's
        # training split, which the log read whole is not: its items without a row stay at 0).
        served = replace(served, rowless=with_log_counts(served.rowless, counts, config.item_rows(bundle)))
    notes = list(served.warnings)
    if evaluates_untrained:  # RecBole's test users who never trained: their lists are scored for accuracy
        notes = [note.replace(NOT_MEASURED, NOT_QUERIED) for note in notes]
    above = sorted(k for k in set(config.ks) if k > served.k)
    if above:  # as lists alone: a K the lists cannot fill is not measured, so a gate there cannot pass unseen
        notes.append(
            f"the served lists of {served.source} hold at most {served.k:,} items: the served scoring is not measured "
            f"at K={', '.join(map(str, above))} ({setting('ks')} {served.k} measures them at their length); the "
            f"severity grades them at K={served.k}, their length, as lists alone do"
        )
    if population is None:  # no retrieval: the lists are described, not measured
        return served, None, notes
    if (row_ids := population.row_ids) is None:
        notes.append(f"the queries of {setting('queries')} {config.queries} carry no user identity: the served lists "
                     f"of {served.source} cannot be lined up with them, so the served scoring is not measured")
        return served, None, notes
    rows, missing = lists_for(served, row_ids)  # unserved users' too: the file may hold their lists
    if missing == population.n_rows and served.n_users:
        users = population.eligible_ids if population.eligible_ids is not None else population.raw_ids
        refuse_unmatched_users(served.source, served.user_col, served.user_ids, users,
                               untrained_scored=evaluates_untrained)
    if missing:
        notes.append(_no_list_note(missing, population, served, rows))
    return served, rows, notes


def _no_list_note(missing: int, population: QueryPopulation, served: ServedLists, rows: np.ndarray) -> str:
    """The users of the population without a list in the file: the queried ones, and those
    the model cannot query (no user-table row, a zero vector), which stay in the population
    but are no queried user."""
    unqueried = int(np.count_nonzero((rows[population.n_queries:] < 0).all(axis=1))) if population.n_unserved else 0
    whom = "queried users" if not population.n_unserved else (
        f"users of the population ({population.n_queries:,} queried; {population.n_unserved:,} the model cannot "
        f"query: no user-table row or a zero vector), {unqueried:,} of them not queried,")
    return (f"{missing:,} of the {population.n_rows:,} {whom} have no list in {served.source}: the served scoring "
            "serves them an empty list (no exposure; a miss for held-out accuracy)")


def catalogue_note(served: ServedLists, frequencies: np.ndarray, model: object, alone: bool = True) -> str | None:
    """Beside a model whose user groups are drawn: its item rows neither trained on (no
    interaction in the log) nor served, which are in this audit's catalogue but not in that
    of the same lists audited alone, so the popular items that group the users can differ;
    ``alone``: the served scoring is measured over the lists-alone catalogue (RecBole's route: not)."""
    touched = frequencies > 0
    touched[served.lists[served.lists >= 0]] = True
    n_other = int(touched.size - np.count_nonzero(touched))
    if not n_other:
        return None
    return (f"{n_other:,} of the {touched.size:,} item rows of {model} are neither in the training log nor in the "
            f"served lists of {served.source}: they count in the catalogue whose top items group the users for the "
            "model's scorings (dot, cosine, popular), while " + (
                "the served scoring's groups and figures are drawn as the same lists audited alone draw them, without "
                "these rows (docs/served-lists.md)" if alone else
                "the same lists audited alone do not know them, so the user groups and per-group figures (ΔGAP, "
                "miscalibration, NDCG) of the two routes can differ (docs/served-lists.md)"))


NOT_QUERIED = (
    "are in no per-K exposure figure (the model's lists are lined up with the users it queries, the log's) but grade "
    "the severity, as lists alone grade them; those of "
    "RecBole's test users with no training interaction, if any, are scored for accuracy (a warning counts them)"
)
"""What :data:`~auditor.loading.served_lists.NOT_MEASURED` says on RecBole's route
(``evaluates_untrained``: :func:`auditor.loading.recbole_eval.recbole_heldout`)."""


def served_for_untrained(served: ServedLists, untrained: QueryPopulation) -> tuple[np.ndarray, str]:
    """The served lists of RecBole's test users who never trained (``untrained``, in its
    order; -1: none in the file) and the warning saying what accuracy does with them: a
    list the file holds is scored as the queried users' are, a user without one counts as
    a miss (an empty list, as a queried user without one), and none counts in exposure."""
    rows, missing = lists_for(served, np.asarray(untrained.raw_ids))
    n = untrained.n_queries
    note = (
        f"{n - missing:,} of the {n:,} held-out users with no training interaction in RecBole's split have a list in "
        f"{served.source}: not queried, so in no exposure figure, but the served scoring's accuracy scores those "
        "lists, as RecBole's test evaluates these users"
    )
    if missing:
        note += (f"; the other {missing:,} have none there, so they count as misses for the served scoring (an "
                 "empty list), while the model's own scorings rank them")
    return rows, note


def load_lists_inputs(config: AuditConfig, cache: InputCache, progress: Progress = SILENT,
                      beside_model: bool = False) -> ListsInputs:
    """The served lists of ``config.recommendations`` over the catalogue of the training
    log and the lists, the log's counts aligned to it, and the cut-offs measured: every
    requested K up to the longest list; a larger K is measured at the longest list's
    length instead, with a warning (as retrieval clamps K to the catalogue)."""
    spec = config.served_log
    assert spec is not None
    counts = cache.item_counts(config, need_users=True, progress=progress)
    log_users = _log_users(config, counts.ids, progress)
    served = read_served_lists(
        spec, rank_col=config.rank_col, score_col=config.score_col, log_items=counts.ids,
        log_users=log_users, max_k=max(config.ks), max_memory=config.max_memory, progress=progress,
        beside_model=beside_model,
    )
    unmatched = unmatched_users_reason(served.source, served.user_col, served.user_ids, log_users)
    warnings = list(served.warnings)
    longest = served.k
    for k in sorted(set(config.ks)):
        if k > longest:
            warnings.append(f"cut-off K={k} exceeds the longest served list ({longest:,} items in "
                            f"{served.source}); measured at K={longest}")
    ks = served.cutoffs(config.ks)  # the one K policy of the lists' grade, with a model or without
    row_ids = served.user_ids
    heldout = None
    if config.holdout_log is not None:
        heldout, row_ids = _heldout(config.holdout_log, served, log_users, progress, serve_unlisted=unmatched is None)
        warnings.extend(heldout.warnings)
    if unmatched is not None:
        warnings.insert(0, unmatched)
    if (whole := whole_inter_said(config.training_log)) is not None:
        warnings.insert(0, whole)
    profiles, population = (None, None) if unmatched else log_profiles(config, served, row_ids, progress)
    return ListsInputs(served=served, stats=align_counts(counts, served.items), ks=ks, warnings=warnings,
                       heldout=heldout, profiles=profiles, population=population, unmatched_users=unmatched,
                       n_unlisted=len(row_ids) - served.n_users, log_read_whole=whole is not None)


def whole_inter_said(spec: LogSpec | None) -> str | None:
    """The warning that lists alone read a RecBole ``.inter`` (typed header) whole as the
    training log; None for any other log, or RecBole's benchmark training part
    (``DATASET.train.inter``). RecBole splits the file at load time by the run's config,
    which only a checkpoint carries, so its validation and test interactions count as
    training here: every figure read from the log is then not the run's (docs/served-lists.md,
    "A RecBole .inter")."""
    if spec is None:
        return None
    log = open_log(spec)
    if log.format != "recbole" or name_as_read(log.path).lower().endswith(".train.inter"):
        return None
    return (f"{log.path} is a RecBole .inter read whole as the training log: RecBole splits it when it trains, by "
            "the run's config, which served lists alone do not have, so its validation and test interactions count "
            "as training here. The figures read from the log are then not the run's: the items' popularity (ARP, "
            "novelty, the head and long-tail items, head_share_log and the severity graded against it), the user "
            "groups, the training items the lists hold (served.n_training_slots, PopRSP, PopREO) and the "
            f"most-popular list, which skips them. Pass the checkpoint as {setting('model')}, beside "
            f"{setting('interactions')} and {setting('recommendations')}, which reproduces the run's split, or a log of the training "
            "part only (RecBole's benchmark file DATASET.train.inter, say)")


Csr = tuple[np.ndarray, np.ndarray]


def log_profiles(
    config: AuditConfig, served: ServedLists, row_ids: np.ndarray, progress: Progress
) -> tuple[Csr | None, Csr | None]:
    """CSR of the training items over the lists' catalogue of each user of ``row_ids`` (the
    served users, then the held-out log users without a list), at their rows (users without
    training items: empty), and of every log user's (the population the user groups are
    drawn among); (None, None) without a log that names users."""
    spec = config.training_log
    if spec is None or open_log(spec).user_col is None:
        return None, None
    log = read_holdout(spec, served.items, progress=progress)  # a log read as users -> item rows
    at = lookup_rows(log.users.raw_ids, row_ids)
    listed = np.flatnonzero(at >= 0)
    users = log.users.subset(listed)
    owner = np.repeat(at[listed], np.diff(users.indptr))
    population = (np.asarray(log.users.indptr, dtype=np.int64), np.asarray(log.users.item_rows, dtype=np.int64))
    return build_csr(owner, np.asarray(users.item_rows, dtype=np.int64), len(row_ids)), population


def _heldout(
    spec: LogSpec, served: ServedLists, log_users: np.ndarray | None, progress: Progress, *, serve_unlisted: bool
) -> tuple[HeldOutQueries, np.ndarray]:
    """The holdout over the lists' catalogue, at the rows of the served users who have held-out
    items, and the user id of every row: the served users', then (``serve_unlisted``: some
    served user is a user of the log) those of the held-out users of the training log
    (``log_users``) without a list, at rows past the lists'. Those were served nothing: every
    figure of theirs is a miss, as beside a model, whose queried users without a list are
    served an empty one (one rule on both paths). The other held-out users without a list are
    left out and counted by the model route's rule: absent from the training log
    (``n_not_in_training``), else trained but not among the served users (``n_not_sampled``).
    A held-out item neither trained nor served is a real item no list holds: it gets a row
    past the catalogue (``_beyond``), so it counts as a miss, as it does against a model's
    table, where it is a row never served. The held-out user ids are held to the training
    log's by the shift rule a model's holdout is (:func:`~auditor.idmap.check_holdout_shift`:
    warned, used as numbered)."""
    mapping = _beyond(spec, served.items, progress)
    try:
        held = read_holdout(spec, mapping, progress=progress)
    except IdMappingError as exc:  # worded for a model's table: say what lists alone are numbered by
        raise IdMappingError(f"no item of the held-out log {spec.path} ({setting('holdout')}) is in the training log "
                             f"or the served lists of {served.source}: the holdout must come from the same "
                             "catalogue") from exc
    shifts = [] if log_users is None else check_holdout_shift(
        held.users.raw_ids, log_users, "user", f"the held-out log {spec.path} ({setting('holdout')})",
        "the user ids of the training log")
    at = lookup_rows(held.users.raw_ids, served.user_ids)
    row_ids = served.user_ids
    in_log = (np.zeros(held.users.n, dtype=bool) if log_users is None
              else lookup_rows(held.users.raw_ids, log_users) >= 0)
    if serve_unlisted:  # held-out log users without a list: rows of their own, served nothing
        empty = np.flatnonzero((at < 0) & in_log)
        at[empty] = served.n_users + np.arange(empty.size, dtype=at.dtype)
        row_ids = np.concatenate((np.asarray(served.user_ids), np.asarray(held.users.raw_ids)[empty]))
    listed = np.flatnonzero(at >= 0)
    users = held.users.subset(listed)
    notes = list(held.warnings) + shifts
    if (n_empty := len(row_ids) - served.n_users):
        notes.append(f"{plural(n_empty, 'held-out user')} of the training log {_have(n_empty)} no served list in "
                     f"{served.source}: served nothing, each counts as a miss in the accuracy and the group NDCG (as "
                     "beside a model)")
    if (beyond := int((users.item_rows >= served.items.n_items).sum())):
        notes.append(f"{beyond:,} held-out items of the served users in {spec.path} are neither in the training log "
                     "nor in the served lists: no list holds them, so they count as misses")
    untrained, not_served = int(((at < 0) & ~in_log).sum()), int(((at < 0) & in_log).sum())
    notes += _left_out_said(spec, served, held.users.n, untrained, not_served, log_users is not None)
    return HeldOutQueries(
        positions=at[listed], indptr=users.indptr, items=users.item_rows, source=str(spec.path), user_ids=users.raw_ids,
        n_interactions=held.n_interactions, n_dropped=held.n_dropped, n_not_in_training=untrained,
        n_not_sampled=not_served, warnings=tuple(notes), fingerprint=held.fingerprint,
    ), np.asarray(row_ids)


def _left_out_said(spec: LogSpec, served: ServedLists, n_held: int, untrained: int, not_served: int,
                   log_names_users: bool) -> list[str]:
    """The warnings on the held-out users without a list left out of the accuracy: absent
    from the training log, or users of it the lists are not lined up with."""
    notes = []
    if untrained:
        one = untrained == 1
        why = (f"never {'appears' if one else 'appear'} in the training log" if log_names_users else
               "the training log names no users, so none is one of its users")
        notes.append(f"{untrained:,} of the {n_held:,} held-out users in {spec.path} {_have(untrained)} no served list "
                     f"in {served.source} and {why}: left out of the accuracy (counted as absent from the training "
                     "log, n_users_not_in_training, as beside a model)")
    if not_served:
        notes.append(f"{not_served:,} of the {n_held:,} held-out users in {spec.path} "
                     f"{'is a user' if not_served == 1 else 'are users'} of the training log without a served list in "
                     f"{served.source}, none of whose users is one of the log's: not served nothing but left out of "
                     "the accuracy (counted as trained but not among the served users, n_users_not_sampled)")
    return notes


def _have(n: int) -> str:
    return "has" if n == 1 else "have"


def _beyond(spec: LogSpec, catalogue: ItemRows, progress: Progress) -> ItemRows:
    """``catalogue`` with a row past its end for each item id of the holdout ``spec`` it
    lacks (none: the catalogue itself, so a holdout with no known item is refused as before)."""
    ids = count_item_ids(spec, need_users=False, need_n_users=False, progress=progress).ids
    assert catalogue.item_ids is not None  # a lists' catalogue is named by its ids
    unknown = lookup_rows(ids, catalogue.item_ids) < 0
    if not unknown.any() or unknown.all():
        return catalogue
    extended = np.concatenate((np.asarray(catalogue.item_ids), ids[unknown]))
    return ItemRows(extended, int(extended.shape[0]))


def unqueried_log_users(config: AuditConfig, cache: InputCache, progress: Progress = SILENT) -> np.ndarray | None:
    """Beside a model that queries nobody (retrieval not measured): the distinct users of the
    training log, whose served lists grade the severity (None: no log, or it names no users)."""
    if config.training_log is None:
        return None
    return _log_users(config, cache.item_counts(config, need_users=False, progress=progress).ids, progress)


def _log_users(config: AuditConfig, log_items: np.ndarray, progress: Progress) -> np.ndarray | None:
    """The distinct users of the training log (None: counts made elsewhere, no users)."""
    spec = config.training_log
    if spec is None:
        return None
    log = open_log(spec)
    if log.user_col is None:
        return None
    catalogue = ItemRows(log_items, int(len(log_items)))
    users = read_ids(log, lambda as_strings: eligible_users(log, catalogue, as_strings, progress))
    return ids_to_numpy(users, f"user column {log.user_col!r} of {log.path}")
