"""The holdout at the query population's positions (:func:`heldout_queries`): the held-out
users of :mod:`auditor.loading.holdout` found among the queried users by raw id, the rest
counted, and the overlap of held-out and training pairs warned about (:func:`overlap_warnings`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from auditor.errors import setting
from auditor.loading.csr import take_csr
from auditor.loading.history import held_out_without_history, left_out_said
from auditor.loading.holdout import HeldOutUsers, load_holdout
from auditor.loading.recorded_split import split_drops_repeats, whole_log_error
from auditor.model import HeldOutQueries, QueryPopulation
from auditor.progress import SILENT, Progress
from auditor.values import RowLookup

if TYPE_CHECKING:
    from auditor.config import AuditConfig
    from auditor.model import ModelBundle


@dataclass(frozen=True)
class SeenItems:
    """Each evaluated user's training item rows (CSR aligned with :class:`HeldOutUsers`)."""

    indptr: np.ndarray
    rows: np.ndarray
    """int64: distinct and ascending within each user."""
    source: str = ""
    warnings: list[str] = field(default_factory=list)

    def subset(self, index: np.ndarray) -> SeenItems:
        indptr, rows = take_csr(self.indptr, self.rows, np.asarray(index, dtype=np.int64))
        return SeenItems(indptr, rows, self.source, self.warnings)


def overlap_warnings(users: HeldOutUsers, seen: SeenItems, holdout: str, keep_seen: bool,
                     recorded: bool = False) -> list[str]:
    """Warnings when held-out (user, item) pairs also appear in training (a leak, or the
    training log given as holdout). A checkpoint's ``recorded`` holdout found whole in the
    training log given beside it is refused: that log is the one the checkpoint split."""
    n_held = int(users.item_rows.size)
    owners = np.concatenate([np.repeat(np.arange(users.n), np.diff(indptr)) for indptr in (users.indptr, seen.indptr)])
    items = np.concatenate((users.item_rows, seen.rows))
    order = np.lexsort((items, owners))
    u, i = owners[order], items[order]
    n_both = int(np.count_nonzero((u[1:] == u[:-1]) & (i[1:] == i[:-1])))  # each side is distinct
    if n_both == 0 or n_held == 0:
        return []
    if n_both == n_held and recorded:
        raise whole_log_error(seen.source, holdout, f"{n_held:,} for its {users.n:,} users")
    if n_both == n_held:
        same = "identical to" if seen.rows.size == n_held else "a subset of"
        message = (
            f"the holdout {holdout} is {same} the training log {seen.source} for its {users.n:,} users: "
            "accuracy on training data says nothing about how well a scoring ranks unseen items"
        )
    else:
        message = (
            f"{n_both:,} of the {n_held:,} held-out (user, item) pairs in {holdout} ({n_both / n_held:.1%}) "
            f"also appear in the training log {seen.source}"
        )
    if keep_seen:
        return [message + f" (kept among the candidates with {setting('keep_seen')})"]
    return [message + "; excluded from the candidates as training items, they can never be hit"]


def heldout_queries(
    bundle: ModelBundle, config: AuditConfig, population: QueryPopulation, progress: Progress = SILENT
) -> HeldOutQueries:
    """The audit's holdout at the query population's positions: its users found among the
    queried users by raw id, the rest counted (never trained; trained but not queried),
    with the overlap of held-out and training pairs warned about."""
    n_user_rows = None
    if population.source == "users" and bundle.user_table is not None:
        n_user_rows = int(bundle.user_table.shape[0])
    heldout = load_holdout(bundle, config, n_user_rows, progress, trained_ids=population.eligible_ids,
                           trained_source=f"the user ids of {population.seen_source}")
    held = heldout.users
    row_ids = population.row_ids  # the unserved users' rows too: served nothing, each a miss
    assert row_ids is not None, "a population without user ids has no held-out users"
    at = RowLookup(row_ids)(pa.array(held.raw_ids)) if held.n else np.empty(0, np.int64)
    found = np.flatnonzero(at >= 0)
    eligible = (RowLookup(population.eligible_ids)(pa.array(held.raw_ids)) >= 0) if held.n and (
        population.eligible_ids is not None) else np.zeros(held.n, dtype=bool)
    not_sampled = int((eligible & (at < 0)).sum())
    rowless = held_out_without_history(config, held.raw_ids[~eligible & (at < 0)], progress)
    untrained = held.n - found.size - not_sampled - rowless
    users, positions = held.subset(found), at[found]
    why = f"sampled out by {setting('max_queries')}"  # a zero query vector's user is a row: served nothing
    warnings = list(heldout.warnings) + left_out_said(heldout.source, held.n, found.size, untrained, not_sampled, why,
                                                  rowless)
    if (profiles := population.row_profiles) is not None and users.n:
        indptr, rows = take_csr(*profiles, positions)
        warnings += overlap_warnings(users, SeenItems(indptr, rows, population.seen_source), heldout.source,
                                     config.keep_seen, recorded=config.holdout_log is None)
    return HeldOutQueries(
        positions=positions, indptr=users.indptr, items=users.item_rows, source=heldout.source, user_ids=users.raw_ids,
        n_interactions=heldout.n_interactions, n_dropped=heldout.n_dropped, n_dropped_users=heldout.n_dropped_users,
        n_not_in_training=untrained, n_not_sampled=not_sampled + rowless, warnings=tuple(warnings),
        repeats_dropped=config.holdout_log is None and split_drops_repeats(bundle.config),
        n_repeats_dropped=heldout.n_repeats_dropped, fingerprint=heldout.fingerprint,
    )
