"""Huge embedding values (near float32's ±3.4e38): norms, normalisation and exact search
must stay finite and rank exactly as the same table scaled down would."""

from __future__ import annotations

import numpy as np
import pytest

from auditor.loading.shards import table_shards
from auditor.retrieval import l2_normalise, search_shard, sharded_topk
from auditor.retrieval import merge_topk as _merge
from auditor.retrieval.search import overflow_shifts

F32_MAX = float(np.finfo(np.float32).max)


def _huge_table(n: int = 3000, dim: int = 16, seed: int = 0) -> np.ndarray:
    """Rows with entries around ±1e38 (up to ±3e38), norms varying by row."""
    rng = np.random.default_rng(seed)
    scale = rng.uniform(0.2, 1.0, n)[:, None]
    return (rng.uniform(-3.0, 3.0, (n, dim)) * scale * 1e38).astype(np.float32)


def _reference_topk(queries: np.ndarray, table: np.ndarray, k: int) -> np.ndarray:
    """Top-k rows by exact float64 inner product (float32 inputs cannot overflow it)."""
    scores = queries.astype(np.float64) @ table.astype(np.float64).T
    rows = np.broadcast_to(np.arange(table.shape[0]), scores.shape)
    return np.lexsort((rows, -scores), axis=-1)[:, :k]


def test_l2_normalise_keeps_huge_and_tiny_rows() -> None:
    table = _huge_table(200)
    table[3] = F32_MAX
    table[4] = 0.0
    table[5] = np.float32(1e-44)  # subnormal: float32 squares underflowed to a zero row
    unit, nonzero = l2_normalise(table)
    norms = np.linalg.norm(unit.astype(np.float64), axis=1)
    assert nonzero.tolist() == [i != 4 for i in range(200)]
    np.testing.assert_allclose(norms[nonzero], 1.0, rtol=1e-6)
    assert not unit[4].any()
    # Dividing a row by a power of two is exact, so the normalised rows are identical
    # (row 5 left out: 1e-44 / 2**100 is below float32's range).
    keep = np.arange(200) != 5
    np.testing.assert_array_equal(l2_normalise(np.ldexp(table[keep], -100))[0], unit[keep])


@pytest.mark.parametrize("normalise", [False, True])
def test_huge_table_ranks_like_the_table_divided_by_1e30(normalise: bool) -> None:
    table = _huge_table()
    queries = np.random.default_rng(1).standard_normal((40, 16)).astype(np.float32)
    _, rows = sharded_topk(queries, [table], 20, normalise)
    small = (table.astype(np.float64) / 1e30).astype(np.float32)
    _, small_rows = sharded_topk(queries, [small], 20, normalise)
    np.testing.assert_array_equal(rows, small_rows)
    if not normalise:
        np.testing.assert_array_equal(rows, _reference_topk(queries, table, 20))


def test_huge_dot_scores_are_the_true_inner_products() -> None:
    table = _huge_table()
    queries = np.random.default_rng(2).standard_normal((10, 16)).astype(np.float32)
    scores, rows = sharded_topk(queries, [table], 5, normalise=False)
    assert scores.dtype == np.float64  # beyond float32's range
    exact = np.take_along_axis(queries.astype(np.float64) @ table.astype(np.float64).T, rows, axis=1)
    np.testing.assert_allclose(scores, exact, rtol=1e-5)
    # A power-of-two scale-down gives the same lists and exactly scaled scores.
    scaled_scores, scaled_rows = sharded_topk(queries, [np.ldexp(table, -100)], 5, normalise=False)
    np.testing.assert_array_equal(scaled_rows, rows)
    np.testing.assert_array_equal(np.ldexp(scaled_scores.astype(np.float64), 100), scores)


def test_huge_queries_and_huge_table_together() -> None:
    table = _huge_table(seed=3)
    queries = (np.random.default_rng(4).uniform(-3, 3, (25, 16)) * 1e38).astype(np.float32)
    _, rows = sharded_topk(queries, [table], 15, normalise=False)
    np.testing.assert_array_equal(rows, _reference_topk(queries, table, 15))


def test_shards_of_different_magnitude_merge_on_one_scale() -> None:
    # Half the rows ordinary, half huge: each shard gets its own shift, and the merged
    # lists must still equal one exact search over the whole table.
    rng = np.random.default_rng(5)
    table = rng.standard_normal((2000, 8)).astype(np.float32)
    table[1000:] = _huge_table(1000, 8, seed=6)
    table[1500:1510] = rng.standard_normal((10, 8)).astype(np.float32)  # ordinary rows among huge
    queries = rng.standard_normal((30, 8)).astype(np.float32)
    queries[0] = -queries[0] * 1e30  # one huge query among ordinary ones
    reference = _reference_topk(queries, table, 25)
    for shards in ([table], table_shards(table, 300), table_shards(table, 1000)):
        _, rows = sharded_topk(queries, shards, 25, normalise=False)
        np.testing.assert_array_equal(rows, reference)
    # The Dask path searches shards separately and merges their (rescaled) scores.
    merged = None
    for start in (1000, 0):  # any completion order
        found = search_shard(table[start : start + 1000], queries, 25, start, (1.0, 0.0), None)
        merged = _merge(merged, found[1.0], 25)
    assert merged is not None
    np.testing.assert_array_equal(merged[1], reference)


def test_ordinary_tables_are_searched_untouched() -> None:
    assert overflow_shifts(10.0, 10.0, 128) == (0, 0)
    assert overflow_shifts(1e30, 1e4, 512) == (0, 0)  # 5e36: large, but fits
    assert overflow_shifts(1e30, 1e6, 512) != (0, 0)  # 5e38 would not
    table = np.random.default_rng(8).standard_normal((500, 8)).astype(np.float32)
    scores, _ = sharded_topk(table[:5], [table], 10, normalise=False)
    assert scores.dtype == np.float32


def test_overflow_shifts_bound_every_inner_product() -> None:
    for table_peak, query_peak, dim in [(3e38, 1.0, 64), (3e38, 3e38, 1024), (1.0, 3e38, 8), (1e20, 1e20, 4)]:
        t, q = overflow_shifts(table_peak, query_peak, dim)
        assert t >= 0 and q >= 0
        assert dim * np.ldexp(table_peak, -t) * np.ldexp(query_peak, -q) < 2.0**126
    # The larger side is shifted first: ordinary queries stay untouched.
    assert overflow_shifts(3e38, 1.0, 64)[1] == 0
