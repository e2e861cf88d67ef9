"""A table that fits in one score tile is ranked densely (auditor.retrieval.one_tile):
the lists equal the brute-force reference and the tiled scan's, row for row."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import auditor.retrieval.scorings as scorings_module
from auditor.retrieval.one_tile import FloorSeed, _kth_largest, _ranked
from auditor.retrieval.scoring_blocks import encode, passing_entries
from auditor.retrieval.scorings import multi_scoring_topk
from test_retrieval_scorings import ALPHAS, _check, _exclusions, _floats, _integers, reference


def _tiled(queries: np.ndarray, table: np.ndarray, k: int, **kwargs):  # type: ignore[no-untyped-def]
    """The tiled scan on the same problem (tiles smaller than the table)."""
    return multi_scoring_topk(queries, table, k, ALPHAS, item_block=256, **kwargs)


def _dense_beside_tiled(monkeypatch: pytest.MonkeyPatch, queries: np.ndarray, table: np.ndarray, k: int,
                        exclude: tuple[np.ndarray, np.ndarray]):  # type: ignore[no-untyped-def]
    """The default (dense) lists, checked against the float64 reference, and the tiled
    scan's on the same problem; the tiled scan refused from then on."""
    tiled = _tiled(queries, table, k, exclude=exclude)
    _no_tiled_scan(monkeypatch)
    dense = multi_scoring_topk(queries, table, k, ALPHAS, exclude=exclude)
    _check(dense, queries, table, k, exclude)
    return dense, tiled


def _no_tiled_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object) -> None:
        raise AssertionError("the tiled scan ran")

    monkeypatch.setattr(scorings_module, "scan_block", refuse)


@pytest.mark.parametrize("data", [_floats, _integers])
def test_one_tile_equals_reference_and_tiled_scan(data, monkeypatch: pytest.MonkeyPatch) -> None:
    table, queries = data(1200, 90, 8, 21)
    dense, tiled = _dense_beside_tiled(monkeypatch, queries, table, 50, _exclusions(90, 1200, 22, most=60))
    for alpha in ALPHAS:
        np.testing.assert_array_equal(dense[alpha][1], tiled[alpha][1])
        np.testing.assert_array_equal(dense[alpha][0], tiled[alpha][0])


def test_one_tile_negative_kth_and_short_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    """K beyond the non-negative scores (the float partition), and queries with fewer
    servable rows than K (padded lists)."""
    table, queries = _floats(300, 40, 6, 23)
    queries[:20] = -np.abs(queries[:20])
    table[:250] = np.abs(table[:250])  # most scores of the first 20 queries negative
    indptr = np.minimum(np.arange(41, dtype=np.int64), 10) * 200  # the first 10 exclude 200 rows: 100 left
    rows = np.concatenate([np.arange(50, 250)] * 10).astype(np.int64)
    _no_tiled_scan(monkeypatch)
    found = multi_scoring_topk(queries, table, 150, ALPHAS, exclude=(indptr, rows))
    _check(found, queries, table, 150, (indptr, rows))
    assert (found[1.0][1][:10, 100:] == -1).all() and (found[1.0][1][10:] >= 0).all()
    assert (found[1.0][0][10:20, -1] < 0).all()  # a negative K-th score


def test_one_tile_threads_and_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    table, queries = _integers(900, 70, 6, 24)
    exclude = _exclusions(70, 900, 25)
    _no_tiled_scan(monkeypatch)
    one = multi_scoring_topk(queries, table, 30, ALPHAS, exclude=exclude, threads=1)
    monkeypatch.setattr(scorings_module, "INLINE_ENTRIES", 0)  # blocks on the pool's threads
    many = multi_scoring_topk(queries, table, 30, ALPHAS, exclude=exclude, threads=2, query_block=16)
    _check(one, queries, table, 30, exclude)
    for alpha in ALPHAS:
        np.testing.assert_array_equal(many[alpha][1], one[alpha][1])


def test_one_tile_leaves_extreme_norms_to_the_tiled_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    """A norm so small that 1/|k| overflows float32 cannot be estimated in float32:
    the tiled scan ranks that table, with the same lists."""
    table, queries = _floats(200, 10, 4, 26)
    table[5] = np.float32(1e-39)

    def refuse(*args: object) -> None:
        raise AssertionError("the one-tile kernel ran")

    monkeypatch.setattr(scorings_module, "one_tile_topk", refuse)
    found = multi_scoring_topk(queries, table, 20, ALPHAS)
    _check(found, queries, table, 20)


def test_kth_largest_of_mixed_signs() -> None:
    rng = np.random.default_rng(27)
    block = rng.standard_normal((50, 40)).astype(np.float32)
    block[:10] -= 3  # rows whose 7th largest is negative
    block[10:15, :30] = -0.0  # signed zeros: equal to +0.0
    block[15:20, :5] = -np.inf
    expected = np.sort(block, axis=1)[:, -7]
    np.testing.assert_array_equal(_kth_largest(block, 7), expected)


def test_ranked_keeps_the_k_best_keys_per_query() -> None:
    # Query 0: 3 candidates (K = 2); query 1: exactly 2; query 2: none; query 3: 1.
    query = np.array([0, 0, 0, 1, 1, 3])
    keys = encode(np.array([1.0, 3.0, 2.0, 5.0, 5.0, -1.0], dtype=np.float32), np.array([4, 1, 2, 9, 3, 0]))
    best = _ranked(query, keys, 4, 2)
    expected = np.zeros((4, 2), dtype=np.uint64)
    expected[0], expected[1], expected[3, 0] = keys[[1, 2]], keys[[4, 3]], keys[5]
    np.testing.assert_array_equal(best, expected)


@pytest.mark.parametrize("data", [_floats, _integers])
def test_seeded_floors_bound_the_kth_score(data) -> None:
    """The floors a sample seeds never exceed any scoring's true K-th best score
    (excluded rows left out), so the tiled scan they start loses nothing."""
    table, queries = data(4000, 60, 8, 28)
    exclude = _exclusions(60, 4000, 29, most=300)
    norms = np.linalg.norm(table.astype(np.float64), axis=1)
    seed = FloorSeed(table, norms, ALPHAS, 0, 20)
    assert seed.usable and seed.rows.size == 500
    query_norms = np.linalg.norm(queries.astype(np.float64), axis=1)
    floors = seed.floors(queries, query_norms, exclude, 16, None)
    for alpha, floor in zip(ALPHAS, floors):
        scores = reference(queries, table, 20, alpha, exclude)[0][:, -1]
        factor = np.where(query_norms > 0, query_norms ** (alpha - 1.0), 0.0)  # reference scores carry |q|^(a-1)
        assert np.all(floor.astype(np.float64) * factor <= scores * (1 + 1e-6) + 1e-6)
        assert np.mean(floor > -np.inf) > 0.9  # and they do seed


def test_lists_equal_with_and_without_seeded_floors(monkeypatch: pytest.MonkeyPatch) -> None:
    table, queries = _integers(5000, 40, 8, 30)
    exclude = _exclusions(40, 5000, 31, most=200)
    seeded = multi_scoring_topk(queries, table, 30, ALPHAS, exclude=exclude)
    init = FloorSeed.__init__

    def unseeded(self: FloorSeed, *args: object) -> None:
        init(self, *args)  # type: ignore[arg-type]
        self.usable = False

    monkeypatch.setattr(FloorSeed, "__init__", unseeded)
    plain = multi_scoring_topk(queries, table, 30, ALPHAS, exclude=exclude)
    _check(seeded, queries, table, 30, exclude)
    for alpha in ALPHAS:
        np.testing.assert_array_equal(seeded[alpha][1], plain[alpha][1])


def test_passing_entries_alike_on_host_and_device_paths() -> None:
    """The tiled scan's candidate search: numpy's (CPU) and torch's (other devices) find
    the same entries of a score tile, in the same order."""
    rng = np.random.default_rng(32)
    tile = torch.from_numpy(rng.standard_normal((30, 512)).astype(np.float32))
    threshold = torch.from_numpy(rng.uniform(1.5, 3.5, 30).astype(np.float32))
    segments = tile.view(30, 4, 128)
    host = passing_entries(segments, threshold, host=True)
    device = passing_entries(segments, threshold, host=False)
    for a, b in zip(host, device):
        np.testing.assert_array_equal(a, b)
    query, segment, column, dots = host
    expected = np.argwhere(tile.numpy() >= threshold.numpy()[:, None])
    np.testing.assert_array_equal(np.stack([query, segment * 128 + column], axis=1), expected)
    np.testing.assert_array_equal(dots, tile.numpy()[expected[:, 0], expected[:, 1]])


def test_tables_up_to_one_tile_rows_are_ranked_densely(monkeypatch: pytest.MonkeyPatch) -> None:
    # 5,000 rows: beyond one default score tile (2,048), within ONE_TILE_ROWS: no tiled scan
    # by default, the same lists as the tiled scan; a memory ceiling that shards the table
    # keeps the tiled scan (the dense tile would hold the whole table).
    table, queries = _floats(5000, 40, 8, 31)
    exclude = _exclusions(40, 5000, 32)
    sharded = multi_scoring_topk(queries, table, 30, ALPHAS, exclude=exclude, max_memory=40_000)
    dense, tiled = _dense_beside_tiled(monkeypatch, queries, table, 30, exclude)
    for alpha in ALPHAS:
        np.testing.assert_array_equal(dense[alpha][1], tiled[alpha][1])
        np.testing.assert_array_equal(dense[alpha][1], sharded[alpha][1])
    with pytest.raises(AssertionError, match="the tiled scan ran"):
        multi_scoring_topk(queries, table, 30, ALPHAS, exclude=exclude, max_memory=40_000)
