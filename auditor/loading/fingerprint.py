"""The held-out set's identity by content (``accuracy.holdout_fingerprint``, docs/report.md):
SHA-256 over its distinct (raw user id, raw item id) pairs in a canonical order, each id
as text, so the same pairs read from CSV or Parquet, in any row order, with repeats, by any
path, or recorded in a checkpoint, agree, and a holdout regenerated in place does not.
An id → row mapping's identity (``inputs.item_id_fingerprint``, ``user_id_fingerprint``) is
SHA-256 over its raw ids in row order, each as text, hashed the same way (:func:`ids_fingerprint`);
rows taken as ids (``--id-offset N``) are the ids N..n−1+N in row order (:func:`mapping_fingerprint`),
so an id file listing them in order is the same mapping; such ids are the offset rule itself,
row = id − N for every id whatever the table's size (:func:`in_order_ids`)."""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from auditor.model import InteractionPairs
from auditor.values import ItemRows

FINGERPRINT_PREFIX = "sha256:"


def _as_text(ids: np.ndarray) -> pa.Array:
    """Raw ids as UTF-8 text (integral ids in decimal): one id, one text, whatever the file's type."""
    return pa.array(ids.tolist() if ids.dtype == object else ids).cast(pa.string())


def _length_and_bytes(text: pa.Array) -> tuple[bytes, bytes]:
    """Each string's byte length (int64 little-endian) and their bytes end to end: unambiguous."""
    text = pa.concat_arrays([text.cast(pa.large_string())])  # fresh buffers, 64-bit offsets
    offsets = np.frombuffer(text.buffers()[1], dtype="<i8")[text.offset : text.offset + len(text) + 1]
    data = text.buffers()[2]
    body = b"" if data is None else data.to_pybytes()[offsets[0] : offsets[-1]]
    return np.diff(offsets).astype("<i8").tobytes(), body


def pairs_fingerprint(pairs: InteractionPairs, items: ItemRows) -> str:
    """``sha256:<hex>`` of the distinct (raw user id, raw item id) pairs of ``pairs``, item
    rows read back to raw ids through ``items``; sorted by the ids' text (vectorised)."""
    users = _as_text(np.asarray(pairs.user_ids))
    table = pa.table({
        "user": users.take(pa.array(np.asarray(pairs.user_index, dtype=np.int64))),
        "item": _as_text(np.asarray(items.raw_ids(pairs.item_rows))),
    }).sort_by([("user", "ascending"), ("item", "ascending")])
    user, item = (table.column(name).combine_chunks() for name in ("user", "item"))
    if len(user) > 1:  # repeats of a pair are one pair
        repeat = pc.and_(pc.equal(user[1:], user[:-1]), pc.equal(item[1:], item[:-1]))
        keep = pa.concat_arrays([pa.array([True]), pc.invert(repeat)])
        user, item = user.filter(keep), item.filter(keep)
    digest = hashlib.sha256()
    for part in (*_length_and_bytes(user), *_length_and_bytes(item)):
        digest.update(part)
    return FINGERPRINT_PREFIX + digest.hexdigest()


def ids_fingerprint(ids: np.ndarray | None) -> str | None:
    """``sha256:<hex>`` of the raw ids of a table's rows, in row order, each as text (the
    lengths then the bytes, as :func:`pairs_fingerprint` hashes one column): one mapping by
    content, whatever file or checkpoint gave it; None for no ids."""
    if ids is None:
        return None
    digest = hashlib.sha256()
    for part in _length_and_bytes(_as_text(np.asarray(ids))):
        digest.update(part)
    return FINGERPRINT_PREFIX + digest.hexdigest()


def in_order_ids(ids: np.ndarray | None) -> tuple[int, int] | None:
    """(N, last) where ``ids`` list N, N+1, ..., last in row order, N >= 0, each id as its
    fingerprint reads it (its text: ``"07"`` is no 7): the mapping is then row = id − N,
    the rule of rows taken as ids (``--id-offset N``), for every id. None otherwise."""
    if ids is None or len(ids) == 0:
        return None
    ids = np.asarray(ids)
    if np.issubdtype(ids.dtype, np.integer):
        first = int(ids[0])
        expected = np.arange(first, first + len(ids), dtype=np.int64)
        same = first >= 0 and bool(np.array_equal(ids.astype(np.int64, copy=False), expected))
    else:
        text = _as_text(ids)
        head, tail = text[0].as_py(), text[-1].as_py()
        first = int(head) if isinstance(head, str) and head.isdigit() and head.isascii() else -1
        same = first >= 0 and str(first) == head and tail == str(first + len(ids) - 1)  # else no need to read them all
        if same:
            expected = _as_text(np.arange(first, first + len(ids), dtype=np.int64))
            same = bool(pc.all(pc.equal(text, expected)).as_py())
    return (first, first + len(ids) - 1) if same else None


def mapping_fingerprint(ids: np.ndarray | None, n_rows: int, offset: int) -> str:
    """:func:`ids_fingerprint` of a table's id → row mapping: its ``ids``, else (rows taken as
    ids, row = id − ``offset``) the ids ``offset``..``n_rows``−1+``offset`` in row order, the
    ids an in-order id file would list: one mapping, one fingerprint, however it was given."""
    fingerprint = ids_fingerprint(np.arange(n_rows, dtype=np.int64) + offset if ids is None else ids)
    assert fingerprint is not None
    return fingerprint
