"""Item statistics: the training log's counts per item row, read once per log (a batch
shares its logs between audits) and aligned with the model's rows as the audit maps ids."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from auditor.config import AuditConfig
from auditor.errors import IdMappingError, setting
from auditor.loading.alignment import align_counts
from auditor.loading.counting import IdCounts, count_item_ids
from auditor.loading.frequencies import read_frequencies
from auditor.idmap import check_assumed_rows, offset_signals
from auditor.model import ItemStats, ModelBundle
from auditor.progress import Progress


@dataclass
class InputCache:
    """Per-file inputs shared by several audits (batch runs read a shared log once)."""

    counts: dict[tuple[Any, ...], IdCounts] = field(default_factory=dict)

    def item_counts(self, config: AuditConfig, need_users: bool, progress: Progress) -> IdCounts:
        """Counts of ``config.interactions``, read on first use (again only when distinct
        users are needed now and the cached counts lack them); or ``config.frequencies``."""
        if config.frequencies is not None:  # counts computed elsewhere: read whole, no log
            key = (Path(config.frequencies).resolve(), config.item_col, config.count_col, config.user_count_col)
            if key not in self.counts:
                self.counts[key] = read_frequencies(config.frequencies, item_col=config.item_col,
                                                    count_col=config.count_col, user_count_col=config.user_count_col)
            return self.counts[key]
        assert config.interactions is not None
        key = (
            Path(config.interactions).resolve(),
            config.interactions_format,
            config.user_col,
            config.item_col,
        )
        cached = self.counts.get(key)
        if cached is None or (need_users and cached.user_counts is None):
            spec = config.training_log
            assert spec is not None
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
    if counted is not None:
        counts = cache.item_counts(config, need_users=config.retrieval, progress=progress)
        policy = config.row_ids
        if bundle.item_ids is not None and policy.offset is not None:
            raise IdMappingError(
                f"{setting('id_offset')} applies where ids are taken as rows, but the item rows of "
                f"{bundle.source} are mapped through {bundle.item_ids_source}"
            )
        stats = align_counts(counts, config.item_rows(bundle))
        if bundle.item_ids is None:
            # align_counts refused non-integer ids already: these are integers.
            check_assumed_rows(counts.ids, bundle.n_items, policy, "item", counted, stats.n_unmapped, bundle.format)
            warnings += offset_signals(counts.ids, bundle.n_items, policy, "item", counted, bundle.item_table[0])
        if counts.n_null_items:
            warnings.append(
                f"{counts.n_null_items:,} interactions in {counted} have an empty "
                f"item id ({counts.item_col!r} column); they are left out"
            )
        if counts.n_null_users:
            warnings.append(
                f"{counts.n_null_users:,} interactions in {counted} have an empty "
                f"user id ({counts.user_col!r} column); they count as interactions, not as users"
            )
        if stats.n_unmapped:
            share = stats.n_unmapped / max(1, stats.n_interactions)
            warnings.append(
                f"{stats.n_unmapped:,} interactions ({share:.1%}) reference "
                f"{_count(stats.n_unmapped_ids, 'item id')} with no row in the item table; "
                "they are left out of the frequencies"
                + (f" ({setting('assume_row_ids')}: ids taken as rows anyway)" if bundle.item_ids is None else "")
            )
        if int(stats.frequencies.sum()) == 0:
            raise IdMappingError(
                f"no interaction in {counted} matches a row of the item table: "
                f"pass {setting('item_ids')} with the raw id of each row"
            )
        return stats
    if bundle.item_frequencies is not None:
        freqs = np.asarray(bundle.item_frequencies, dtype=np.int64)
        return ItemStats(
            frequencies=freqs,
            n_interactions=int(freqs.sum()),
            source=bundle.source,
            from_checkpoint=True,
        )
    return None


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")

