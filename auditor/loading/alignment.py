"""Raw item ids to table rows: through the raw id of each row (``item_ids``), else
``row = id − offset``, as one :class:`ItemRows` every reader that maps items takes; per
distinct id for counts (:func:`align_counts`), per batch for streamed pairs
(:func:`mapped_pairs`).

Ids without a row are reported, not raised: whether that is acceptable is
:mod:`auditor.idmap`'s call. Ids that cannot be row numbers at all (strings,
fractional floats) raise IdMappingError naming the data row of the first one.
"""

from __future__ import annotations


import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from auditor.errors import AuditError, IdMappingError, setting
from auditor.id_spelling import whole_decimals, whole_decimals_fix
from auditor.loading.counting import IdCounts
from auditor.loading.frequencies import FORMAT as COUNTS_FORMAT
from auditor.loading.logs import Log, TypeDrift, maybe_int, open_log
from auditor.values import ItemRows, LogSpec, lookup_rows
from auditor.model import ItemStats


# Integers as id_text.integer_ids spells them ("12", " -3 "; not "012", "+5", "1.0").
_CANONICAL_INT = r"^\s*(0|-?[1-9][0-9]*)\s*$"


def _first_non_integer_at(ids: pa.Array) -> int | None:
    """Index of the first id that is not an integer: a string not in canonical integer
    form, a fractional float, else (other types but integers) the first non-null id; None
    when there is none."""
    if pa.types.is_integer(ids.type):
        return None
    if pa.types.is_string(ids.type) or pa.types.is_large_string(ids.type):
        bad = pc.invert(pc.match_substring_regex(ids, _CANONICAL_INT))
    elif pa.types.is_floating(ids.type):
        bad = pc.not_equal(pc.trunc(ids), ids)  # NaN != NaN, so NaN counts as bad too
    else:
        bad = pc.is_valid(ids)
    at = pc.index(pc.fill_null(bad, False), True).as_py()
    return None if at < 0 else int(at)


def _first_bad_row(log: Log) -> int | None:
    """1-based data row (header excluded) of the first item id that is not an integer
    (text read as text, so that a file's types cannot drift between batches; Parquet's
    integral floats are integers).

    Error path only: streams the log again, one vectorised search per batch.
    """
    row = 0
    try:
        for items, _ in log.batches(as_strings=True):
            at = _first_non_integer_at(maybe_int(items))
            if at is not None:
                return row + at + 1
            row += len(items)
    except (AuditError, TypeDrift, pa.ArrowException, OSError):
        return None
    return None


def _not_integers(log: Log | None, source: object, ids: np.ndarray | None = None) -> IdMappingError:
    """The error for item ids that cannot be row indices, naming the data row of the first
    offending id in the file (not the first in sorted order, which the counts hold).

    The id itself is not quoted: the file may not be the log it was said to be.
    """
    row = _first_bad_row(log) if log is not None else None
    where = f" (the first in data row {row}, counting from 1 after any header)" if row is not None else ""
    fix = (whole_decimals_fix("item") if ids is not None and whole_decimals(ids)
           else f"pass {setting('item_ids')} FILE with the raw id of each table row")
    return IdMappingError(f"item ids in {source} are not integers{where}, so they cannot be table row indices; {fix}")


def _reopen(counts: IdCounts) -> Log | None:
    """The log behind ``counts`` opened again (error path), or None when that fails."""
    try:
        return open_log(LogSpec(counts.source, counts.format or "auto", counts.user_col, counts.item_col))
    except AuditError:
        return None


def _rows_without_ids(counts: IdCounts, n_items: int, offset: int) -> np.ndarray:
    """Row of each counted id taken as a row number (id − ``offset``); raises when the ids
    are not integers."""
    ids = counts.ids
    if ids.dtype.kind not in "iu":
        if ids.dtype == object and len(ids) and _first_non_integer_at(pa.array(ids, pa.string())) is None:
            raise IdMappingError(  # every id is an integer's spelling: too large for int64 (uint64 ids)
                f"item ids in {counts.source} reach {max(ids, key=lambda i: (len(i), i))}, beyond any table row "
                f"number; pass {setting('item_ids')} FILE with the raw id of each table row"
            )
        raise _not_integers(_reopen(counts) if len(ids) else None, counts.source, ids)
    return _id_rows(ids, n_items, offset)


def _id_rows(ids: np.ndarray, n_rows: int, offset: int) -> np.ndarray:
    """row = id − offset for integer ids; -1 where that is no row. uint64 ids beyond
    int64 can be no row (tables have fewer than 2**63 rows)."""
    if ids.dtype == np.uint64:
        big = ids > np.iinfo(np.int64).max
        rows = np.where(big, -1, ids.astype(np.int64, copy=False) - offset) if big.any() else ids.astype(np.int64) - offset
    else:
        rows = ids.astype(np.int64, copy=False) - offset
    return np.where((rows >= 0) & (rows < n_rows), rows, -1)


def counted_rows(counts: IdCounts, mapping: ItemRows) -> np.ndarray:
    """Table row of each counted id of ``counts`` under ``mapping`` (-1: no row)."""
    if mapping.item_ids is None:
        return _rows_without_ids(counts, mapping.n_items, mapping.offset)
    return lookup_rows(counts.ids, mapping.item_ids)


def align_counts(counts: IdCounts, mapping: ItemRows) -> ItemStats:
    """Frequencies (and distinct users) per table row, ids mapped by ``mapping``.

    Ids without a row are counted in ``n_unmapped`` (interactions) and ``n_unmapped_ids``
    (distinct ids), not raised (whether that is acceptable is
    :mod:`auditor.idmap`'s call).
    """
    n_items = mapping.n_items
    rows = counted_rows(counts, mapping)
    found = rows >= 0
    frequencies = np.zeros(n_items, dtype=np.int64)
    frequencies[rows[found]] = counts.counts[found]  # ids are distinct, so rows are too
    user_counts = None
    if counts.user_counts is not None:
        user_counts = np.zeros(n_items, dtype=np.int64)
        user_counts[rows[found]] = counts.user_counts[found]
    return ItemStats(
        frequencies=frequencies,
        n_interactions=counts.n_interactions,
        n_unmapped=int(counts.counts[~found].sum()),
        n_unmapped_ids=int((~found).sum()),
        user_counts=user_counts,
        n_users=counts.n_users,
        source=counts.source,
        from_counts_file=counts.format == COUNTS_FORMAT,
    )


def _batch_rows(items: pa.Array, mapping: ItemRows, log: Log) -> np.ndarray:
    """Table row of each item id of one batch (-1: no row)."""
    if len(items) == 0:  # e.g. every user id of the block empty: no type to judge the ids by
        return np.empty(0, dtype=np.int64)
    lookup = mapping.lookup
    if lookup is None:
        items = maybe_int(items)
        if pa.types.is_floating(items.type):  # integral floats are ids, as ids_to_numpy reads them
            try:
                items = items.cast(pa.int64(), safe=True)
            except pa.ArrowInvalid:
                pass
        if not pa.types.is_integer(items.type):
            raise _not_integers(log, log.path, items.to_numpy(zero_copy_only=False))
        return _id_rows(items.to_numpy(zero_copy_only=False), mapping.n_items, mapping.offset)
    return lookup(items)


def rows_of(items: pa.Array, mapping: ItemRows, log: Log) -> np.ndarray:
    """Table row of each raw item id of ``log``'s (-1: no row), as streamed pairs are
    mapped; IdMappingError naming a data row of ``log`` for ids that cannot be rows."""
    return _batch_rows(items, mapping, log)


def mapped_pairs(items: pa.Array, users: pa.Array, mapping: ItemRows, log: Log) -> tuple[pa.Array, np.ndarray]:
    """The users and table rows (through ``mapping``) of one batch's interactions whose
    item has a row (rows with an empty user or item id dropped)."""
    valid = pc.and_(pc.is_valid(items), pc.is_valid(users))
    if items.null_count or users.null_count:
        items, users = items.filter(valid), users.filter(valid)
    rows = _batch_rows(items, mapping, log)
    mapped = np.flatnonzero(rows >= 0)
    return users.take(pa.array(mapped)), rows[mapped]
