"""Exposure measures: published values of RecBole, Evidently and RecTools, and hand cases.

Each library's own test/doctest inputs are rebuilt here with item ids used as table rows;
the comment on each test says which convention reproduces it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from auditor.metrics.exposure import (
    AvgRecPopularity,
    GiniIndex,
    HeadShare,
    ItemCoverage,
    LongTailShare,
    Novelty,
    Slots,
    exposure_counts,
    filled_overlap,
    gini_index,
    overlap,
    per_query_overlap,
)
from auditor.metrics.popularity_sets import bottom_tail_mask, head_mask, short_head_mask
from auditor.metrics.list_measures import ExposureMeasures
from auditor.result import ListMeasures

# --- RecBole tests/metrics/test_topk_metrics.py -------------------------------------
# Items 1..7 recommended to 5 users; num_items = 8 (RecBole reserves id 0 for padding);
# item_count {1: 0, 2: 1, 3: 2, 4: 3, 5: 4, 6: 5}, items 0 and 7 absent (count 0).
RECBOLE_LISTS = np.array([[5, 7, 3], [4, 5, 2], [2, 3, 5], [1, 4, 6], [5, 3, 7]])
RECBOLE_FREQ = np.array([0, 0, 1, 2, 3, 4, 5, 0])


def test_recbole_item_coverage() -> None:
    # ItemCoverage: distinct recommended / num_items, the popaudit default.
    assert ItemCoverage(8).measure(RECBOLE_LISTS) == pytest.approx(0.875)


def test_recbole_gini_index() -> None:
    # GiniIndex: over the whole catalogue, never-shown items as 0, divided by n: the
    # popaudit default.
    assert GiniIndex(8).measure(RECBOLE_LISTS) == pytest.approx(41 / 120)
    assert GiniIndex(8).measure(RECBOLE_LISTS) == pytest.approx(0.341667, abs=1e-6)


def test_recbole_average_popularity() -> None:
    # AveragePopularity: missing items count 0 (cold="zero", the popaudit default).
    arp = AvgRecPopularity(RECBOLE_FREQ)
    assert arp.measure(RECBOLE_LISTS) == pytest.approx(2.33333, abs=1e-5)
    # RecBole's per-user cumulative values at @1, @2, @3.
    expected = np.array(
        [
            [4 / 1, 4 / 2, 6 / 3],
            [3 / 1, 7 / 2, 8 / 3],
            [1 / 1, 3 / 2, 7 / 3],
            [0 / 1, 3 / 2, 8 / 3],
            [4 / 1, 6 / 2, 6 / 3],
        ]
    )
    for k in (1, 2, 3):
        np.testing.assert_allclose(arp.per_list(RECBOLE_LISTS[:, :k]), expected[:, k - 1])


# --- Evidently tests/metrics/recsys/test_popularity_bias.py and test_novelty.py -------
# Recommendations u1: [3], u2: [2, 3], u3: [1, 2] at k=3 (shorter lists padded with -1);
# train (1,1), (1,2), (2,1), (3,1): item 1 has 3 interactions by 3 users, item 2 one,
# item 3 none. Rows = item ids, row 0 unused.
EVIDENTLY_LISTS = np.array([[3, -1, -1], [2, 3, -1], [1, 2, -1]])
EVIDENTLY_FREQ = np.array([0, 3, 1, 0])
EVIDENTLY_USERS = np.array([0, 3, 1, 0])


def test_evidently_popularity_bias() -> None:
    # Evidently's ARP takes popularity as distinct users per item and drops cold items
    # (here users = interactions, see the next test); it counts coverage among trained
    # items and takes Gini over recommended items with the n-1 denominator.
    assert AvgRecPopularity(EVIDENTLY_USERS, cold="drop").measure(EVIDENTLY_LISTS) == pytest.approx(1.5)
    coverage = ItemCoverage(4, trained=EVIDENTLY_FREQ > 0)
    assert coverage.measure(EVIDENTLY_LISTS) == pytest.approx(1.0)
    gini = GiniIndex(4, over="recommended", unbiased=True)
    assert gini.measure(EVIDENTLY_LISTS) == pytest.approx(0.2)


def test_evidently_arp_needs_user_popularity_not_just_dropped_cold_items() -> None:
    # Train (u1, i1) twice, (u2, i1), (u3, i2): item 1 has 3 interactions but 2 users.
    # Lists u1: [1], u2: [1, 2]. Evidently: mean(2, (2 + 1) / 2) = 1.75 (by hand);
    # cold="drop" over interaction counts gives mean(3, (3 + 1) / 2) = 2.5 instead.
    lists = np.array([[1, -1], [1, 2]])
    users, interactions = np.array([0, 2, 1]), np.array([0, 3, 1])
    assert AvgRecPopularity(users, cold="drop").measure(lists) == pytest.approx(1.75)
    assert AvgRecPopularity(interactions, cold="drop").measure(lists) == pytest.approx(2.5)


def test_recbole_tail_cut_truncates_like_int() -> None:
    # RecBole's TailPercentage: cut = max(int(n * ratio), 1); 100 * 0.29 = 28.999... -> 28.
    pop = np.arange(1, 101)
    assert bottom_tail_mask(pop, 0.29).sum() == int(100 * 0.29) == 28
    assert bottom_tail_mask(pop, 0.001).sum() == 1


def test_evidently_novelty() -> None:
    # NoveltyMetric: mean -log2(users(i)/n_users) with cold items dropped.
    novelty = Novelty(EVIDENTLY_USERS, n_users=3, cold="drop")
    assert novelty.measure(EVIDENTLY_LISTS) == pytest.approx(1.188722, abs=1e-6)


def test_evidently_inputs_under_popaudit_defaults() -> None:
    # Same lists, popaudit's conventions, computed by hand:
    # ARP: u1 0, u2 (1+0)/2, u3 (3+1)/2 -> 2.5/3.
    assert AvgRecPopularity(EVIDENTLY_FREQ).measure(EVIDENTLY_LISTS) == pytest.approx(2.5 / 3)
    # coverage over the 4-row catalogue: rows 1, 2, 3 shown.
    assert ItemCoverage(4).measure(EVIDENTLY_LISTS) == pytest.approx(0.75)
    # Gini over the catalogue: counts (0, 1, 2, 2) -> (-3*0 - 1*1 + 1*2 + 3*2) / (4*5).
    assert GiniIndex(4).measure(EVIDENTLY_LISTS) == pytest.approx(7 / 20)
    # Gini over recommended items with the plain n denominator: (-2*1 + 0 + 2*2)/(3*5).
    assert GiniIndex(4, over="recommended").measure(EVIDENTLY_LISTS) == pytest.approx(2 / 15)
    # Novelty with cold item 3 capped at one user: log2 3 for items 2 and 3, 0 for item 1.
    l3 = math.log2(3)
    expected = (l3 + l3 + l3 / 2) / 3
    assert Novelty(EVIDENTLY_USERS, n_users=3).measure(EVIDENTLY_LISTS) == pytest.approx(expected)


# --- RecTools rectools/metrics/popularity.py AvgRecPopularity doctest -----------------
def test_rectools_avg_rec_popularity_doctest() -> None:
    # reco u1: [1, 2], u2: [3, 1, 2], u3: [3, 2]; previous interactions give popularity
    # item 1: 3, item 2: 2, item 3: 1. RecTools divides by the list length (cold="zero").
    popularity = np.array([0, 3, 2, 1])
    lists = np.array([[1, 2, -1], [3, 1, 2], [3, 2, -1]])
    arp = AvgRecPopularity(popularity)
    np.testing.assert_allclose(arp.per_list(lists), [2.5, 2.0, 1.5])
    np.testing.assert_allclose(arp.per_list(lists[:, :1]), [3.0, 1.0, 1.0])
    assert arp.measure(lists) == pytest.approx(2.0)


# --- hand-computed cases ---------------------------------------------------------------
POP = np.array([100, 50, 50, 20, 10, 5, 0, 0, 1, 1])


def test_head_mask_ties_at_cut_all_in() -> None:
    # 10 items: 1% and 10% -> c = 1 (the single top item); 20% -> c = 2, f_c = 50, and
    # both items at 50 are in.
    assert np.flatnonzero(head_mask(POP, 1)).tolist() == [0]
    assert np.flatnonzero(head_mask(POP, 10)).tolist() == [0]
    assert np.flatnonzero(head_mask(POP, 20)).tolist() == [0, 1, 2]
    # Cold items are never head, even when the c-th item is cold.
    assert np.flatnonzero(head_mask(np.array([5, 0, 0, 0]), 50)).tolist() == [0]


def test_head_share_hand_values_and_row_order_independence() -> None:
    lists = np.array([[0, 1, 3], [2, 6, 9]])
    assert HeadShare(POP, 20).measure(lists) == pytest.approx(3 / 6)
    assert HeadShare(POP, 10).measure(lists) == pytest.approx(1 / 6)
    # Relabel rows: same lists under a permutation give the same share.
    perm = np.random.default_rng(3).permutation(POP.shape[0])
    inverse = np.argsort(perm)
    assert HeadShare(POP[perm], 20).measure(inverse[lists]) == pytest.approx(3 / 6)
    # Empty slots are not counted.
    assert HeadShare(POP, 20).measure(np.array([[0, -1], [9, -1]])) == pytest.approx(1 / 2)


def test_short_head_and_aplt() -> None:
    # total 100: cumulative 0.5, 0.8 -> head {0, 1}.
    pop = np.array([50, 30, 10, 5, 5, 0])
    assert np.flatnonzero(short_head_mask(pop)).tolist() == [0, 1]
    # ties at the 80% cut: cumulative 0.4, 0.7, 0.8 reached by an item tied with two more.
    tied = np.array([40, 30, 10, 10, 10])
    assert short_head_mask(tied).all()
    aplt = LongTailShare(pop)
    lists = np.array([[0, 2, 5], [1, 3, -1]])
    np.testing.assert_allclose(aplt.per_list(lists), [2 / 3, 1 / 2])
    assert aplt.measure(lists) == pytest.approx((2 / 3 + 1 / 2) / 2)


def test_bottom_fraction_tail() -> None:
    pop = np.array([5, 0, 3, 3, 1, 0])
    # include cold: 3 least popular by (popularity, row): rows 1, 5, 4.
    assert np.flatnonzero(bottom_tail_mask(pop, 0.5)).tolist() == [1, 4, 5]
    # drop cold: warm rows 0, 2, 3, 4 -> 2 least popular: 4 and 2 (tie 2/3 by row).
    assert np.flatnonzero(bottom_tail_mask(pop, 0.5, cold="drop")).tolist() == [2, 4]
    aplt = LongTailShare(pop, bottom_fraction=0.5, cold="drop")
    assert aplt.measure(np.array([[4, 0], [2, 3]])) == pytest.approx((1 / 2 + 1 / 2) / 2)


def test_gini_matches_mean_absolute_difference() -> None:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 50, size=37).astype(float)
    pairwise = np.abs(x[:, None] - x[None, :]).sum() / (2 * x.size**2 * x.mean())
    assert gini_index(x) == pytest.approx(pairwise)
    assert gini_index(np.full(9, 4.0)) == pytest.approx(0.0)
    one_hot = np.zeros(10)
    one_hot[3] = 7
    assert gini_index(one_hot) == pytest.approx(9 / 10)
    assert math.isnan(gini_index(np.zeros(5)))


def test_overlap_hand_values() -> None:
    a = np.array([[1, 2, 3], [4, 5, 6]])
    b = np.array([[3, 2, 9], [7, 8, -1]])
    np.testing.assert_allclose(per_query_overlap(a, b), [2 / 3, 0.0])
    assert overlap(a, b) == pytest.approx(1 / 3)
    # Empty slots never match each other.
    assert overlap(np.array([[-1, -1]]), np.array([[-1, -1]])) == 0.0
    assert overlap(a, a) == pytest.approx(1.0)


def test_filled_overlap_divides_by_the_shorter_lists_filled_slots() -> None:
    # Query 0: the same 2 items in K = 3 slots (fewer candidates than K): 2/2, not 2/3.
    # Query 1: 3 and 2 filled, 1 shared: 1/2. Query 2: an empty list: left out. Mean (1 + 1/2) / 2.
    a = np.array([[4, 5, -1], [1, 2, 3], [-1, -1, -1]])
    b = np.array([[5, 4, -1], [3, 7, -1], [1, 2, 3]])
    assert filled_overlap(a, b) == pytest.approx(0.75)
    assert filled_overlap(a, b, n_items=8) == pytest.approx(0.75)
    assert math.isnan(filled_overlap(a[2:], a[2:]))
    assert filled_overlap(a[:2], a[:2]) == 1.0  # identical lists agree fully, whatever their length


def test_exposure_counts_and_slot_validation() -> None:
    counts = exposure_counts(np.array([[0, 2, -1], [2, 3, 0]]), 5)
    assert counts.tolist() == [2, 0, 2, 1, 0]
    assert counts.dtype == np.int64
    with pytest.raises(ValueError):
        Slots(np.array([[0, 5]]), 5)
    with pytest.raises(ValueError):
        Slots(np.array([[0.0, 1.0]]), 5)


def test_exposure_measures_bundle() -> None:
    users = np.array([10, 5, 5, 2, 1, 1, 0, 0, 1, 1])
    measures = ExposureMeasures(POP, users, n_users=10)
    lists = np.array([[0, 1], [0, 2]])
    result = measures.measure(lists)
    assert isinstance(result, ListMeasures)
    assert result["arp"] == pytest.approx((75 + 75) / 2)
    assert result["coverage"] == pytest.approx(3 / 10)
    assert result["head_share_20pct"] == pytest.approx(1.0)
    assert result["head_share_1pct"] == pytest.approx(0.5)
    # novelty: item 0 seen by all 10 users (0 bits), items 1 and 2 by half (1 bit).
    assert result["novelty"] == pytest.approx(0.5)
    assert ExposureMeasures(POP).measure(lists)["novelty"] is None
    # Most-popular list: by popularity, ties by row.
    assert measures.popular_list(4).tolist() == [0, 1, 2, 3]
    assert ExposureMeasures(np.array([1, 3, 3, 0])).popular_list(10).tolist() == [1, 2, 0, 3]


def test_popular_order_equals_a_full_sort_with_ties() -> None:
    from auditor.metrics.exposure import popular_order

    rng = np.random.default_rng(0)
    for _ in range(200):  # few distinct values: many ties at the k-th item
        n = int(rng.integers(1, 60))
        popularity = rng.integers(0, 5, n)
        for k in (0, 1, 3, n, n + 5):
            reference = np.lexsort((np.arange(n), -popularity))[: min(k, n)]
            assert popular_order(popularity, k).tolist() == reference.tolist()
