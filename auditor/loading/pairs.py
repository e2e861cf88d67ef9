"""(user, item-row) pairs of a log, for probes and retraining: every mapped row, or a
seeded uniform sample of at most ``max_rows`` kept in log order (memory O(max_rows)).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from auditor.errors import InputError, InteractionsError, setting
from auditor.loading.alignment import mapped_pairs
from auditor.values import ItemRows
from auditor.loading.logs import Log, maybe_int, open_log, read_ids
from auditor.values import LogSpec
from auditor.loading.ids import ids_to_numpy
from auditor.model import InteractionPairs


def read_pairs(spec: LogSpec, mapping: ItemRows, *, max_rows: int | None = None, seed: int = 0) -> InteractionPairs:
    """(user, item-row) pairs of the log ``spec`` names, items mapped to rows by
    ``mapping``, dropping items without a row.

    With ``max_rows``, a seeded uniform sample (without replacement) of the mapped rows,
    kept in log order: each row draws a random key and the ``max_rows`` smallest keys
    survive (memory O(max_rows)). Users get a dense index in order of first appearance.
    """
    log = open_log(spec)
    if log.user_col is None:
        raise InteractionsError(
            f"cannot find a user id column in {log.path}; {log.columns_found()}. "
            f"Pass {setting('user_col')} NAME"
        )
    if max_rows is not None and max_rows < 1:
        raise InputError(f"max_rows must be at least 1, got {max_rows}")
    return read_ids(log, lambda as_strings: _pairs(log, mapping, max_rows, seed, as_strings))


def _pairs(log: Log, mapping: ItemRows, max_rows: int | None, seed: int, as_strings: bool) -> InteractionPairs:
    rng = np.random.default_rng(seed)
    users_parts: list[pa.Array] = []
    rows_parts: list[np.ndarray] = []
    pos_parts: list[np.ndarray] = []
    key_parts: list[np.ndarray] = []
    kept = 0
    seen = 0
    n_read = 0
    for items, users in log.batches(as_strings):
        assert users is not None
        n_read += len(items)
        batch_users, rows = mapped_pairs(items, users, mapping, log)
        users_parts.append(batch_users)
        rows_parts.append(rows)
        pos_parts.append(seen + np.arange(rows.size, dtype=np.int64))
        seen += rows.size
        kept += rows.size
        if max_rows is not None:
            key_parts.append(rng.random(rows.size))
            if kept > 2 * max_rows:
                kept = _shrink(users_parts, rows_parts, pos_parts, key_parts, max_rows)
    if max_rows is not None and kept > max_rows:
        _shrink(users_parts, rows_parts, pos_parts, key_parts, max_rows)
    if n_read == 0:
        raise InteractionsError(f"no interactions in {log.path}")
    users_all = pa.concat_arrays(users_parts)  # not empty: at least one batch was read
    rows_all = np.concatenate(rows_parts)
    pos_all = np.concatenate(pos_parts)
    order = np.argsort(pos_all, kind="stable")  # back to log order
    users_all = users_all.take(pa.array(order))
    rows_all = rows_all[order]
    uniq = pc.unique(users_all)  # order of first appearance
    user_ids = maybe_int(uniq) if as_strings else uniq
    user_index = pc.index_in(users_all, value_set=uniq).to_numpy(zero_copy_only=False).astype(np.int64)
    return InteractionPairs(
        user_index=user_index,
        item_rows=rows_all.astype(np.int64, copy=False),
        user_ids=ids_to_numpy(user_ids, f"user column {log.user_col!r} of {log.path}"),
        source=log.path,
    )


def _shrink(
    users: list[pa.Array], rows: list[np.ndarray], pos: list[np.ndarray], keys: list[np.ndarray], size: int
) -> int:
    """Keep the ``size`` rows with the smallest random keys (in place); return the count."""
    k = np.concatenate(keys)
    keep = np.sort(np.argpartition(k, size - 1)[:size]) if k.size > size else np.arange(k.size)
    u = pa.concat_arrays(users).take(pa.array(keep))
    r, p = np.concatenate(rows)[keep], np.concatenate(pos)[keep]
    users[:], rows[:], pos[:], keys[:] = [u], [r], [p], [k[keep]]
    return int(keep.size)
