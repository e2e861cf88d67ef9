"""The popular list under each query's exclusions (auditor/retrieval/serving.py): the first
K rows of the popularity ranking a query has not been excluded from, without a candidate
matrix, equal to filtering the ranking as candidates."""

from __future__ import annotations

import numpy as np

from auditor.loading.csr import build_csr
from auditor.retrieval.serving import filter_excluded, skip_excluded


def test_hand_computed_lists() -> None:
    order = np.array([5, 2, 7, 0, 3])  # the ranking (most popular first)
    # query 0 excludes 2 and 0; query 1 nothing; query 2 every row but 3; query 3 rows outside the ranking.
    indptr = np.array([0, 2, 2, 6, 8])
    rows = np.array([0, 2, 0, 2, 5, 7, 1, 4])
    got = skip_excluded(order, (indptr, rows), n_items=8, k=3)
    assert got.tolist() == [[5, 7, 3], [5, 2, 7], [3, -1, -1], [5, 2, 7]]
    assert skip_excluded(order[:0], (indptr, rows), 8, 2).tolist() == [[-1, -1]] * 4


def test_equal_to_filtering_the_ranking_as_candidates() -> None:
    rng = np.random.default_rng(5)
    for _ in range(200):
        n_items, n_queries, k = int(rng.integers(1, 40)), int(rng.integers(1, 12)), int(rng.integers(1, 25))
        m = int(rng.integers(0, 150))
        exclude = build_csr(rng.integers(0, n_queries, m), rng.integers(0, n_items, m), n_queries)
        width = min(n_items, k + int(np.diff(exclude[0]).max(initial=0)))
        order = rng.permutation(n_items)[:width]
        expected = filter_excluded(np.broadcast_to(order, (n_queries, width)), exclude, n_items, k)
        np.testing.assert_array_equal(skip_excluded(order, exclude, n_items, k), expected)
