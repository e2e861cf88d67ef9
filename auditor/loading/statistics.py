"""Item statistics of a model: interactions per item-table row, from a log's counts or
the checkpoint's own record, with what the alignment left out said in warnings.

``check`` (:mod:`auditor.audit`) and ``popaudit mitigate`` (:mod:`auditor.mitigation.run`)
both count through :func:`item_stats`, so a model's frequencies are the same whichever
command reads it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from auditor.errors import IdMappingError, setting
from auditor.loading.alignment import ItemRows, align_counts
from auditor.loading.counting import IdCounts
from auditor.loading.idmap import RowIdPolicy, check_assumed_rows, offset_signals
from auditor.model import ItemStats, ModelBundle


def item_stats(
    bundle: ModelBundle, counts: IdCounts | None, counted: Path | None, policy: RowIdPolicy, warnings: list[str]
) -> ItemStats | None:
    """Frequencies per row of ``bundle``'s item table: ``counts`` (of the log or counts
    file ``counted``) aligned through the bundle's item ids, else ``policy``'s rows; else
    the checkpoint's recorded frequencies; None without either.

    Warnings (empty ids, interactions with no row, offsets the log suggests) are appended
    to ``warnings``; IdMappingError when no interaction matches a row, or when an id
    offset is given for rows mapped through ids."""
    if counts is not None:
        assert counted is not None
        return _aligned(bundle, counts, counted, policy, warnings)
    if bundle.item_frequencies is not None:
        freqs = np.asarray(bundle.item_frequencies, dtype=np.int64)
        return ItemStats(frequencies=freqs, n_interactions=int(freqs.sum()), source=bundle.source, from_checkpoint=True)
    return None


def _aligned(
    bundle: ModelBundle, counts: IdCounts, counted: Path, policy: RowIdPolicy, warnings: list[str]
) -> ItemStats:
    if bundle.item_ids is not None and policy.offset is not None:
        raise IdMappingError(
            f"{setting('id_offset')} applies where ids are taken as rows, but the item rows of "
            f"{bundle.source} are mapped through {bundle.item_ids_source}"
        )
    stats = align_counts(counts, ItemRows(bundle.item_ids, bundle.n_items, policy.shift))
    if bundle.item_ids is None:
        # align_counts refused non-integer ids already: these are integers.
        check_assumed_rows(counts.ids, bundle.n_items, policy, "item", counted, stats.n_unmapped, bundle.format)
        warnings += offset_signals(counts.ids, bundle.n_items, policy, "item", counted, bundle.item_table[0])
    warnings += _left_out(counts, counted, stats, bundle.item_ids is None)
    if int(stats.frequencies.sum()) == 0:
        raise IdMappingError(
            f"no interaction in {counted} matches a row of the item table: "
            f"pass {setting('item_ids')} with the raw id of each row"
        )
    return stats


def _left_out(counts: IdCounts, counted: Path, stats: ItemStats, rows_assumed: bool) -> list[str]:
    """What the counts held that the frequencies leave out, in words."""
    notes = []
    if counts.n_null_items:
        notes.append(
            f"{counts.n_null_items:,} interactions in {counted} have an empty "
            f"item id ({counts.item_col!r} column); they are left out"
        )
    if counts.n_null_users:
        notes.append(
            f"{counts.n_null_users:,} interactions in {counted} have an empty "
            f"user id ({counts.user_col!r} column); they count as interactions, not as users"
        )
    if stats.n_unmapped:
        share = stats.n_unmapped / max(1, stats.n_interactions)
        notes.append(
            f"{stats.n_unmapped:,} interactions ({share:.1%}) reference "
            f"{_count(stats.n_unmapped_ids, 'item id')} with no row in the item table; "
            "they are left out of the frequencies"
            + (f" ({setting('assume_row_ids')}: ids taken as rows anyway)" if rows_assumed else "")
        )
    return notes


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


__all__ = ["item_stats"]
