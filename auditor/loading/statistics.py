"""Item statistics: interactions per item-table row, from a log's counts (read once per
log: a batch shares its logs between audits) or the checkpoint's own record, with what
the alignment left out said in warnings.

``check`` (:func:`item_statistics`, through the load stage) and ``popaudit mitigate``
(:mod:`auditor.mitigation.run`) both count through :func:`item_stats`, so a model's
frequencies are the same whichever command reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from auditor.config import AuditConfig
from auditor.errors import AuditError, IdMappingError, setting
from auditor.loading.alignment import align_counts
from auditor.loading.counting import IdCounts, count_item_ids
from auditor.loading.blank_rows import first_blank_rows
from auditor.loading.frequencies import FORMAT as COUNTS_FORMAT, read_frequencies
from auditor.loading.log_memo import LogMemo, log_identity
from auditor.id_spelling import why_none_match
from auditor.id_shifts import offset_signals
from auditor.idmap import check_assumed_rows, check_given_offset, check_mapped_share, check_mapped_shift, mapped_shift_signals
from auditor.values import ItemRows, LogSpec, RowIdPolicy
from auditor.model import ItemStats, ModelBundle
from auditor.progress import Progress


@dataclass
class InputCache:
    """Per-file inputs shared by several audits (batch runs read a shared log once)."""

    counts: dict[tuple[Any, ...], IdCounts] = field(default_factory=dict)
    logs: LogMemo = field(default_factory=LogMemo)
    """The query population's log-derived parts (its users, their training items) per log and item mapping."""

    def item_counts(self, config: AuditConfig, need_users: bool, progress: Progress) -> IdCounts:
        """Counts of ``config.interactions``, read on first use (again only when distinct
        users are needed now and the cached counts lack them); or ``config.frequencies``."""
        if config.frequencies is not None:  # counts computed elsewhere: read whole, no log
            key = (Path(config.frequencies).resolve(), config.item_col, config.count_col, config.user_count_col)
            if key not in self.counts:
                self.counts[key] = read_frequencies(config.frequencies, item_col=config.item_col,
                                                    count_col=config.count_col, user_count_col=config.user_count_col)
            return self.counts[key]
        spec = config.training_log
        assert spec is not None
        key = log_identity(spec)  # path, size, mtime and how it is read: a rewritten log is counted again
        cached = self.counts.get(key)
        if cached is None or (need_users and cached.user_counts is None):
            cached = count_item_ids(spec, need_users=need_users, progress=progress)
            self.counts[key] = cached
        return cached


def item_statistics(
    bundle: ModelBundle,
    config: AuditConfig,
    cache: InputCache,
    progress: Progress,
    warnings: list[str],
) -> ItemStats | None:
    """Frequencies (and distinct users) per table row, from the log (preferred), counts
    made elsewhere (``frequencies``), or the checkpoint's record; None without any. What
    the counts leave out is warned about; an evident id mismatch stops the audit."""
    counted = config.interactions or config.frequencies  # the log, or counts made from it elsewhere
    counts = None if counted is None else cache.item_counts(config, need_users=counts_users(config), progress=progress)
    return item_stats(bundle, counts, counted, config.row_ids, warnings, graded=config.recommendations)


def counts_users(config: AuditConfig) -> bool:
    """Whether the log's counts need distinct users per item: for retrieval's measures, and for the served
    lists' grade under ``--popularity users`` on every route, ``--no-retrieval`` included (QA12 served, round 4:
    ``--no-retrieval`` counted interactions only, and the lists went ungraded)."""
    return config.retrieval or (config.popularity == "users" and config.recommendations is not None)


def item_stats(
    bundle: ModelBundle, counts: IdCounts | None, counted: Path | None, policy: RowIdPolicy, warnings: list[str],
    graded: Path | None = None,
) -> ItemStats | None:
    """Frequencies per row of ``bundle``'s item table: ``counts`` (of the log or counts
    file ``counted``) aligned through the bundle's item ids, else ``policy``'s rows; else
    the checkpoint's recorded frequencies; None without either.

    Warnings (empty ids, interactions with no row, offsets the log suggests) are appended
    to ``warnings`` (``graded``: the served lists given beside the model, whose grade counts the log's items
    without a row by raw id: said); IdMappingError when no interaction matches a row, or when an id
    offset is given for rows mapped through ids."""
    _check_offset_applies(bundle, policy)  # with a log or without one
    if counts is not None:
        assert counted is not None
        return _aligned(bundle, counts, counted, policy, warnings, graded)
    if bundle.item_frequencies is not None:
        freqs = np.asarray(bundle.item_frequencies, dtype=np.int64)
        users = recorded_users(bundle, freqs)
        return ItemStats(frequencies=freqs, n_interactions=int(freqs.sum()), source=bundle.source, from_checkpoint=True,
                         user_counts=None if users is None else users[0], n_users=None if users is None else users[1])
    return None


def recorded_users(bundle: ModelBundle, frequencies: np.ndarray) -> tuple[np.ndarray, int] | None:
    """Distinct users per item row and of the whole log, from the (user, item) training
    pairs a checkpoint records, when they are every interaction its ``frequencies`` count
    (``retrain`` records a sample past a million); None otherwise (no pairs, or a sample)."""
    pairs = bundle.train_pairs
    if pairs is None or pairs.source is not None or not len(pairs):
        return None
    n_items = int(frequencies.shape[0])
    if not np.array_equal(np.bincount(pairs.item_rows, minlength=n_items), frequencies):
        return None
    distinct = np.unique(pairs.user_index * n_items + pairs.item_rows)
    user_counts = np.bincount(distinct % n_items, minlength=n_items).astype(np.int64)
    return user_counts, int(np.unique(pairs.user_index).size)


def _check_offset_applies(bundle: ModelBundle, policy: RowIdPolicy) -> None:
    """IdMappingError when an id offset is given but no rows are taken as ids: the item
    rows are mapped through ids, and so are the user rows (or there are none)."""
    users_as_rows = bundle.user_table is not None and bundle.user_ids is None and bundle.user_rows_unknown is None
    if bundle.item_ids is not None and policy.offset is not None and not users_as_rows:
        raise IdMappingError(
            f"{setting('id_offset')} applies where ids are taken as rows, but the item rows of "
            f"{bundle.source} are mapped through {bundle.item_ids_source}"
            + ("" if bundle.user_table is None else f" and its user rows through {bundle.user_ids_source}")
        )


def _aligned(
    bundle: ModelBundle, counts: IdCounts, counted: Path, policy: RowIdPolicy, warnings: list[str], graded: Path | None
) -> ItemStats:
    stats = align_counts(counts, ItemRows(bundle.item_ids, bundle.n_items, policy.shift))
    if bundle.item_ids is None:
        # align_counts refused non-integer ids already: these are integers.
        user_table = bundle.user_table if bundle.user_ids is None and bundle.user_rows_unknown is None else None
        users = None if user_table is None else ("user", None, int(user_table.shape[0]))  # --id-offset shifts them too
        check_assumed_rows(counts.ids, bundle.n_items, policy, "item", counted, stats.n_unmapped, bundle.format, users)
        check_given_offset(counts.ids, counts.counts, bundle.n_items, policy, "item", counted, bundle.item_table[0])
        warnings += offset_signals(counts.ids, bundle.n_items, policy, "item", counted, bundle.item_table[0],
                                   bundle.format)
    else:
        mapped = (counts.ids, counts.counts, bundle.item_ids, policy, "item", counted, str(bundle.item_ids_source))
        check_mapped_shift(*mapped)
        warnings += mapped_shift_signals(*mapped)
    warnings += _left_out(counts, counted, stats, bundle.item_ids is None, graded)
    if int(stats.frequencies.sum()) == 0:
        raise IdMappingError(
            f"no interaction in {counted} matches a row of the item table: "
            + why_none_match(counts.ids, bundle.item_ids, bundle.item_ids_source, "item")
        )
    if bundle.item_ids is not None:
        check_mapped_share(stats.n_unmapped, stats.n_interactions, stats.n_unmapped_ids, policy, "item", counted,
                           str(bundle.item_ids_source), counts.ids, bundle.item_ids)
    return stats


def _left_out(counts: IdCounts, counted: Path, stats: ItemStats, rows_assumed: bool, graded: Path | None) -> list[str]:
    """What the counts held that the frequencies leave out, in words; ``graded``: the served lists, whose grade
    still counts the items without a row (:func:`auditor.loading.served_rowless.with_log_counts`)."""
    notes = []
    item_at, user_at = _first_blank(counts)
    if counts.n_null_items:
        notes.append(
            f"{_count(counts.n_null_items, 'interaction')} in {counted} {_have(counts.n_null_items)} an empty "
            f"item id ({counts.item_col!r} column{item_at}); {'it is' if counts.n_null_items == 1 else 'they are'} left out"
        )
    if counts.n_null_users:
        notes.append(
            f"{_count(counts.n_null_users, 'interaction')} in {counted} {_have(counts.n_null_users)} an empty "
            f"user id ({counts.user_col!r} column{user_at}); they count as interactions, not as users"
        )
    if stats.n_unmapped:
        share = stats.n_unmapped / max(1, stats.n_interactions)
        notes.append(
            f"{_count(stats.n_unmapped, 'interaction')} ({share:.1%}) reference{'s' if stats.n_unmapped == 1 else ''} "
            f"{_count(stats.n_unmapped_ids, 'item id')} with no row in the item table; "
            f"{'it is' if stats.n_unmapped == 1 else 'they are'} left out of the frequencies"
            + (f" ({setting('assume_row_ids')}: ids taken as rows anyway)" if rows_assumed else "")
            + ("" if graded is None else f" (the model's scorings'); the served lists {graded} are graded (the "
               "severity) and measured (the served scoring's figures) over them all the same, by their raw ids, as "
               "lists alone are")
        )
    return notes


def _first_blank(counts: IdCounts) -> tuple[str, str]:
    """", first at data row N" for the first empty item id and user id of a log (empty or
    NaN, :mod:`auditor.loading.blank_rows`); a counts file's as read; nothing where the log
    cannot be reread."""
    if counts.format == COUNTS_FORMAT:  # its rows are items: the first row holding no id
        row = counts.first_null_item_row
        return (f", first at data row {row}" if row else ""), ""
    if not (counts.n_null_items or counts.n_null_users):
        return "", ""
    try:
        spec = LogSpec(counts.source, counts.format or "auto", counts.user_col, counts.item_col)
        item_row, user_row = first_blank_rows(spec, bool(counts.n_null_items), bool(counts.n_null_users))
    except (AuditError, OSError):
        return "", ""
    return (f", first at data row {item_row}" if item_row else "", f", first at data row {user_row}" if user_row else "")


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def _have(n: int) -> str:
    return "has" if n == 1 else "have"


__all__ = ["InputCache", "counts_users", "item_statistics", "item_stats"]
