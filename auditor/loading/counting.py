"""Streaming frequency counts: interactions, distinct users and distinct users per raw
item id of a log, in one pass over its record batches (:func:`count_item_ids`).

Non-negative integer ids are counted in place into an array indexed by id
(while the ids are dense enough, see ``_dense_limit``); other ids with per-batch
``value_counts`` merged rarely. Memory is O(distinct items), independent of the log's
length. Distinct users per item (``need_users``) is exact and needs O(distinct
(user, item) pairs) memory; distinct users overall O(distinct users).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from auditor.errors import InteractionsError
from auditor.loading.logs import Log, maybe_int, open_log, read_ids
from auditor.values import LogSpec
from auditor.loading.merging import Merger, SortedKeys
from auditor.loading.ids import ids_to_numpy
from auditor.progress import SILENT, Progress

# Dense (id-indexed array) counting: ids must stay below DENSE_MAX_ID and below
# PER_ROW x rows read + SLACK (see _dense_limit); int64 counts, boolean "user seen" flags.
DENSE_MAX_ID = 1 << 31
DENSE_COUNTS_PER_ROW = 4
DENSE_COUNTS_SLACK = 1 << 20
DENSE_SEEN_PER_ROW = 8
DENSE_SEEN_SLACK = 1 << 24
# numpy >= 1.25 adds in place with ufunc.at as fast as bincount (see _add_counts).
_FAST_ADD_AT = np.lib.NumpyVersion(np.__version__) >= "1.25.0"
# (user, item) pairs packed as item << 31 | user in one int64 (see _PairSet).
_USER_BITS = 31
_USER_MASK = (1 << _USER_BITS) - 1
_ITEM_LIMIT = 1 << 32  # item << 31 | user stays below 2**63


@dataclass
class IdCounts:
    """Interactions per distinct raw item id of one log (computed once, aligned many times)."""

    ids: np.ndarray
    """Distinct raw item ids, sorted: int64 for integer columns, else object (str)."""
    counts: np.ndarray
    """int64 interactions per id."""
    user_counts: np.ndarray | None
    """int64 distinct users per id (None without a user column or need_users=False)."""
    n_interactions: int
    """Rows counted (rows with an empty item id excluded)."""
    n_users: int | None
    """Distinct users among the counted rows (None without a user column)."""
    source: Path
    user_col: str | None
    """The user column used (None when the log has none)."""
    item_col: str
    """The item column used (``:type`` suffixes of RecBole headers stripped)."""
    n_null_items: int = 0
    """Rows skipped because their item id was empty."""
    format: str = ""
    n_null_users: int = 0
    """Counted rows (item id present) whose user id is empty: in ``n_interactions``, not in ``n_users``."""
    first_null_item_row: int | None = None
    """A counts file's first data row with an empty item id (a log's is found again when warned of)."""


def count_item_ids(
    spec: LogSpec, *, need_users: bool = True, progress: Progress = SILENT, need_n_users: bool = True
) -> IdCounts:
    """Interactions (and distinct users) per raw item id, streaming the log ``spec`` names once.

    Non-negative integer ids that are dense enough (see ``_dense_limit``) are counted with
    ``np.add.at`` into an array indexed by id; other ids (negative, very sparse, strings,
    floats) with per-batch ``value_counts`` merged rarely. ``n_users`` is computed when
    the log has a user column, whatever ``need_users`` says, unless ``need_n_users`` and
    ``need_users`` are both False: then the user column is not read at all (about half
    the decoding of a two-column log) and ``n_users`` and ``user_col`` are None.

    Memory: O(distinct items) for counts (at most ~32 bytes per row read plus 8 MiB on
    the dense path), O(distinct users) for ``n_users`` (a byte per user id on the dense
    path), and about 16 bytes per distinct (user, item) pair at peak for ``user_counts``
    when ``need_users``.
    """
    log = open_log(spec)
    if not (need_users or need_n_users):
        log = replace(log, user_col=None)  # items only: the user column is never decoded
    return read_ids(log, lambda as_strings: _count(log, need_users and log.user_col is not None, as_strings, progress))


def _dense_limit(rows_seen: int, per_row: int, slack: int) -> int:
    """Largest id (exclusive) that an id-indexed array may cover after ``rows_seen`` rows.

    The array then costs at most ``per_row`` entries per row read plus ``slack``: about
    what a hash table of the distinct ids could cost, so sparse huge ids (hashes,
    timestamps) go to the hash path instead of allocating a giant array.
    """
    return min(DENSE_MAX_ID, per_row * rows_seen + slack)


def _dense_values(ids: pa.Array, allocated: int, limit: int) -> np.ndarray | None:
    """``ids`` (no nulls) as intp for indexing, or None when they are not integers in [0, limit)."""
    if not pa.types.is_integer(ids.type):
        return None
    values: np.ndarray = ids.to_numpy(zero_copy_only=False)
    if values.size == 0:
        return np.empty(0, dtype=np.intp)
    if values.min() < 0:
        return None
    top = int(values.max())
    if top >= allocated and top >= limit:
        return None
    return values.astype(np.intp, copy=False)


def _grown(array: np.ndarray, needed: int, limit: int) -> np.ndarray:
    """``array`` zero-extended to at least ``needed`` entries, doubling (up to ``limit``) to amortise."""
    if needed <= array.size:
        return array
    out = np.zeros(max(needed, min(2 * array.size, limit)), dtype=array.dtype)
    out[: array.size] = array
    return out


def _add_counts(dense: np.ndarray, values: np.ndarray) -> None:
    """``dense[v] += 1`` for each ``v`` in ``values`` (all below ``dense.size``).

    ``np.add.at`` adds in place: no per-batch array of every id's count to allocate, zero
    and add, about 1.6x faster than ``np.bincount`` + add for a million ids (and it leaves
    the decoding threads more of the cores). Before numpy 1.25 ``ufunc.at`` had no fast
    path (about 10x slower), so ``np.bincount`` is kept there.
    """
    if _FAST_ADD_AT:
        np.add.at(dense, values, 1)
    else:  # pragma: no cover - numpy < 1.25
        per_id = np.bincount(values)
        dense[: per_id.size] += per_id


def _sum_counts(t: pa.Table) -> pa.Table:
    """Merge of (id, n) partial counts: one row per id."""
    return t.group_by("id").aggregate([("n", "sum")]).rename_columns(["id", "n"])


def _distinct(t: pa.Table) -> pa.Table:
    """Merge of partial sets: the distinct rows."""
    return t.group_by(t.column_names).aggregate([])


def _no_counts(key: str) -> pa.Table:
    """An empty (``key``, n) table of int64 columns."""
    return pa.table({key: pa.array([], pa.int64()), "n": pa.array([], pa.int64())})


class _ItemCounter:
    """Interactions per item id.

    Dense path: ``np.add.at`` into an int64 array indexed by id (non-negative integer
    ids under ``_dense_limit(rows, DENSE_COUNTS_PER_ROW, DENSE_COUNTS_SLACK)``). Hash
    path: per-batch ``pc.value_counts`` merged rarely. The first batch that does not fit
    moves the dense counts to the hash path for good.
    """

    def __init__(self) -> None:
        self.dense: np.ndarray | None = np.zeros(0, dtype=np.int64)
        self.hashed = Merger(_sum_counts)
        self.rows = 0

    def add(self, ids: pa.Array) -> None:
        """Count ``ids`` (no nulls)."""
        self.rows += len(ids)
        if self.dense is not None:
            limit = _dense_limit(self.rows, DENSE_COUNTS_PER_ROW, DENSE_COUNTS_SLACK)
            values = _dense_values(ids, self.dense.size, limit)
            if values is not None:
                if values.size:
                    self.dense = _grown(self.dense, int(values.max()) + 1, limit)
                    _add_counts(self.dense, values)
                return
            self._to_hashed(ids.type)
        vc = pc.value_counts(ids)
        self.hashed.add(pa.table({"id": vc.field("values"), "n": vc.field("counts")}))

    def _to_hashed(self, id_type: pa.DataType) -> None:
        assert self.dense is not None
        present = np.flatnonzero(self.dense)
        if present.size:  # the ids came from this column, so they fit its type
            self.hashed.add(pa.table({"id": pa.array(present).cast(id_type), "n": self.dense[present]}))
        self.dense = None

    def result(self) -> pa.Table:
        """Table (id, n) of the ids seen, one row per id (in id order on the dense path)."""
        if self.dense is not None:
            present = np.flatnonzero(self.dense)
            return pa.table({"id": present.astype(np.int64), "n": self.dense[present]})
        merged = self.hashed.flush()
        return merged if merged is not None else _no_counts("id")


class _DistinctIds:
    """A set of ids: a boolean array indexed by id on the dense path, else hashed.

    Dense path as for ``_ItemCounter`` with a byte per id, so the bound is looser
    (``DENSE_SEEN_PER_ROW`` ids per row read, plus ``DENSE_SEEN_SLACK``).
    """

    def __init__(self) -> None:
        self.seen: np.ndarray | None = np.zeros(0, dtype=bool)
        self.hashed = Merger(_distinct)
        self.rows = 0

    def add(self, ids: pa.Array) -> None:
        """Add ``ids`` (nulls are dropped)."""
        if ids.null_count:
            ids = ids.drop_null()
        self.rows += len(ids)
        if self.seen is not None:
            limit = _dense_limit(self.rows, DENSE_SEEN_PER_ROW, DENSE_SEEN_SLACK)
            values = _dense_values(ids, self.seen.size, limit)
            if values is not None:
                if values.size:
                    self.seen = _grown(self.seen, int(values.max()) + 1, limit)
                    self.seen[values] = True
                return
            present = np.flatnonzero(self.seen)
            if present.size:
                self.hashed.add(pa.table({"u": pa.array(present).cast(ids.type)}))
            self.seen = None
        self.hashed.add(pa.table({"u": pc.unique(ids)}))

    def count(self) -> int:
        """Distinct ids added."""
        if self.seen is not None:
            return int(np.count_nonzero(self.seen))
        merged = self.hashed.flush()
        return merged.num_rows if merged is not None else 0


class _PairSet:
    """Distinct (user, item) pairs, for exact distinct users per item.

    Non-negative integer ids that fit (item < 2**32, user < 2**31) are packed into one
    int64, item-major (item << 31 | user), and deduplicated by sorting: the sorted keys
    then hold each item's distinct users contiguously. Other ids (strings, negative or
    larger numbers) use a two-column pyarrow group-by; a log that stops fitting
    switches once.
    """

    def __init__(self) -> None:
        self.packed: SortedKeys | None = SortedKeys()
        self.table = Merger(_distinct)

    def add(self, users: pa.Array, items: pa.Array) -> None:
        """Add the pairs of one batch (no nulls in either)."""
        if self.packed is not None:
            keys = _pack(users, items)
            if keys is not None:
                if keys.size:
                    self.packed.add(keys)
                return
            self._unpack_all(users.type, items.type)
        self.table.add(_distinct(pa.table({"u": users, "i": items})))

    def _unpack_all(self, user_type: pa.DataType, item_type: pa.DataType) -> None:
        assert self.packed is not None
        keys = self.packed.flush()
        self.packed = None
        if keys.size:  # the ids came from these columns, so they fit their types
            self.table.add(
                pa.table({"u": pa.array(keys & _USER_MASK).cast(user_type), "i": pa.array(keys >> _USER_BITS).cast(item_type)})
            )

    def users_per_item(self) -> pa.Table:
        """Table (i, n): distinct users per item id (called once, at the end: it spends the set)."""
        if self.packed is not None:
            items = self.packed.flush()
            items >>= _USER_BITS  # in place (the set is spent): sorted, one run per item
            if items.size == 0:
                return _no_counts("i")
            starts = np.flatnonzero(np.concatenate(([True], items[1:] != items[:-1])))
            n = np.diff(np.append(starts, items.size))
            return pa.table({"i": items[starts], "n": n.astype(np.int64)})
        merged = self.table.flush()
        if merged is None:
            return _no_counts("i")
        return merged.group_by("i").aggregate([("u", "count")]).rename_columns(["i", "n"])


def _pack(users: pa.Array, items: pa.Array) -> np.ndarray | None:
    """item << 31 | user as int64, or None when the ids are not small non-negative integers."""
    if not (pa.types.is_integer(users.type) and pa.types.is_integer(items.type)):
        return None
    u: np.ndarray = users.to_numpy(zero_copy_only=False)
    i: np.ndarray = items.to_numpy(zero_copy_only=False)
    if u.size == 0:
        return np.empty(0, dtype=np.int64)
    if u.min() < 0 or i.min() < 0 or u.max() > _USER_MASK or i.max() >= _ITEM_LIMIT:
        return None
    keys = i.astype(np.int64)  # always a fresh array: the caller sorts it in place
    keys <<= _USER_BITS
    keys |= u.astype(np.int64, copy=False)
    return keys


def _count(log: Log, need_users: bool, as_strings: bool, progress: Progress) -> IdCounts:
    """One pass over the log's batches (ids read as strings when ``as_strings``)."""
    items_c = _ItemCounter()
    users_c = _DistinctIds()
    pairs = _PairSet()
    n_rows = n_null = n_null_users = 0
    with progress.track("Counting interactions", total=log.total_rows) as advance:
        for items, users in log.batches(as_strings):
            batch_rows = len(items)
            n_rows += batch_rows
            if items.null_count:
                n_null += items.null_count
                keep = pc.is_valid(items)
                items = items.filter(keep)
                users = users.filter(keep) if users is not None else None
            items_c.add(items)
            if users is not None:
                n_null_users += users.null_count
                users_c.add(users)
                if need_users:
                    if users.null_count:
                        keep_users = pc.is_valid(users)
                        pairs.add(users.filter(keep_users), items.filter(keep_users))
                    else:
                        pairs.add(users, items)
            advance(batch_rows)
    n_interactions = n_rows - n_null
    if n_interactions == 0:
        detail = f" ({n_null} rows, every item id empty)" if n_null else ""
        raise InteractionsError(f"no interactions in {log.path}{detail}")
    merged = items_c.result()
    if need_users:
        per_item = pairs.users_per_item()
        user_counts = np.zeros(merged.num_rows, dtype=np.int64)
        if per_item.num_rows:
            keys, value_set = per_item.column("i"), merged.column("id")
            if keys.type != value_set.type:  # packed pairs come back as int64 (small ids: a safe cast)
                keys = keys.cast(value_set.type)
            pos = pc.index_in(keys, value_set=value_set).to_numpy(zero_copy_only=False)
            user_counts[pos.astype(np.int64)] = per_item.column("n").to_numpy()
        merged = merged.append_column("u", pa.array(user_counts))
    if pa.types.is_string(merged.column("id").type):  # text ids that are all integers sort as integers
        merged = merged.set_column(0, "id", maybe_int(merged.column("id").combine_chunks()))
    if as_strings or items_c.dense is None:  # the dense path yields ids in order already
        merged = merged.sort_by("id")
    ids = ids_to_numpy(merged.column("id"), f"item column {log.item_col!r} of {log.path}")
    counts = merged.column("n").to_numpy().astype(np.int64, copy=False)
    return IdCounts(
        ids=ids,
        counts=counts,
        user_counts=merged.column("u").to_numpy().astype(np.int64, copy=False) if need_users else None,
        n_interactions=n_interactions,
        n_users=users_c.count() if log.user_col is not None else None,
        source=log.path,
        user_col=log.user_col,
        item_col=log.item_col,
        n_null_items=n_null,
        format=log.format,
        n_null_users=n_null_users,
    )

