"""Exact search keeps the top-K tie rule (lower table row first) when ties straddle the
K-th place.

Known answer: integer vectors give exact float32 scores, so the reference is the
contract (:func:`select_topk`) applied to every score. faiss-cpu's BLAS path keeps higher
rows among scores tied at the K-th place (with K=1 its arg-max handler keeps any), which
:func:`sharded_topk` must not pass on.
"""

from __future__ import annotations

import numpy as np
import pytest

from auditor.retrieval.search import select_topk, sharded_topk


def _reference(queries: np.ndarray, table: np.ndarray, k: int) -> np.ndarray:
    scores = (queries.astype(np.float64) @ table.astype(np.float64).T).astype(np.float32)
    n = table.shape[0]
    rows = select_topk(scores, np.broadcast_to(np.arange(n), scores.shape).copy(), min(k, n))[1]
    return np.pad(rows, ((0, 0), (0, k - rows.shape[1])), constant_values=-1)


@pytest.mark.parametrize("k", [1, 5, 10, 60])
@pytest.mark.parametrize("n_items", [50, 3000])
def test_ties_at_the_kth_place_keep_the_lower_rows(k: int, n_items: int) -> None:
    rng = np.random.default_rng(k + n_items)
    # Seven distinct vectors repeated: every score is tied many times over.
    table = rng.integers(-2, 3, (7, 16)).astype(np.float32)[rng.integers(0, 7, n_items)]
    queries = rng.integers(-2, 3, (40, 16)).astype(np.float32)
    _, rows = sharded_topk(queries, [table], k, normalise=False)
    np.testing.assert_array_equal(rows, _reference(queries, table, k))
    # Shards merged, and table slices searched by threads, keep the same lists.
    shards = [table[: n_items // 3], table[n_items // 3 :]]
    np.testing.assert_array_equal(sharded_topk(queries, shards, k, normalise=False)[1], rows)
    np.testing.assert_array_equal(sharded_topk(queries, [table], k, normalise=False, threads=2)[1], rows)


def test_six_identical_rows_top1_is_row_zero() -> None:
    table = np.zeros((6, 4), dtype=np.float32)
    table[:, 0] = 1.0
    table[2, 0] = 0.5
    _, rows = sharded_topk(np.ones((3, 4), dtype=np.float32), [table], 1, normalise=False)
    assert rows.tolist() == [[0], [0], [0]]
