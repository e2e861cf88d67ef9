"""Held-out interactions for accuracy: the held-out users with their held-out item rows,
as CSR (:mod:`auditor.loading.csr`).

The holdout, in any interaction-log format, is streamed: items map to table rows as the
training log's do (an :class:`~auditor.loading.alignment.ItemRows`), users to user-table
rows through ``user_ids`` (raw user id of each row), else ``row = id − offset`` (the
:class:`~auditor.values.RowIdPolicy`), checked like every assumed mapping
(:mod:`auditor.idmap`). Interactions whose item has no row, and users without a
user-table row (when there is a user table), are dropped and counted. A popaudit
checkpoint's recorded pairs give the same objects without a file.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from auditor.errors import IdMappingError, InteractionsError, setting
from auditor.loading.alignment import mapped_pairs
from auditor.loading.blank_rows import first_empty_cell
from auditor.loading.csr import build_csr, take_csr
from auditor.loading.fingerprint import pairs_fingerprint
from auditor.values import RowLookup, ItemRows
from auditor.id_spelling import spelled_apart
from auditor.idmap import check_assumed_rows, check_holdout_shift, table_rows
from auditor.values import RowIdPolicy
from auditor.loading.ids import ids_to_numpy
from auditor.loading.logs import Log, maybe_int, open_log, read_ids
from auditor.loading.recorded_split import recorded_split_counts, recorded_split_notes
from auditor.values import LogSpec
from auditor.wording import plural
from auditor.model import InteractionPairs
from auditor.progress import SILENT, Progress

if TYPE_CHECKING:
    from auditor.config import AuditConfig
    from auditor.model import ModelBundle

@dataclass(frozen=True)
class HeldOutUsers:
    """The evaluated users (order of first appearance) and their held-out item rows."""

    raw_ids: np.ndarray
    """Raw user id of each evaluated user (int64, or str objects)."""
    user_rows: np.ndarray
    """int64: the user-table row of each, -1 when there is no user table."""
    indptr: np.ndarray
    """int64 (n + 1,): user u's held-out rows are ``item_rows[indptr[u]:indptr[u + 1]]``."""
    item_rows: np.ndarray
    """int64: held-out item rows, distinct and ascending within each user."""

    @property
    def n(self) -> int:
        return int(self.raw_ids.shape[0])

    def subset(self, index: np.ndarray) -> HeldOutUsers:
        """The users at positions ``index``, in that order."""
        index = np.asarray(index, dtype=np.int64)
        indptr, rows = take_csr(self.indptr, self.item_rows, index)
        return HeldOutUsers(self.raw_ids[index], self.user_rows[index], indptr, rows)


@dataclass(frozen=True)
class HeldOut:
    """A holdout read and mapped: the evaluated users and what was left out."""

    users: HeldOutUsers
    source: str
    n_interactions: int
    """Rows read (every held-out interaction, mapped or not)."""
    n_empty_ids: int = 0
    """Dropped: interactions with an empty user or item id."""
    first_empty: str = ""  # where the first is, in words (blank_rows.first_empty_cell)
    n_dropped_items: int = 0
    """Dropped: interactions whose item has no row in the item table."""
    n_dropped_users: int = 0
    """Dropped: users without a row in the user table (only when there is one)..."""
    n_dropped_user_interactions: int = 0
    """... and their interactions on table items."""
    dropped_users_untrained: bool = False
    """The dropped users are known never to have trained (the training users were known: one
    who trained is kept without a row, served nothing), so the warning says why."""
    notes: tuple[str, ...] = ()
    """What else the report says (a checkpoint's recorded split: its dropped repeats)."""
    n_repeats_dropped: int = 0
    """Held-out interactions a checkpoint's recorded split left out before storing its pairs,
    as repeats of a training pair (or of an earlier held-out one); counted in
    ``n_interactions``, never in ``n_dropped``."""
    fingerprint: str = ""  # the held-out pairs' content (loading/fingerprint.py): its identity in a diff

    @property
    def n_users_evaluated(self) -> int:
        return self.users.n

    @property
    def n_dropped(self) -> int:
        """Held-out interactions left out for any reason."""
        return self.n_empty_ids + self.n_dropped_items + self.n_dropped_user_interactions

    @property
    def warnings(self) -> list[str]:
        """What was left out, for the report."""
        out = []
        if self.n_empty_ids:
            out.append(f"{plural(self.n_empty_ids, 'held-out interaction')} in {self.source} "
                       f"{'has' if self.n_empty_ids == 1 else 'have'} an empty user or item id{self.first_empty}")
        if self.n_dropped_items:
            out.append(
                f"{self.n_dropped_items:,} of the {self.n_interactions:,} held-out interactions in {self.source} "
                f"({self.n_dropped_items / self.n_interactions:.1%}) have an item without a row in the item table; "
                "left out of the accuracy"
            )
        if self.n_dropped_users:
            one = self.n_dropped_users == 1
            why = (f" and never {'appears' if one else 'appear'} in the training log on an item with a table row "
                   "(nothing trained; a training user without a row counts as a miss instead)"
                   if self.dropped_users_untrained else "")
            out.append(
                f"{plural(self.n_dropped_users, 'held-out user')} in {self.source} "
                f"({plural(self.n_dropped_user_interactions, 'interaction')}) {'has' if one else 'have'} no row in "
                f"the user table{why}: left out of the accuracy"
            )
        return out + list(self.notes)


def read_holdout(
    spec: LogSpec, mapping: ItemRows, *, user_ids: np.ndarray | None = None, n_user_rows: int | None = None,
    row_ids: RowIdPolicy = RowIdPolicy(), progress: Progress = SILENT, trained_ids: np.ndarray | None = None,
    trained_source: str = "the training log's user ids",
) -> HeldOut:
    """The held-out log ``spec`` names mapped onto the tables (module docstring): items
    by ``mapping``, users through ``user_ids``, else by ``row_ids``.

    ``n_user_rows`` None: no user table (every user is evaluated, ``user_rows`` -1).
    ``trained_ids``: the raw ids of the training users, when known; only held-out users
    among them are evidence on an assumed mapping (:func:`_check_trained_rows`), and those
    without a user-table row are kept all the same (``user_rows`` -1): the population holds
    them as served nothing (:mod:`auditor.loading.zero_queries`), so each is a miss. With
    them, the held-out user ids (against them, ``trained_source`` in words) and item ids
    (against the item table's) are held to the shift rule the training log's are
    (:func:`~auditor.idmap.check_holdout_shift`: warned where they fit only shifted, used as numbered).
    """
    log, first_empty = _open(spec, "held-out accuracy"), [""]  # first_empty: where the first empty id is, in words
    item_parts: list[pa.Array] = []  # each batch's distinct item ids, where the training side's are known

    def read(as_strings: bool) -> tuple[InteractionPairs, int, int]:
        users_parts: list[pa.Array] = []
        item_parts.clear()
        rows_parts: list[np.ndarray] = []
        n_read = n_valid = 0
        with progress.track(f"Held-out interactions: reading {log.path.name}", total=log.total_rows) as advance:
            for items, users in log.batches(as_strings):
                assert users is not None
                first_empty[0] = first_empty[0] or first_empty_cell(items, users, log, n_read)
                n_read += len(items)
                n_valid += int(pc.sum(pc.and_(pc.is_valid(items), pc.is_valid(users))).as_py() or 0)
                batch_users, rows = mapped_pairs(items, users, mapping, log)
                if trained_ids is not None:
                    item_parts.append(pc.unique(plain_ids(items.drop_null())))
                if len(rows):
                    users_parts.append(plain_ids(batch_users))
                    rows_parts.append(rows)
                advance(len(items))
        if not rows_parts:
            none = np.empty(0, np.int64)
            return InteractionPairs(none, none, none), n_read, n_valid
        every = pa.concat_arrays(users_parts)
        distinct = pc.unique(every)  # order of first appearance
        index = pc.index_in(every, value_set=distinct).to_numpy(zero_copy_only=False).astype(np.int64)
        what = f"user column {log.user_col!r} of {log.path}"
        raw = ids_to_numpy(maybe_int(distinct) if as_strings else distinct, what)
        return InteractionPairs(index, np.concatenate(rows_parts), raw, log.path), n_read, n_valid

    pairs, n_read, n_valid = read_ids(log, read)
    where = f"the held-out log {log.path} ({setting('holdout')})"
    if n_read == 0:
        raise InteractionsError(f"{where} holds no interactions")
    if len(pairs) == 0:
        how, fix = (
            (f"through {setting('item_ids')}", "the holdout must come from the model's catalogue")
            if mapping.item_ids is not None
            else ("taken as row numbers", f"pass {setting('item_ids')} FILE with the raw item id of each table row")
        )
        raise IdMappingError(
            f"no item id of {where} (column {log.item_col!r}) has a row in the {mapping.n_items:,}-row item table "
            f"when mapped {how}: {fix}"
        )
    shifts = [] if trained_ids is None else _shift_signals(pairs, item_parts, mapping, (trained_ids, trained_source),
                                                           where)
    if user_ids is None and n_user_rows is not None:
        _check_trained_rows(np.asarray(pairs.user_ids), trained_ids, n_user_rows, row_ids, str(log.path))
    held = _held_out(pairs, str(log.path), user_ids, n_user_rows, row_ids, user_column=log.user_col,
                     trained_ids=trained_ids)
    return replace(held, n_interactions=n_read, n_empty_ids=n_read - n_valid, n_dropped_items=n_valid - len(pairs),
                   first_empty=first_empty[0], fingerprint=pairs_fingerprint(pairs, mapping), notes=tuple(shifts))


def _shift_signals(
    pairs: InteractionPairs, item_parts: list[pa.Array], mapping: ItemRows, trained: tuple[np.ndarray, str], where: str,
) -> list[str]:
    """The training side's ids known (``trained``: its users' raw ids, in words), the held-out
    users are held to them and the held-out items (``item_parts``: each batch's distinct raw
    ids) to the item table's by the one shift rule (:func:`~auditor.idmap.check_holdout_shift`)."""
    signals = check_holdout_shift(np.asarray(pairs.user_ids), trained[0], "user", where, trained[1])
    items = pa.concat_arrays(item_parts).to_numpy(zero_copy_only=False) if item_parts else np.empty(0, np.int64)
    return signals + check_holdout_shift(items, mapping.raw_ids(np.arange(mapping.n_items)), "item", where,
                                         f"the raw ids of the item table's {mapping.n_items:,} rows")


def _check_trained_rows(
    raw: np.ndarray, trained_ids: np.ndarray | None, n_rows: int, policy: RowIdPolicy, source: str
) -> None:
    """The assumed-row check (:func:`auditor.idmap.check_assumed_rows`) on the held-out
    user ids that are also training users. A held-out user who never trained (one who
    joined after training, a row past the table) is no evidence that ids are not rows:
    it is left out and counted, as a new item id is. Where the training users are
    unknown, every held-out id is the only evidence and is checked."""
    if not raw.size or raw.dtype.kind not in "iu":  # string ids are refused as rows by table_rows
        return
    if trained_ids is not None:
        raw = raw[RowLookup(np.asarray(trained_ids))(pa.array(raw)) >= 0]
    check_assumed_rows(raw, n_rows, policy, "user", source)


def holdout_from_pairs(
    pairs: InteractionPairs, *, user_ids: np.ndarray | None, n_user_rows: int | None, source: str,
    trained_ids: np.ndarray | None = None,
) -> HeldOut:
    """The same objects from held-out pairs recorded in a popaudit checkpoint (item rows
    already; ``pairs.user_ids[user_index]`` the raw user ids, mapped through ``user_ids``;
    ``trained_ids`` as :func:`read_holdout`'s)."""
    if len(pairs) == 0:
        raise InteractionsError(f"the held-out pairs recorded in {source} are empty")
    return _held_out(pairs, source, user_ids, n_user_rows, RowIdPolicy(), user_column=None, trained_ids=trained_ids)


def _held_out(
    pairs: InteractionPairs, source: str, user_ids: np.ndarray | None, n_user_rows: int | None,
    row_ids: RowIdPolicy, *, user_column: str | None, trained_ids: np.ndarray | None = None,
) -> HeldOut:
    """Users matched to user-table rows, the unmatched dropped unless they trained
    (``trained_ids``: served nothing, a miss), the rest as CSR."""
    raw = np.asarray(pairs.user_ids)
    trained = np.zeros(raw.shape[0], dtype=bool)
    if trained_ids is not None and raw.size:
        trained = RowLookup(np.asarray(trained_ids))(pa.array(raw)) >= 0
    column = f" (column {user_column!r})" if user_column else ""
    if n_user_rows is None:
        rows = np.full(raw.shape[0], -1, dtype=np.int64)
    else:
        if user_ids is not None and len(user_ids) != n_user_rows:
            raise IdMappingError(f"{len(user_ids)} user ids for a user table of {n_user_rows} rows")
        rows = table_rows(raw, user_ids, n_user_rows, row_ids, "user", source, user_column, check=False)
        if user_ids is not None and not np.any((rows >= 0) | trained):
            raise IdMappingError(
                f"none of the {raw.shape[0]:,} user ids of {source}{column} is among the raw ids of the user "
                f"table's rows ({setting('user_ids')}): "
                + (spelled_apart(raw, user_ids, setting("user_ids")) or "the holdout's users are not the model's users")
            )
    present = np.bincount(pairs.user_index, minlength=raw.shape[0]) > 0  # recorded ids may lack pairs
    kept = np.flatnonzero(present & ((rows >= 0) | trained | (n_user_rows is None)))
    position = np.full(raw.shape[0], -1, dtype=np.int64)
    position[kept] = np.arange(kept.size)
    user_of = position[pairs.user_index]
    mapped = user_of >= 0
    indptr, items = build_csr(user_of[mapped], pairs.item_rows[mapped], kept.size)
    users = HeldOutUsers(raw[kept], rows[kept], indptr, items)
    n_dropped_users = int(present.sum()) - kept.size
    return HeldOut(users, source, len(pairs), n_dropped_users=n_dropped_users,
                   n_dropped_user_interactions=int((~mapped).sum()), dropped_users_untrained=trained_ids is not None)


def load_holdout(
    bundle: ModelBundle, config: AuditConfig, n_user_rows: int | None, progress: Progress = SILENT,
    trained_ids: np.ndarray | None = None, trained_source: str = "the training log's user ids",
) -> HeldOut:
    """The audit's holdout: ``config.holdout`` read against the bundle's tables (users
    matched to the ``n_user_rows`` user-table rows; None: users kept by raw id), else the
    held-out pairs a popaudit checkpoint recorded. ``trained_ids``: the training users'
    raw ids (``trained_source`` in words), when known (only they are checked as rows, and
    a held-out file's ids are held to them and to the item table's, :func:`read_holdout`)."""
    spec = config.holdout_log
    if spec is not None:
        mapping = config.item_rows(bundle)
        return read_holdout(spec, mapping, user_ids=bundle.user_ids, n_user_rows=n_user_rows,
                            row_ids=config.row_ids, progress=progress, trained_ids=trained_ids,
                            trained_source=trained_source)
    pairs = bundle.holdout_pairs
    if not isinstance(pairs, InteractionPairs):
        raise InteractionsError(f"no held-out interactions: pass {setting('holdout')} PATH")
    source = f"{bundle.source} (recorded holdout)"
    held = holdout_from_pairs(pairs, user_ids=bundle.user_ids, n_user_rows=n_user_rows, source=source,
                              trained_ids=trained_ids)
    held = replace(held, notes=recorded_split_notes(bundle.config, source),
                   fingerprint=pairs_fingerprint(pairs, config.item_rows(bundle)))
    counts = recorded_split_counts(bundle.config)
    if counts is None or counts.pairs != len(pairs):  # no split recorded (or not these pairs'): the pairs read
        return held
    # The interactions the split held out, as a held-out file of the same split counts them.
    return replace(held, n_interactions=counts.held, n_repeats_dropped=counts.repeats)


def _open(spec: LogSpec, why: str) -> Log:
    """The held-out log with its user column found."""
    log = open_log(spec, "held-out log")
    if log.user_col is None:
        raise InteractionsError(
            f"{why} needs the user of each interaction, but no user id column was found in {log.path}; "
            f"{log.columns_found()}. Pass {setting('user_col')} NAME"
        )
    return log


def plain_ids(arr: pa.Array) -> pa.Array:
    """User ids as raw ids compare: integral floats as int64, other string kinds as string."""
    t = arr.type
    textual = pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t)
    to = pa.int64() if pa.types.is_floating(t) else pa.string() if textual else None
    try:
        return arr if to is None else arr.cast(to, safe=True)
    except pa.ArrowException:  # fractional floats, bytes that are not UTF-8: compared as they are
        return arr
