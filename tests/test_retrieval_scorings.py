"""Every scoring from one pass of inner products (auditor.retrieval.scorings): the lists
equal a brute-force float64 reference row for row, ties broken by the lower row."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch

import auditor.retrieval.scoring_blocks as blocks_module
import auditor.retrieval.scorings as scorings_module
from auditor.errors import EmbeddingTableError, QueryError
from auditor.progress import Advance, Progress
from auditor.retrieval.scoring_blocks import decode, encode
from auditor.retrieval.scorings import multi_scoring_topk
from auditor.retrieval.search import sharded_topk

ALPHAS = (1.0, 0.0, 0.25, 0.5, 0.75)
Exclude = tuple[np.ndarray, np.ndarray]


@pytest.fixture(autouse=True, params=["host scan", "device scan", "cuda"])
def scan(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test runs on the CPU's scan, again on the device scan (``--device cuda``'s
    code path, here on torch's CPU), and on a GPU where there is one, each held to the
    same brute-force reference."""
    if request.param == "device scan":
        monkeypatch.setattr(scorings_module, "scans_on_device", lambda device: True)
    if request.param == "cuda":
        if not torch.cuda.is_available():
            pytest.skip("needs a CUDA device (GPU path untested here)")
        defaults = multi_scoring_topk.__defaults__
        assert defaults is not None and multi_scoring_topk.__code__.co_varnames[11] == "device"
        monkeypatch.setattr(multi_scoring_topk, "__defaults__", (*defaults[:-1], "cuda"))
    return str(request.param)


def reference(queries: np.ndarray, table: np.ndarray, k: int, alpha: float, exclude: Exclude | None = None):
    """Brute force: float64 scores |q|^a |k|^a cos (0 for zero vectors when a > 0, zero
    vectors left out when a = 0), excluded rows left out, lexsort by (-score, row)."""
    q, t = queries.astype(np.float64), table.astype(np.float64)
    dots = q @ t.T
    q_norms, t_norms = np.linalg.norm(q, axis=1), np.linalg.norm(t, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        if alpha == 1.0:
            scores = dots
        elif alpha == 0.0:
            scores = dots / t_norms[None, :] / q_norms[:, None]
        else:
            scores = dots * t_norms[None, :] ** (alpha - 1) * q_norms[:, None] ** (alpha - 1)
    scores = np.where(q_norms[:, None] == 0, 0.0, scores)
    dropped = np.broadcast_to(t_norms == 0, scores.shape).copy() if alpha == 0.0 else np.zeros(scores.shape, bool)
    scores = np.where(t_norms[None, :] == 0, 0.0, scores)
    if exclude is not None:
        indptr, rows = exclude
        for i in range(q.shape[0]):
            dropped[i, rows[indptr[i] : indptr[i + 1]]] = True
    rows = np.broadcast_to(np.arange(t.shape[0]), scores.shape)
    order = np.lexsort((rows, np.where(dropped, np.inf, -scores)), axis=1)[:, :k]
    top_rows = np.where(np.take_along_axis(dropped, order, axis=1), -1, order)
    top_scores = np.where(top_rows < 0, -np.inf, np.take_along_axis(scores, order, axis=1))
    pad = k - top_rows.shape[1]
    return np.pad(top_scores, ((0, 0), (0, pad)), constant_values=-np.inf), np.pad(
        top_rows, ((0, 0), (0, pad)), constant_values=-1
    )


def _check(found, queries, table, k, exclude=None, alphas=ALPHAS, rtol=1e-5) -> None:
    for alpha in alphas:
        scores, rows = reference(queries, table, k, alpha, exclude)
        np.testing.assert_array_equal(found[alpha][1], rows, err_msg=f"a = {alpha}")
        np.testing.assert_allclose(found[alpha][0], scores, rtol=rtol, atol=1e-6, err_msg=f"a = {alpha}")


def _floats(m: int, n: int, dim: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Random directions, norms spread over 0.1-10 (tie-free)."""
    rng = np.random.default_rng(seed)
    table = rng.standard_normal((m, dim)).astype(np.float32) * rng.uniform(0.1, 10, (m, 1)).astype(np.float32)
    return table, rng.standard_normal((n, dim)).astype(np.float32)


def _integers(m: int, n: int, dim: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Entries in {-1, 0, 1} with duplicated rows: inner products and squared norms are
    exact small integers, so real ties abound (and only the row can break them)."""
    rng = np.random.default_rng(seed)
    table = rng.integers(-1, 2, (m, dim)).astype(np.float32)
    table[m // 2 :] = table[rng.integers(0, m // 2, m - m // 2)]  # duplicates
    table[rng.choice(m, 3, replace=False)] = 0.0  # zero vectors
    return table, rng.integers(-1, 2, (n, dim)).astype(np.float32)


def _exclusions(n: int, m: int, seed: int, most: int = 20) -> Exclude:
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, most, n)
    rows = np.concatenate([np.sort(rng.choice(m, c, replace=False)) for c in counts]).astype(np.int64)
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64), rows


def test_hand_checked_scores() -> None:
    # q = (3, 4), |q| = 5. Rows: same direction |k| = 10; orthogonal; opposite |k| = 0.5; zero.
    table = np.array([[6, 8], [4, -3], [-0.3, -0.4], [0, 0]], dtype=np.float32)
    found = multi_scoring_topk(np.array([[3, 4]], dtype=np.float32), table, 4, (1.0, 0.5, 0.0))
    np.testing.assert_array_equal(found[1.0][1], [[0, 1, 3, 2]])  # 50, 0, 0 (tie: row 1 first), -2.5
    np.testing.assert_allclose(found[1.0][0], [[50, 0, 0, -2.5]], atol=1e-6)
    np.testing.assert_array_equal(found[0.5][1], [[0, 1, 3, 2]])  # sqrt(50), 0, 0 (zero vector: the limit), -sqrt(2.5)
    np.testing.assert_allclose(found[0.5][0], [[np.sqrt(50), 0, 0, -np.sqrt(2.5)]], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(found[0.0][1], [[0, 1, 2, -1]])  # cos 1, 0, -1; the zero vector never
    np.testing.assert_allclose(found[0.0][0], [[1, 0, -1, -np.inf]], atol=1e-6)


@pytest.mark.parametrize("seed", [0, 1])
def test_random_tables_match_brute_force(seed: int) -> None:
    table, queries = _floats(3000, 60, 12, seed)
    _check(multi_scoring_topk(queries, table, 25, ALPHAS), queries, table, 25)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exact_ties_broken_by_row(seed: int) -> None:
    table, queries = _integers(2500, 50, 8, seed)
    found = multi_scoring_topk(queries, table, 40, ALPHAS, item_block=256)
    _check(found, queries, table, 40)
    # Ties are real here: some list holds equal scores, ordered by row.
    scores, rows = found[1.0]
    tied = (scores[:, 1:] == scores[:, :-1]) & (rows[:, 1:] >= 0)
    assert tied.sum() > 100 and np.all(rows[:, 1:][tied] > rows[:, :-1][tied])


def test_dot_and_cosine_equal_sharded_search() -> None:
    table, queries = _floats(4000, 80, 16, 3)
    found = multi_scoring_topk(queries, table, 30, (1.0, 0.0, 0.5))
    for alpha, normalise in ((1.0, False), (0.0, True)):
        scores, rows = sharded_topk(queries, [table], 30, normalise=normalise)
        np.testing.assert_array_equal(found[alpha][1], rows)
        np.testing.assert_allclose(found[alpha][0], scores, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("data", [_floats, _integers])
def test_excluded_rows_never_served(data) -> None:
    table, queries = data(2000, 70, 8, 4)
    exclude = _exclusions(70, 2000, 5)
    # Exclude each query's own dot-product favourites too, so the filter has work to do.
    top = sharded_topk(queries, [table], 10, normalise=False)[1]
    counts = np.diff(exclude[0])
    rows = [np.union1d(exclude[1][exclude[0][i] : exclude[0][i + 1]], top[i, : i % 10]) for i in range(70)]
    exclude = np.concatenate([[0], np.cumsum([r.size for r in rows])]).astype(np.int64), np.concatenate(rows)
    assert counts.sum() < exclude[1].size
    found = multi_scoring_topk(queries, table, 30, ALPHAS, exclude=exclude, item_block=512)
    _check(found, queries, table, 30, exclude)
    for alpha in ALPHAS:
        for i in range(70):
            assert not np.isin(found[alpha][1][i], exclude[1][exclude[0][i] : exclude[0][i + 1]]).any()


def test_zero_vectors() -> None:
    table, queries = _floats(600, 20, 6, 6)
    table[[3, 17, 400]] = 0.0
    queries[5] = 0.0  # a zero query: every score 0, so the lowest rows
    found = multi_scoring_topk(queries, table, 600, ALPHAS)
    _check(found, queries, table, 600)
    assert not np.isin(found[0.0][1], [3, 17, 400]).any()  # cosine: no direction, never served
    assert (found[0.0][1][:, -3:] == -1).all()
    for alpha in (1.0, 0.25, 0.5, 0.75):  # score 0 (the limit), between the positive and negative scores
        scores, rows = found[alpha]
        at = np.isin(rows, [3, 17, 400])
        assert (at.sum(axis=1) == 3).all() and (scores[at] == 0).all()
    np.testing.assert_array_equal(found[0.5][1][5, :4], [0, 1, 2, 3])
    np.testing.assert_array_equal(found[0.0][1][5, :4], [0, 1, 2, 4])


def test_k_beyond_the_candidates_pads() -> None:
    table, queries = _integers(12, 4, 4, 7)
    exclude = (np.array([0, 0, 3, 15, 15], dtype=np.int64), np.array([0, 5, 9, *range(12)], dtype=np.int64))
    found = multi_scoring_topk(queries, table, 20, ALPHAS, exclude=exclude)
    _check(found, queries, table, 20, exclude)
    n_zero = int((np.linalg.norm(table, axis=1) == 0).sum())
    assert (found[1.0][1][0] >= 0).sum() == 12 and (found[1.0][1][1] >= 0).sum() == 9
    assert (found[0.0][1][0] >= 0).sum() == 12 - n_zero
    assert (found[1.0][1][2] == -1).all() and (found[1.0][0][2] == -np.inf).all()  # all excluded


@pytest.mark.parametrize("data", [_floats, _integers])
def test_small_blocks_equal_one_block(data) -> None:
    table, queries = data(1500, 40, 8, 8)
    exclude = _exclusions(40, 1500, 9)
    before = torch.get_num_threads()
    one = multi_scoring_topk(queries, table, 20, ALPHAS, exclude=exclude, query_block=40, item_block=1500)
    for query_block, item_block, threads in ((7, 37, 1), (16, 300, 2), (3, 128, 2)):
        many = multi_scoring_topk(
            queries, table, 20, ALPHAS, exclude=exclude, query_block=query_block, item_block=item_block,
            threads=threads,
        )  # fmt: skip
        for alpha in ALPHAS:
            np.testing.assert_array_equal(many[alpha][1], one[alpha][1])
            np.testing.assert_allclose(many[alpha][0], one[alpha][0], rtol=1e-6)
    assert torch.get_num_threads() == before  # the worker threads' setting is undone


def test_memmap_table_in_shards(tmp_path: Path) -> None:
    table, queries = _floats(3500, 30, 8, 10)
    mapped = np.lib.format.open_memmap(tmp_path / "items.npy", mode="w+", dtype=np.float32, shape=table.shape)
    mapped[:] = table
    mapped.flush()
    table_file = np.load(tmp_path / "items.npy", mmap_mode="r")
    exclude = _exclusions(30, 3500, 11)
    # 40,000 bytes cannot hold the table twice: shards of 1,024 rows.
    found = multi_scoring_topk(queries, table_file, 15, ALPHAS, exclude=exclude, max_memory=40_000)
    _check(found, queries, table, 15, exclude)
    whole = multi_scoring_topk(queries, table, 15, ALPHAS, exclude=exclude)
    for alpha in ALPHAS:
        np.testing.assert_array_equal(found[alpha][1], whole[alpha][1])


class Recorder(Progress):
    def __init__(self) -> None:
        self.totals: list[float | None] = []
        self.done = 0.0

    @contextmanager
    def track(self, description: str, total: float | None = None) -> Iterator[Advance]:
        self.totals.append(total)

        def advance(amount: float = 1) -> None:
            self.done += amount

        yield advance


def test_query_chunks_and_progress(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table, queries = _floats(2500, 45, 8, 16)
    exclude = _exclusions(45, 2500, 17)
    whole = multi_scoring_topk(queries, table, 12, ALPHAS, exclude=exclude)
    monkeypatch.setattr(scorings_module, "STATE_BYTES", 1)  # chunks of one query block
    recorder = Recorder()
    chunked = multi_scoring_topk(
        queries, table, 12, ALPHAS, exclude=exclude, query_block=10, max_memory=40_000, progress=recorder
    )
    for alpha in ALPHAS:
        np.testing.assert_array_equal(chunked[alpha][1], whole[alpha][1])
    # 2,500 rows in shards of 1,024: every query advances once per shard.
    assert recorder.totals == [45 * 3] and recorder.done == 45 * 3


def test_huge_values_rescaled() -> None:
    table, queries = _floats(500, 10, 8, 12)
    table *= np.float32(1e30)  # dim x max|x| x max|q| overflows float32
    queries *= np.float32(1e12)
    found = multi_scoring_topk(queries, table, 10, ALPHAS)
    assert found[1.0][0].dtype == np.float64 and np.isfinite(found[1.0][0]).all()
    _check(found, queries, table, 10, rtol=1e-5)
    np.testing.assert_array_equal(found[1.0][1], sharded_topk(queries, [table], 10, normalise=False)[1])


def test_non_finite_rows_do_not_crash() -> None:
    table, queries = _floats(300, 5, 4, 13)
    table[7] = np.nan
    queries[2, 0] = np.inf
    found = multi_scoring_topk(queries, table, 10, ALPHAS)
    for alpha in ALPHAS:
        assert found[alpha][1].shape == (5, 10)
        assert not (found[alpha][1] == 7).any()


def test_candidates_are_few(scan: str) -> None:
    """The point of the thresholds: after the first tiles, few inner products are ranked."""
    if scan != "host scan":
        pytest.skip("the device scan ranks every entry on the device: no thresholds")
    table, queries = _floats(60_000, 64, 16, 14)
    offered: list[int] = []
    original = blocks_module._offer

    def counting(buffers, floors, pending, shard):  # type: ignore[no-untyped-def]
        offered.append(sum(p[0].size for p in pending))
        return original(buffers, floors, pending, shard)

    blocks_module._offer = counting
    try:
        found = multi_scoring_topk(queries, table, 20, ALPHAS, threads=1)
    finally:
        blocks_module._offer = original
    assert sum(offered) < 0.05 * 60_000 * 64
    for alpha in (1.0, 0.0):
        np.testing.assert_array_equal(found[alpha][1], reference(queries, table, 20, alpha)[1])


def test_keys_order_like_the_contract() -> None:
    scores = np.array([-np.inf, -2.5, -0.0, 0.0, 0.0, 1e-40, 3.0, np.inf], dtype=np.float32)
    rows = np.array([0, 4, 9, 8, 2, 1, 6, 5])
    keys = encode(scores, rows)
    order = np.argsort(keys)[::-1]
    # Score descending, then row ascending; -0.0 ties with 0.0.
    np.testing.assert_array_equal(rows[order], [5, 6, 1, 2, 8, 9, 4, 0])
    back_scores, back_rows = decode(np.append(keys, np.uint64(0)))
    np.testing.assert_array_equal(back_rows, [*rows, -1])
    np.testing.assert_array_equal(back_scores, [*np.abs(scores[:3]) * [-1, -1, 1], *scores[3:], -np.inf])


def test_bad_arguments() -> None:
    table, queries = _floats(50, 3, 4, 15)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        multi_scoring_topk(queries, table, 5, (1.0, 1.5))
    with pytest.raises(ValueError, match="distinct"):
        multi_scoring_topk(queries, table, 5, (0.5, 0.5))
    with pytest.raises(ValueError, match="positive"):
        multi_scoring_topk(queries, table, 0, (1.0,))
    with pytest.raises(EmbeddingTableError, match="shape"):
        multi_scoring_topk(queries, table[:, :3], 5, (1.0,))
    with pytest.raises(QueryError, match="2-D"):
        multi_scoring_topk(queries[0], table, 5, (1.0,))
    with pytest.raises(ValueError, match="CSR"):
        multi_scoring_topk(queries, table, 5, (1.0,), exclude=(np.array([0, 1]), np.array([3])))
    with pytest.raises(ValueError, match=r"\[0, 50\)"):
        multi_scoring_topk(queries, table, 5, (1.0,), exclude=(np.array([0, 0, 1, 1]), np.array([50])))
