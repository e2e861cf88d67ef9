"""Sets of item rows per user as CSR (``indptr``, ``values``): built from (owner, value)
pairs, taken at positions, and the mean item vector of each set. Held-out items, training
items and history queries share them."""

from __future__ import annotations

import numpy as np

GATHER_ROWS = 1 << 16
"""Item vectors gathered per step when averaging users' training items."""


def mean_rows(table: np.ndarray, indptr: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """float32 (n, dim): the mean of each CSR row set's table rows (zeros for an empty set).

    Sums run in float64, in set order, ``GATHER_ROWS`` entries at a time (a set split
    between two blocks is the sum of its two partial sums): one sparse product per block
    (scipy's CSR times dense adds each set's rows in order, as a running sum would), the
    table's rows converted to float64 once per block (the whole table when it is smaller).
    """
    from scipy.sparse import csr_matrix  # heavy: loaded when history queries are built

    counts = np.diff(indptr)
    sums = np.zeros((counts.shape[0], table.shape[1]), dtype=np.float64)
    n_items = int(table.shape[0])
    whole = np.asarray(table, dtype=np.float64) if n_items <= GATHER_ROWS else None
    for start in range(0, int(rows.shape[0]), GATHER_ROWS):
        stop = min(start + GATHER_ROWS, int(rows.shape[0]))
        first = int(np.searchsorted(indptr, start, "right")) - 1  # the sets this block holds entries of
        last = int(np.searchsorted(indptr, stop, "left"))
        block_ptr = np.clip(indptr[first : last + 1], start, stop) - start
        if whole is not None:
            columns, gathered = rows[start:stop], whole
        else:  # the block's distinct rows only: memory bounded by the block
            distinct, columns = np.unique(rows[start:stop], return_inverse=True)
            gathered = np.asarray(table[distinct], dtype=np.float64)
        ones = np.ones(stop - start, dtype=np.float64)
        block = csr_matrix((ones, columns, block_ptr), shape=(last - first, gathered.shape[0]))
        sums[first:last] += block @ gathered
    means: np.ndarray = sums / np.maximum(counts, 1)[:, None]
    return means.astype(np.float32)


def build_csr(owner: np.ndarray, values: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(indptr, values) of ``n`` sets from (owner, value) pairs: distinct and ascending
    within each set. One sort of the key owner·(max value + 1) + value where it cannot
    overflow int64 (a tenth of a lexicographic sort's time), else the lexicographic sort."""
    span = int(values.max()) + 1 if values.size else 0
    if values.size and int(values.min()) >= 0 and int(owner.min()) >= 0 and (int(owner.max()) + 1) * span < 2**63:
        key = owner.astype(np.int64) * span + values.astype(np.int64)
        key.sort()
        key = key[np.concatenate(([True], key[1:] != key[:-1]))]
        o, v = np.divmod(key, span)
    else:
        order = np.lexsort((values, owner))
        o, v = owner[order], values[order]
        first = np.ones(o.shape[0], dtype=bool)
        first[1:] = (o[1:] != o[:-1]) | (v[1:] != v[:-1])
        o, v = o[first], v[first]
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(o, minlength=n), out=indptr[1:])
    return indptr, v.astype(np.int64, copy=False)


def take_csr(indptr: np.ndarray, values: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The sets at positions ``index`` (any order, repeats allowed), vectorised."""
    starts, counts = indptr[index], indptr[index + 1] - indptr[index]
    new = np.zeros(index.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=new[1:])
    at = np.repeat(starts - new[:-1], counts) + np.arange(int(new[-1]), dtype=np.int64)
    return new, values[at]


def own_slots(lists: np.ndarray, indptr: np.ndarray, values: np.ndarray, n_items: int) -> int:
    """How many filled slots of ``lists`` (n, K item rows, -1 empty) hold an item of their
    row's own set (``indptr``, ``values``: n sets, as :func:`build_csr` makes them), vectorised."""
    return int(_own(lists, indptr, values, n_items)[1].sum())


def own_rows(lists: np.ndarray, indptr: np.ndarray, values: np.ndarray, n_items: int) -> int:
    """How many rows of ``lists`` hold at least one item of their own set (as :func:`own_slots`)."""
    listed, own = _own(lists, indptr, values, n_items)
    return int(np.unique(listed[own]).size)


def _own(lists: np.ndarray, indptr: np.ndarray, values: np.ndarray, n_items: int) -> tuple[np.ndarray, np.ndarray]:
    """The row of each filled slot of ``lists`` and whether it holds an item of its row's set."""
    n = lists.shape[0]
    owners = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr[: n + 1]))
    listed = np.repeat(np.arange(n, dtype=np.int64), lists.shape[1])[lists.reshape(-1) >= 0]
    keys = listed * (n_items + 1) + lists.reshape(-1)[lists.reshape(-1) >= 0]
    return listed, np.isin(keys, owners * (n_items + 1) + values[: owners.size])
