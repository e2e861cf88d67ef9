"""The users of a log.

:func:`eligible_users` streams a log once and returns the distinct users with at least
one interaction on a table row, in order of first appearance (memory: the distinct
users, merged rarely).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from auditor.idmap import table_rows
from auditor.loading.alignment import mapped_pairs
from auditor.model import ModelBundle
from auditor.values import ItemRows, RowIdPolicy
from auditor.loading.logs import Log
from auditor.loading.merging import Merger
from auditor.progress import SILENT, Progress
from auditor.wording import plural

if TYPE_CHECKING:
    from auditor.config import AuditConfig


def _first_appearance(t: pa.Table) -> pa.Table:
    return t.group_by("u").aggregate([("p", "min")]).rename_columns(["u", "p"])


def eligible_users(
    log: Log, mapping: ItemRows, as_strings: bool, progress: Progress = SILENT, every: list[pa.Array] | None = None
) -> pa.Array:
    """Distinct users with a mapped interaction, in order of first appearance; ``every``
    (when given) receives each batch's distinct users, mapped or not, in the same pass (a
    user whose every interaction is with an item without a row is in the log all the same)."""
    merger = Merger(_first_appearance)
    seen = 0
    with progress.track("Users of the training log", total=log.total_rows) as advance:
        for items, users in log.batches(as_strings):
            assert users is not None
            if every is not None:  # an empty user id is no user (counted as interactions only)
                every.append(pc.drop_null(pc.unique(users)))
            batch_users, _ = mapped_pairs(items, users, mapping, log)
            unique = pc.unique(batch_users)  # first-appearance order within the batch
            merger.add(pa.table({"u": unique, "p": pa.array(np.arange(seen, seen + len(unique)))}))
            seen += len(unique)
            advance(len(items))
    merged = merger.flush()
    if merged is None or merged.num_rows == 0:
        return pa.array([], pa.int64())
    return merged.sort_by("p").column("u").combine_chunks()


def users_without_history(bundle: ModelBundle, eligible: np.ndarray, every: np.ndarray | None, row_ids: RowIdPolicy,
                          where: str, column: str | None) -> tuple[int, int]:
    """(user-table rows, users) of the log's users with no interaction on a table row (every
    item they trained on has no row): trained vectors, not untrained ones, though nothing of
    their history is left to exclude. (0, 0) when the log's users are unknown (``every``)."""
    if every is None or every.size <= eligible.size or bundle.user_table is None:
        return 0, 0
    others = np.setdiff1d(every, eligible)
    rows = table_rows(others, bundle.user_ids, int(bundle.user_table.shape[0]), row_ids, "user", where, column,
                      check=False)
    return int(np.unique(rows[rows >= 0]).size), int(others.size)


def untrained_rows_note(rows: int, where: str, evaluated: int = 0) -> str:
    """The warning for ``rows`` user-table rows of users absent from ``where`` (untrained
    vectors), not queried; ``evaluated``: how many of them are evaluated for accuracy all
    the same (RecBole's test users with no training interaction)."""
    fate = f"not queried for exposure ({evaluated:,} of them evaluated for accuracy)" if evaluated else "not queried"
    return (f"{plural(rows, 'user-table row')} {'belongs to a user who never appears' if rows == 1 else 'belong to users who never appear'}"
            f" in {where} (untrained vectors): {'it was' if rows == 1 else 'they were'} {fate}")


def rowless_users_note(users: int, where: str, sampled: int | None = None) -> str:
    """The warning for the ``users`` of ``where`` without a user-table row (``sampled``: how
    many the query sample drew): zero queries, served as a zero row is, and why they still count."""
    among = "" if sampled is None else f" ({sampled:,} of them sampled)"
    return (f"{plural(users, 'user')} of {where} {'has' if users == 1 else 'have'} no row in the user table{among}: "
            "each is a zero query, served as a zero user row is (a model with an item bias ranks the items for them by "
            "the bias alone; any other model's scorings serve them nothing, the most-popular list needing no vector, "
            "and with a holdout they count as misses (NDCG 0)), and they count in their user group, drawn among every "
            "trained user")


def without_history_notes(counts: tuple[int, int], where: str) -> tuple[str | None, str]:
    """The warning for the user-table rows of :func:`users_without_history` (None: none) and
    what the population's description adds about those users."""
    rows, users = counts
    note = None if not rows else (
        f"{plural(rows, 'user-table row')} {'belongs' if rows == 1 else 'belong'} to users of {where} whose every "
        "interaction is with an item without a row in the item table (trained vectors, but no training item left to "
        f"exclude): {'it was' if rows == 1 else 'they were'} not queried"
    )
    more = f" ({plural(users, 'more user')} of it {'has' if users == 1 else 'have'} no interaction on a table row)"
    return note, more if users else ""


def users_in_log(log: Log, ids: np.ndarray, progress: Progress = SILENT) -> np.ndarray:
    """bool over ``ids``: which raw user ids have any interaction in ``log``, on a table row
    or not (one streamed pass, for the few held-out users found neither among the queried
    nor the eligible users: a user whose every training item lacks a row is in the log)."""
    from auditor.loading.logs import read_ids
    from auditor.values import RowLookup

    found = np.zeros(len(ids), dtype=bool)
    if not len(ids):
        return found
    lookup = RowLookup(ids)

    def read(as_strings: bool) -> np.ndarray:
        found[:] = False
        with progress.track("Held-out users in the training log", total=log.total_rows) as advance:
            for items, users in log.batches(as_strings):
                assert users is not None
                at = lookup(pc.drop_null(users))
                found[at[at >= 0]] = True
                advance(len(items))
        return found

    return read_ids(log, read)


def held_out_without_history(config: AuditConfig, absent: np.ndarray, progress: Progress) -> int:
    """Of the held-out users ``absent`` from the queried and eligible users, those with
    interactions in the training log all the same, every one with an item without a table
    row: trained, though not queried (no training item on a row), never "absent from the
    training log" (docs/measures.md)."""
    spec = config.training_log
    if not absent.size or spec is None:
        return 0
    from auditor.loading.logs import open_log

    log = open_log(spec)
    return 0 if log.user_col is None else int(users_in_log(log, absent, progress).sum())


def left_out_said(source: str, n_held: int, n_found: int, untrained: int, not_sampled: int, why: str,
                  rowless: int = 0) -> list[str]:
    """What the counts of held-out users left out of the accuracy mean, in words."""
    warnings = []
    if rowless:
        warnings.append(f"{rowless:,} of the {n_held:,} held-out users in {source} trained only on items without a "
                        "row in the item table (users of the training log, none of their training items on a row): "
                        "not queried, so left out of the accuracy (counted as trained but not queried)")
    if untrained:
        warnings.append(
            f"{untrained:,} of the {n_held:,} held-out users in {source} never appear in the training log "
            "(no trained vector, no history to rank by): left out of the accuracy"
        )
    if not_sampled:
        warnings.append(f"{not_sampled:,} of the {n_held - untrained - rowless:,} held-out users who trained were not "
                        f"among the queries ({why}): accuracy is over the {n_found:,} that were")
    if n_found == 0:
        warnings.append(f"no held-out user of {source} is among the queried users: accuracy is not defined")
    return warnings
