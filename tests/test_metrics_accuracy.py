"""Held-out accuracy (auditor/metrics/accuracy.py) against published values and oracles.

- RecBole's own metric tests: RUCAIBox/RecBole tests/metrics/test_topk_metrics.py at
  commit c29ec7767cf09b8b1ef76d582573f6cbd297665f (``pos_idx``/``pos_len`` and the
  expected matrices of test_hit, test_ndcg, test_mrr, test_recall), per user at K = 1, 2, 3.
- RecTools (MobileTeleSystems/RecTools at v0.17.0-2-g41a5a63, commit
  41a5a639a78bd07fa313d12b5d39bc140199c5f5): the doctests of ``NDCG`` and ``MRR`` in
  rectools/metrics/ranking.py, and the expected values of tests/metrics/test_ranking.py
  (TestNDCG, TestMRR) and tests/metrics/test_classification.py (TestRecall,
  TestHitRate). RecTools' default NDCG divides by the IDCG of K hits; ours (and its
  ``divide_by_achievable=True``) by that of min(|H|, K) hits, so its default values are
  checked through the conversion ours = theirs × IDCG(K) / IDCG(min(|H|, K)).
- ``sklearn.metrics.ndcg_score`` on random cases, and a plain per-user reference below.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.metrics import ndcg_score

from auditor.metrics import accuracy
from auditor.metrics.accuracy import accuracy_at, find_hits, ranking_accuracy
from auditor.result import RankingAccuracy


def _csr(sets: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    indptr = np.concatenate(([0], np.cumsum([len(s) for s in sets]))).astype(np.int64)
    items = np.array([i for s in sets for i in s], dtype=np.int64)
    return indptr, items


def _lists(rows: list[list[int]], width: int | None = None) -> np.ndarray:
    width = width or max(len(r) for r in rows)
    return np.array([r + [-1] * (width - len(r)) for r in rows], dtype=np.int64)


def _ranked(ranked: dict[int, int], width: int) -> list[int]:
    """A list with item ``i`` at (1-based) rank ``r`` for each ``i: r``, empty elsewhere."""
    out = [-1] * width
    for item, rank in ranked.items():
        out[rank - 1] = item
    return out


def _idcg(n: int) -> float:
    return sum(1 / math.log2(r + 1) for r in range(1, n + 1))


# ------------------------------------------------------------------ RecBole's metric tests

# test_topk_metrics.py: pos_idx[u, j] = 1 when rank j + 1 of user u is a hit; pos_len = |H|.
RECBOLE_POS_IDX = np.array([[0, 0, 0], [1, 1, 1], [1, 0, 1], [0, 0, 1]])
RECBOLE_POS_LEN = np.array([1, 3, 4, 2])
L2 = np.log2
RECBOLE_EXPECTED = {
    "hit_rate": [[0, 0, 0], [1, 1, 1], [1, 1, 1], [0, 0, 1]],
    "ndcg": [
        [0, 0, 0],
        [1, 1, 1],
        [1, (1 / L2(2) / (1 / L2(2) + 1 / L2(3))), ((1 / L2(2) + 1 / L2(4)) / (1 / L2(2) + 1 / L2(3) + 1 / L2(4)))],
        [0, 0, (1 / L2(4) / (1 / L2(2) + 1 / L2(3)))],
    ],
    "mrr": [[0, 0, 0], [1, 1, 1], [1, 1, 1], [0, 0, 1 / 3]],
    "recall": [[0, 0, 0], [1 / 3, 2 / 3, 3 / 3], [1 / 4, 1 / 4, 2 / 4], [0, 0, 1 / 2]],
}


def _recbole_case() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Lists and held-out sets whose hit pattern is RecBole's pos_idx with |H| = pos_len:
    user u's held-out items are 0..pos_len-1, placed at the hit ranks; misses are 100+."""
    rows, sets = [], []
    for u, (pattern, size) in enumerate(zip(RECBOLE_POS_IDX, RECBOLE_POS_LEN)):
        relevant = iter(range(size))
        rows.append([next(relevant) if hit else 100 + j for j, hit in enumerate(pattern)])
        sets.append(list(range(size)))
    indptr, items = _csr(sets)
    return _lists(rows), indptr, items


@pytest.mark.parametrize("measure", sorted(RECBOLE_EXPECTED))
def test_per_user_values_match_recboles_topk_metric_tests(measure: str) -> None:
    lists, indptr, items = _recbole_case()
    found = find_hits(lists, indptr, items)
    got = np.stack([getattr(found.at(k), measure) for k in (1, 2, 3)], axis=1)
    np.testing.assert_allclose(got, np.array(RECBOLE_EXPECTED[measure], dtype=float), rtol=0, atol=1e-15)


def test_means_are_recboles_averages_over_users() -> None:
    lists, indptr, items = _recbole_case()
    at = accuracy_at(lists, indptr, items, (1, 2, 3))
    for j, k in enumerate((1, 2, 3)):
        expected = {m: float(np.mean(np.array(v, dtype=float)[:, j])) for m, v in RECBOLE_EXPECTED.items()}
        assert at[k] == pytest.approx(RankingAccuracy(**expected), abs=1e-15)


# ------------------------------------------------------------------ RecTools' published values

# The doctests of NDCG and MRR (rectools/metrics/ranking.py): users 1-4.
RECTOOLS_HELD = [[1, 2], [1], [1, 3, 4], [1, 2, 3]]


def test_rectools_ndcg_doctest_through_the_idcg_conversion() -> None:
    lists = _lists([[7, 8], [1, 2], [1, 2, 3, 4], [1, 2, 3]])
    indptr, items = _csr(RECTOOLS_HELD)
    found = find_hits(lists, indptr, items)
    np.testing.assert_allclose(found.at(1).ndcg, [0.0, 1.0, 1.0, 1.0])  # NDCG(k=1) doctest
    rectools_k3 = np.array([0.0, 0.46927873, 0.70391809, 1.0])  # NDCG(k=3) doctest (IDCG of 3 hits)
    sizes = [len(h) for h in RECTOOLS_HELD]
    converted = rectools_k3 * _idcg(3) / np.array([_idcg(min(s, 3)) for s in sizes])
    np.testing.assert_allclose(found.at(3).ndcg, converted, atol=1e-8)
    # Users with |H| >= K agree without conversion; user 2 (|H| = 1, hit at rank 1) is 1, not 0.469.
    np.testing.assert_allclose(found.at(3).ndcg[[2, 3]], rectools_k3[[2, 3]], atol=1e-8)
    assert found.at(3).ndcg[1] == 1.0


def test_rectools_mrr_doctest() -> None:
    lists = _lists([[7, 8], [1, 2], [2, 1, 3, 4], [7, 8, 3]])
    indptr, items = _csr(RECTOOLS_HELD)
    found = find_hits(lists, indptr, items)
    np.testing.assert_allclose(found.at(1).mrr, [0.0, 1.0, 0.0, 0.0])
    np.testing.assert_allclose(found.at(3).mrr, [0.0, 1.0, 0.5, 0.33333333], atol=1e-8)


def test_rectools_recall_and_hit_rate_tests() -> None:
    # test_classification.py RECO / INTERACTIONS: evaluated users 1, 3, 4, 5 (user 2 has no
    # held-out item, user 5 no recommendation: an all-empty list).
    lists = _lists([[1, 2, 3], [1], [1], []], width=3)
    indptr, items = _csr([[4, 2, 3], [1], [2], [2]])
    at2 = find_hits(lists, indptr, items).at(2)
    np.testing.assert_allclose(at2.recall, [1 / 3, 1, 0, 0])  # TestRecall, Recall(k=2)
    np.testing.assert_allclose(at2.hit_rate, [1, 1, 0, 0])  # TestHitRate, HitRate(k=2)


def _rectools_ranking_test_lists() -> np.ndarray:
    # test_ranking.py TestNDCG reco: users 1-5 (user 6 has no held-out item), ranks with gaps.
    return np.array(
        [
            _ranked({1: 9}, 9),
            _ranked({2: 1}, 9),
            _ranked({1: 1, 2: 2, 3: 3}, 9),
            _ranked({1: 1}, 9),
            _ranked({1: 3, 2: 7, 3: 9, 5: 1}, 9),
        ],
        dtype=np.int64,
    )


@pytest.mark.parametrize(
    ("k", "achievable", "expected"),
    [
        (1, [0, 0, 1, 1, 0], [0, 0, 1, 1, 0]),
        (3, [0, 0, 1, 1, (1 / np.log2(4)) / (1 / np.log2(2))], [0, 0, 1, 1 / _idcg(3), 0.5 / _idcg(3)]),
    ],
)
def test_rectools_ndcg_test_both_idcg_conventions(k: int, achievable: list[float], expected: list[float]) -> None:
    held = [[1], [1], [1, 2, 3], [1], [1]]
    indptr, items = _csr(held)
    ndcg = find_hits(_rectools_ranking_test_lists(), indptr, items).at(k).ndcg
    np.testing.assert_allclose(ndcg, achievable, atol=1e-15)  # divide_by_achievable=True: ours
    ratio = np.array([_idcg(k) / _idcg(min(len(h), k)) for h in held])
    np.testing.assert_allclose(ndcg, np.array(expected) * ratio, atol=1e-15)  # default, converted


@pytest.mark.parametrize(("k", "expected"), [(1, [0, 0, 1, 1, 0]), (3, [0, 0, 1, 1, 1 / 3])])
def test_rectools_mrr_test(k: int, expected: list[float]) -> None:
    indptr, items = _csr([[1], [1], [1, 2, 3], [1], [1, 2, 3, 4]])
    mrr = find_hits(_rectools_ranking_test_lists(), indptr, items).at(k).mrr
    np.testing.assert_allclose(mrr, expected, atol=1e-15)


# ------------------------------------------------------------------ hand-computed cases


def test_hand_computed_small_case() -> None:
    lists = _lists([[5, -1, 3], [7, 3, 5]])
    indptr, items = _csr([[3, 7], [5]])
    at3 = ranking_accuracy(lists, indptr, items)
    # user 0: one hit of two at rank 3; user 1: its only item at rank 3.
    ndcg0 = (1 / math.log2(4)) / (1 + 1 / math.log2(3))
    ndcg1 = (1 / math.log2(4)) / 1
    assert at3 == pytest.approx(RankingAccuracy(recall=(0.5 + 1) / 2, ndcg=(ndcg0 + ndcg1) / 2, hit_rate=1.0, mrr=1 / 3))
    at2 = ranking_accuracy(lists, indptr, items, k=2)
    assert at2 == RankingAccuracy(recall=0.0, ndcg=0.0, hit_rate=0.0, mrr=0.0)


def test_items_held_out_by_other_users_are_no_hits() -> None:
    lists = _lists([[2, 9], [1, 8]])  # each list holds the other user's held-out item only
    at = ranking_accuracy(lists, *_csr([[1], [2]]))
    assert at == RankingAccuracy(recall=0.0, ndcg=0.0, hit_rate=0.0, mrr=0.0)


def test_duplicates_count_once_and_ranks_beyond_the_lists_are_empty() -> None:
    lists = _lists([[3, 3, 9]])
    indptr, items = _csr([[3, 3, 4]])  # H = {3, 4}
    found = find_hits(lists, indptr, items)
    assert found.n_relevant.tolist() == [2]
    assert found.hits.tolist() == [[True, False, False]]
    at5 = found.at(5)  # K beyond the width: IDCG still over min(|H|, K) = 2 hits
    assert at5.recall[0] == 0.5
    assert at5.ndcg[0] == pytest.approx(1 / (1 + 1 / math.log2(3)))


def test_item_rows_near_int64_limits_do_not_overflow() -> None:
    big = np.iinfo(np.int64).max - 10
    lists = np.array([[big, 1, big - 1], [2, big - 1, -1]], dtype=np.int64)
    indptr, items = _csr([[big - 1], [big - 1, big]])
    found = find_hits(lists, indptr, items)
    assert found.hits.tolist() == [[False, False, True], [False, True, False]]


def test_blocks_of_users_and_both_item_codings_give_the_same_values(monkeypatch: pytest.MonkeyPatch) -> None:
    lists, indptr, items, _ = _random_case(np.random.default_rng(3), n_users=50, n_items=30, width=8)
    whole = accuracy_at(lists, indptr, items, (1, 5, 8))
    monkeypatch.setattr(accuracy, "BLOCK_USERS", 7)
    assert accuracy_at(lists, indptr, items, (1, 5, 8)) == whole
    monkeypatch.setattr(accuracy, "TABLE_ROWS", 0)  # binary search instead of the lookup table
    assert accuracy_at(lists, indptr, items, (1, 5, 8)) == whole


def test_users_without_held_out_items_are_refused() -> None:
    with pytest.raises(ValueError, match=r"1 of 2 users have no held-out item \(the first is user 1\)"):
        ranking_accuracy(_lists([[1], [2]]), *_csr([[1], []]))


@pytest.mark.parametrize(
    ("lists", "indptr", "items", "message"),
    [
        (np.array([1, 2]), np.array([0, 1]), np.array([1]), "matrix"),
        (np.array([[1]]), np.array([0, 1, 1]), np.array([1]), "n_users \\+ 1"),
        (np.array([[1]]), np.array([0, 2]), np.array([1]), "indptr must start at 0"),
        (np.array([[1.5]]), np.array([0, 1]), np.array([1]), "integers"),
        (np.array([[1]]), np.array([0, 1]), np.array([-1]), ">= 0"),
    ],
)
def test_malformed_inputs_are_refused(lists: np.ndarray, indptr: np.ndarray, items: np.ndarray, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ranking_accuracy(lists, indptr, items)


# ------------------------------------------------------------------ independent oracles


def _random_case(
    rng: np.random.Generator, n_users: int, n_items: int, width: int, empties: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[set[int]]]:
    lists = np.stack([rng.permutation(n_items)[:width] for _ in range(n_users)]).astype(np.int64)
    if empties:  # trailing empty slots and an occasional repeated item
        for u in range(n_users):
            lists[u, width - rng.integers(0, 3) :] = -1
            if rng.random() < 0.2:
                lists[u, 1] = lists[u, 0]
    sets = [list(rng.choice(n_items, size=rng.integers(1, 12), replace=True)) for _ in range(n_users)]
    indptr, items = _csr(sets)
    return lists, indptr, items, [set(int(i) for i in s) for s in sets]


def _reference(lists: np.ndarray, held: list[set[int]], k: int) -> dict[str, list[float]]:
    """Per-user measures written out plainly, one user and one rank at a time."""
    out: dict[str, list[float]] = {"recall": [], "ndcg": [], "hit_rate": [], "mrr": []}
    for row, h in zip(lists.tolist(), held):
        seen: set[int] = set()
        ranks = []
        for rank, item in enumerate(row[:k], start=1):
            if item >= 0 and item in h and item not in seen:
                ranks.append(rank)
            seen.add(item)
        out["recall"].append(len(ranks) / len(h))
        out["ndcg"].append(sum(1 / math.log2(r + 1) for r in ranks) / _idcg(min(len(h), k)))
        out["hit_rate"].append(1.0 if ranks else 0.0)
        out["mrr"].append(1 / ranks[0] if ranks else 0.0)
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_cases_match_sklearn_ndcg_score(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_users, n_items, width = 120, 40, 15
    lists, indptr, items, held = _random_case(rng, n_users, n_items, width)
    # Binary relevance; list items scored width - rank + 1, every other item below them
    # with distinct scores (sklearn averages tied scores), so sklearn's top K is our list.
    y_true = np.zeros((n_users, n_items))
    for u, h in enumerate(held):
        y_true[u, list(h)] = 1.0
    y_score = -rng.permutation(n_items * n_users).reshape(n_users, n_items).astype(float) - 1.0
    y_score[np.arange(n_users)[:, None], lists] = width - np.arange(width)[None, :]
    found = find_hits(lists, indptr, items)
    for k in (1, 3, 10, 15):
        ours = found.at(k).ndcg
        theirs = np.array([ndcg_score(y_true[u : u + 1], y_score[u : u + 1], k=k) for u in range(n_users)])
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-12)
        assert found.mean_at(k).ndcg == pytest.approx(ndcg_score(y_true, y_score, k=k), abs=1e-12)


@pytest.mark.parametrize("seed", [4, 5])
def test_random_cases_match_a_plain_per_user_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    lists, indptr, items, held = _random_case(rng, n_users=80, n_items=25, width=10, empties=True)
    found = find_hits(lists, indptr, items)
    for k in (1, 4, 10, 12):
        expected = _reference(lists, held, k)
        got = found.at(k)
        for measure, values in expected.items():
            np.testing.assert_allclose(getattr(got, measure), values, rtol=0, atol=1e-12, err_msg=f"{measure}@{k}")
