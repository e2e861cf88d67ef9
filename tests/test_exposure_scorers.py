"""The built-in list measures read shared per-list figures (auditor/metrics/item_kinds.py,
exposure_scorers.py, group_state.py): a hand-computed list set, and the same numbers, to the
bit, as the reference classes of auditor/metrics/exposure.py and as naive per-user formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest

from auditor.metrics.exposure import AvgRecPopularity, HeadShare, LongTailShare, shared_counts
from auditor.metrics.group_state import jensen_shannon
from auditor.metrics.item_kinds import item_kinds
from auditor.metrics.list_measures import ExposureMeasures
from auditor.metrics.popularity_groups import as_profiles, item_groups, long_tail, user_groups
from auditor.metrics.user_measures import group_table
from auditor.plugin_api import Slots


def _csr(sets: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    indptr = np.concatenate(([0], np.cumsum([len(s) for s in sets]))).astype(np.int64)
    return indptr, np.asarray([i for s in sets for i in s], dtype=np.int64)


# Popularity 50, 30, 10, 5, 3, 2, then four cold items (mass 100). Head of 1% and 10%: c = 1,
# {0}; of 20%: c = 2, {0, 1}. The short head holding 80%: 50 + 30 = 80, {0, 1}; the long
# tail (aplt's and Elliot's) items 2-9.
POP = np.array([50, 30, 10, 5, 3, 2, 0, 0, 0, 0])
LISTS = np.array([[0, 1, 2], [6, 3, -1], [-1, -1, -1], [1, 0, 9]])
PROFILES = _csr([[3, 4], [0], [5, 6, 7], [1]])


def test_hand_computed_list_set() -> None:
    got = ExposureMeasures(POP, profiles=PROFILES).measure(LISTS)
    # 8 filled slots; head {0}: 2 of them, head {0, 1}: 4.
    assert got["head_share_1pct"] == got["head_share_10pct"] == 2 / 8
    assert got["head_share_20pct"] == 4 / 8
    # Mean popularity of the three non-empty lists: 90/3, 5/2, 80/3.
    assert got["arp"] == pytest.approx((30 + 2.5 + 80 / 3) / 3, rel=1e-15)
    # Long-tail shares 1/3, 2/2, 1/3 (the empty list is left out); ACLT too (Elliot): 1, 2, 1.
    assert got["aplt"] == pytest.approx(5 / 9, rel=1e-15)
    assert got["aclt"] == pytest.approx(4 / 3, rel=1e-15)
    # Exposure 2, 2, 1, 1, 0, 0, 1, 0, 0, 1: sorted, sum (2i - 11) x_(i) = 40, over 10 x 8.
    assert got["gini"] == 0.5 and got["coverage"] == 0.6
    # PopRSP: recommended (short head, long tail) = (4, 4); candidates over the 3 rows with a
    # list: row 0 trained 3, 4 (2 head, 6 tail), row 1 trained 0 (1, 8), row 3's list re-serves
    # its training item 1, so its training items stay candidates (2, 8): head 5, tail 22;
    # |4/5 - 4/22| / (4/5 + 4/22) = 17/27.
    assert got["pop_rsp"] == pytest.approx(17 / 27, rel=1e-12)


def _random_case(seed: int, empty: bool) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    n_items, n_rows, k = 300, 80, 25
    popularity = np.where(rng.random(n_items) < 0.2, 0, rng.zipf(1.6, n_items)).astype(np.int64)
    lists = np.stack([rng.permutation(n_items)[:k] for _ in range(n_rows)])
    if empty:
        cut = rng.integers(0, k + 1, n_rows)  # list r keeps its first cut[r] slots
        lists = np.where(np.arange(k)[None, :] < cut[:, None], lists, -1)
    sizes = rng.integers(0, 12, n_rows)  # some users without a profile
    profiles = _csr([list(rng.choice(n_items, s, replace=False)) for s in sizes])
    return popularity, lists, profiles


def _same(a: float | None, b: float) -> bool:
    return a is not None and (a == b or (math.isnan(a) and math.isnan(b)))


@pytest.mark.parametrize("empty", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_shared_figures_equal_the_reference_classes_bit_for_bit(seed: int, empty: bool) -> None:
    popularity, lists, profiles = _random_case(seed, empty)
    measures = ExposureMeasures(popularity, profiles=profiles)
    for k in (1, 7, 25):
        got = measures.measure(Slots(lists[:, :k], popularity.shape[0]))
        for percent in (1, 10, 20):
            assert _same(got[f"head_share_{percent}pct"], HeadShare(popularity, percent).measure(lists[:, :k]))
        assert _same(got["arp"], AvgRecPopularity(popularity).measure(lists[:, :k]))
        assert _same(got["aplt"], LongTailShare(popularity).measure(lists[:, :k]))
        tail = long_tail(popularity)
        in_tail = np.where(lists[:, :k] >= 0, tail[lists[:, :k]], False).sum(axis=1)
        listed = (lists[:, :k] >= 0).any(axis=1)  # Elliot: over the users with a list
        assert _same(got["aclt"], float(in_tail[listed].mean()))


def _naive_groups(popularity: np.ndarray, lists: np.ndarray, profiles: tuple[np.ndarray, np.ndarray]) -> list[dict[str, float]]:
    """ΔGAP's parts and the mean JS divergence per user group, one user at a time."""
    indptr, rows = profiles
    groups = item_groups(popularity)
    codes = user_groups(popularity, as_profiles(profiles, popularity.shape[0], "profiles"))
    out = []
    for code in range(3):
        prof, served, js = [], [], []
        for u in np.flatnonzero(codes == code):
            items = [i for i in lists[u] if i >= 0]
            mine = sorted(set(rows[indptr[u]:indptr[u + 1]].tolist()))
            if not items or not mine:
                continue
            prof.append(np.mean(popularity[mine].astype(float)))
            served.append(np.mean(popularity[items].astype(float)))
            p = np.bincount(groups[mine], minlength=3) / len(mine)
            q = np.bincount(groups[items], minlength=3) / len(items)
            js.append(float(jensen_shannon(p[None, :], q[None, :])[0]))
        out.append({"gap_profile": np.mean(prof) if prof else math.nan, "gap_list": np.mean(served) if served else math.nan,
                    "miscalibration": np.mean(js) if js else math.nan})
    return out


@pytest.mark.parametrize("seed", [3, 4])
def test_group_table_matches_a_per_user_computation(seed: int) -> None:
    popularity, lists, profiles = _random_case(seed, empty=True)
    measures = ExposureMeasures(popularity, profiles=profiles)
    table = group_table(measures.context, lists)
    assert table is not None
    got = measures.measure(lists)
    for row, naive in zip(table, _naive_groups(popularity, lists, profiles)):
        for field in ("gap_profile", "gap_list", "miscalibration"):
            assert getattr(row, field) == pytest.approx(naive[field], rel=1e-12, nan_ok=True)
        assert _same(got[f"gap_delta_{row.group}"], row.gap_delta)
        assert _same(got[f"miscalibration_{row.group}"], row.miscalibration)


@pytest.mark.parametrize("n_masks, width", [(3, 12), (8, 12), (11, 600)])
def test_item_kinds_count_every_mask_per_list(n_masks: int, width: int) -> None:
    """Any number of masks (words of eight), lists longer than a byte's 255."""
    rng = np.random.default_rng(5)
    masks = {f"m{j}": rng.random(700) < rng.random() for j in range(n_masks)}
    lists = np.where(rng.random((30, width)) < 0.2, -1, rng.integers(0, 700, (30, width)))
    counts = item_kinds(masks).count(lists)
    assert counts.shape == (30, n_masks) and counts.dtype == np.int64
    for column, mask in enumerate(masks.values()):
        assert counts[:, column].tolist() == np.where(lists >= 0, mask[lists], False).sum(axis=1).tolist()


def test_marked_overlap_counts_equal_the_sorted_ones() -> None:
    rng = np.random.default_rng(6)
    n_items = 50
    a = np.stack([rng.permutation(n_items)[:20] for _ in range(40)])
    b = np.stack([rng.permutation(n_items)[:20] for _ in range(40)])
    a[:5, -4:] = -1
    b[3:9, -6:] = -1
    marked = shared_counts(a, b, n_items)  # 40 x 51 cells <= 32 x 1600 slots: marked
    assert marked.tolist() == shared_counts(a, b).tolist()
    assert marked.tolist() == [len(set(x[x >= 0]) & set(y[y >= 0])) for x, y in zip(a, b)]


def test_group_means_are_numpys_mean_to_the_bit() -> None:
    """The per-group table's means skip numpy's wrapper (group_state._mean), not its sum."""
    from auditor.metrics.group_state import _mean

    rng = np.random.default_rng(7)
    for n in (1, 7, 8, 9, 130, 943, 9000):
        values = rng.random(n) * 10.0 ** rng.uniform(-3, 6, n)
        assert _mean(values) == float(values.mean())
    assert math.isnan(_mean(np.empty(0)))


def test_relative_std_is_numpys_std_over_mean_to_the_bit() -> None:
    """PopRSP's and PopREO's std / mean, worked in Python floats (group_state.relative_std)."""
    from auditor.metrics.group_state import relative_std

    def with_numpy(numerator: tuple[float, float], denominator: tuple[float, float]) -> float:
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            pr = np.asarray(numerator, dtype=np.float64) / np.asarray(denominator, dtype=np.float64)
        if not np.all(np.isfinite(pr)) or pr.sum() == 0:
            return math.nan
        return float(np.std(pr) / np.mean(pr))

    rng = np.random.default_rng(8)
    cases = [((0.0, 0.0), (1.0, 1.0)), ((1.0, 0.0), (0.0, 1.0)), ((4.0, 4.0), (6.0, 27.0)), ((1e300, 1.0), (1e-10, 1.0))]
    for _ in range(5000):
        cases.append((tuple(map(float, rng.integers(0, 10**6, 2))), tuple(map(float, rng.integers(0, 10**9, 2)))))
        cases.append((tuple(map(float, rng.random(2) * 10.0 ** rng.uniform(-5, 5, 2))),
                      tuple(map(float, rng.random(2) * 10.0 ** rng.uniform(-5, 5, 2)))))
    for numerator, denominator in cases:
        assert _same(relative_std(numerator, denominator), with_numpy(numerator, denominator))
    assert relative_std((4.0, 4.0), (6.0, 27.0)) == pytest.approx(7 / 11, rel=1e-15)


@pytest.mark.parametrize("cells", [None, 0])
def test_held_table_hits_are_find_hits(cells: int | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Marked hits (and, with no room for the table, find_hits itself): repeated items hit
    at their first rank only, empty slots never."""
    from auditor.metrics import held_hits
    from auditor.metrics.accuracy import find_hits

    if cells is not None:
        monkeypatch.setattr(held_hits, "TABLE_CELLS", cells)
    rng = np.random.default_rng(9)
    n_items, n_rows = 60, 40
    indptr, items = _csr([list(rng.choice(n_items, int(rng.integers(1, 15)), replace=False)) for _ in range(n_rows)])
    lists = rng.integers(-1, n_items, (n_rows, 30))  # repeats and empty slots
    lists[0, :4] = [items[0], items[0], -1, items[0]]
    table = held_hits.held_table(indptr, items, n_items)
    assert (table.marks is None) == (cells == 0)
    got, expected = table.hits(lists), find_hits(lists, indptr, items)
    assert got.hits.tolist() == expected.hits.tolist() and got.n_relevant.tolist() == expected.n_relevant.tolist()
    assert got.hits[0, :4].tolist() == [True, False, False, False]
    assert got.at(10).ndcg.tolist() == expected.at(10).ndcg.tolist()
