"""The user- and item-side list measures (auditor/metrics/user_measures.py, item_measures.py):
hand-computed cases, and agreement with the published reference code on one shared input
(tests/data/popularity_groups: Elliot's PopRSP, PopREO and ACLT; the niche/diverse/blockbuster
split and ΔGAP of Daniil et al.'s reproduction of Abdollahpouri et al. 2019)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.spatial.distance import jensenshannon

from auditor.errors import InputError
from auditor.metrics.exposure import ListContext, Slots
from auditor.metrics.group_measures import GROUP_MEASURES
from auditor.metrics.group_state import jensen_shannon
from auditor.metrics.popularity_groups import (
    BLOCKBUSTER,
    DIVERSE,
    HEAD,
    MID,
    NICHE,
    NO_GROUP,
    TAIL,
    GroupPolicy,
    as_profiles,
    groups_by_ratio,
    item_groups,
    long_tail,
    sole_ratio,
    user_groups,
)
from auditor.metrics.user_measures import group_table, tied_groups_warning, tied_ratio
from auditor.plugins import get_plugin_manager
from auditor.plugins.contributions import collect_measures

DATA = Path(__file__).parent / "data" / "popularity_groups"


def csr(sets: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    indptr = np.concatenate(([0], np.cumsum([len(s) for s in sets]))).astype(np.int64)
    return indptr, np.asarray([i for s in sets for i in s], dtype=np.int64)


def measure_all(context: ListContext, lists: np.ndarray) -> dict[str, float | None]:
    slots = Slots(np.asarray(lists, dtype=np.int64), context.n_items)
    out: dict[str, float | None] = {}
    for m in GROUP_MEASURES:
        scorer = m.bind(context)
        out[m.name] = None if scorer is None else scorer(slots)
    return out


# --- hand-computed ------------------------------------------------------------------------
# Popularity 8, 6, 3, 2, 1 (mass 20). Head H = {0} (8 >= 20%); the tail lies outside the
# items holding 80% (8 + 6 + 3 = 17 >= 16): T = {3, 4}; mid M = {1, 2}. Elliot's short head
# (80%) = {0, 1, 2}, long tail {3, 4}. Popular for the user grouping: the top 20% = {0}.
POP = np.array([8, 6, 3, 2, 1])
THIRDS = GroupPolicy(niche_fraction=1 / 3, blockbuster_fraction=1 / 3)
PROFILES = [[0, 1], [3], [0]]  # popular ratio 0.5, 0, 1: diverse, niche, blockbuster
LISTS = np.array([[2, 3], [0, 1], [4, -1]])
RELEVANT = [[2, 4], [], [4, 1, 2]]


def hand_context(relevant: bool = True) -> ListContext:
    return ListContext(POP, profiles=csr(PROFILES), relevant=csr(RELEVANT) if relevant else None, groups=THIRDS)


def test_item_groups_by_hand() -> None:
    assert item_groups(POP).tolist() == [HEAD, MID, MID, TAIL, TAIL]
    assert long_tail(POP).tolist() == [False, False, False, True, True]
    # Ties at a cut are all on one side; cold items are tail.
    assert item_groups(np.array([5, 5, 5, 5, 0])).tolist() == [HEAD] * 4 + [TAIL]
    assert item_groups(np.zeros(3)).tolist() == [TAIL] * 3


def test_user_groups_keep_ties_together() -> None:
    popularity = np.array([10, 1, 1, 1, 1])  # popular (top 20%): item 0
    profiles = as_profiles(csr([[1], [2], [0, 1], [0], [0], []]), 5, "profiles")
    # ratios 0, 0, 0.5, 1, 1: the 1st lowest and the 1st highest are the cuts; ties join them
    assert user_groups(popularity, profiles).tolist() == [NICHE, NICHE, DIVERSE, BLOCKBUSTER, BLOCKBUSTER, NO_GROUP]


def test_group_sizes_follow_the_authors_split_floor_niche_ceiling_blockbuster() -> None:
    # 12 distinct ratios, 20% each: niche the first ⌊0.2·12⌋ = 2, blockbuster from position
    # ⌊0.8·12⌋ = 9 on, 3 users (Daniil et al.'s [:low] / [high:]); 4 users: 0 niche, 1 blockbuster.
    ratio = np.arange(12) / 12.0
    codes = groups_by_ratio(ratio)
    assert [int((codes == g).sum()) for g in (NICHE, DIVERSE, BLOCKBUSTER)] == [2, 7, 3]
    assert groups_by_ratio(ratio[:4]).tolist() == [DIVERSE, DIVERSE, DIVERSE, BLOCKBUSTER]


def test_users_sharing_one_ratio_have_no_niche_or_blockbuster_group() -> None:
    # 20 (or 4) users whose items are all popular: no contrast, all diverse (not niche, not blockbuster).
    for n in (20, 4):
        assert groups_by_ratio(np.ones(n)).tolist() == [DIVERSE] * n
    assert groups_by_ratio(np.array([0.5, np.nan, 0.5])).tolist() == [DIVERSE, NO_GROUP, DIVERSE]
    assert sole_ratio(np.array([0.5, np.nan, 0.5])) == 0.5 and sole_ratio(np.array([0.5, 1.0])) is None
    tied = ListContext(POP, profiles=csr([[0], [0], [0]]))
    warning = tied_groups_warning(tied)
    assert warning is not None and warning.startswith("all 3 users with training items share one popular ratio (1.00")
    assert tied_groups_warning(hand_context()) is None and tied_groups_warning(ListContext(POP)) is None
    assert tied_ratio(tied) == 1.0 and tied_ratio(hand_context()) is None and tied_ratio(ListContext(POP)) is None
    values = measure_all(tied, np.array([[1, 2], [1, 2], [3, 4]]))
    assert math.isnan(values["gap_delta_niche"] or 0.0) and math.isnan(values["gap_delta_blockbuster"] or 0.0)
    assert values["gap_delta_diverse"] == pytest.approx((np.mean([4.5, 4.5, 1.5]) - 8) / 8)


def test_profiles_are_made_distinct_and_checked() -> None:
    profiles = as_profiles((np.array([0, 3, 5]), np.array([4, 1, 4, 2, 2])), 6, "profiles")
    assert profiles.indptr.tolist() == [0, 2, 3] and profiles.rows.tolist() == [1, 4, 2]
    with pytest.raises(ValueError, match=r"profiles: item rows must lie in \[0, 6\)"):
        as_profiles((np.array([0, 1]), np.array([6])), 6, "profiles")
    with pytest.raises(ValueError, match="relevant: indptr must start at 0"):
        as_profiles((np.array([1, 1]), np.array([0])), 6, "relevant")


def test_jensen_shannon_in_bits_by_hand_and_against_scipy() -> None:
    p = np.array([[1, 0, 0], [0.5, 0.5, 0], [1, 0, 0], [0.2, 0.3, 0.5]])
    q = np.array([[0, 1, 0], [0.5, 0.5, 0], [0.5, 0.5, 0], [0.6, 0.1, 0.3]])
    js = jensen_shannon(p, q)
    # [1,0,0] vs [.5,.5,0]: M = [.75,.25,0]; ½·log2(4/3) + ½·(½·log2(2/3) + ½·log2 2) = 0.311278
    assert js[:3] == pytest.approx([1.0, 0.0, 0.5 * math.log2(4 / 3) + 0.25 * (math.log2(2 / 3) + 1)])
    assert js == pytest.approx([jensenshannon(a, b, base=2) ** 2 for a, b in zip(p, q, strict=True)])
    assert np.isnan(jensen_shannon(np.array([[np.nan, 0, 0]]), np.array([[1, 0, 0]]))[0])


def test_user_side_measures_by_hand() -> None:
    values = measure_all(hand_context(), LISTS)
    # ΔGAP: diverse u0 profile (8+6)/2 = 7, list (3+2)/2 = 2.5; niche u1 2 -> 7; blockbuster u2 8 -> 1
    assert values["gap_delta_diverse"] == pytest.approx((2.5 - 7) / 7)
    assert values["gap_delta_niche"] == pytest.approx((7 - 2) / 2)
    assert values["gap_delta_blockbuster"] == pytest.approx((1 - 8) / 8)
    # JS(profile, list) over H/M/T: u0 (½,½,0) vs (0,½,½) = 0.5; u1 and u2 disjoint supports = 1
    assert values["miscalibration_diverse"] == pytest.approx(0.5)
    assert values["miscalibration_niche"] == pytest.approx(1.0)
    assert values["miscalibration_blockbuster"] == pytest.approx(1.0)
    assert values["miscalibration"] == pytest.approx(2.5 / 3)
    # NDCG@2: u0 hits item 2 at rank 1 of |R| = 2; u2 hits item 4 at rank 1 of |R| = 3 (empty slot 2)
    ideal = 1 + 1 / math.log2(3)
    assert values["ndcg_diverse"] == pytest.approx(1 / ideal)
    assert values["ndcg_blockbuster"] == pytest.approx(1 / ideal)
    assert values["ndcg_niche"] is not None and math.isnan(values["ndcg_niche"])  # u1 has no held-out item


def test_item_side_measures_by_hand() -> None:
    values = measure_all(hand_context(), LISTS)
    # Short head {0,1,2}, long tail {3,4}. Recommended: SH 1+2+0 = 3, LT 1+0+1 = 2.
    # Not trained: SH 1+3+2 = 6, LT 2+1+2 = 5.  P = (1/2, 2/5): |a-b|/(a+b) = 1/9.
    assert values["pop_rsp"] == pytest.approx(1 / 9)
    # Held out and served: u0 {2} (SH), u2 {4} (LT); held out, not trained: u0 {2}|{4}, u2 {1,2}|{4}.
    # P = (1/3, 1/2): (1/6)/(5/6) = 0.2
    assert values["pop_reo"] == pytest.approx(0.2)
    assert values["aclt"] == pytest.approx(2 / 3)  # long-tail items per list: 1, 0, 1


def test_item_side_measures_with_training_items_kept_among_the_candidates() -> None:
    # keep_seen: every item is a candidate of every row, so no training item leaves the
    # denominators. PopRSP: candidates SH 3·3 = 9, LT 3·2 = 6; served SH 3, LT 2: P = (1/3, 1/3), parity.
    relevant = [[2, 4], [], [4, 1, 2, 0]]  # u2 trained on item 0 and also holds it out
    kept = ListContext(POP, profiles=csr(PROFILES), relevant=csr(relevant), groups=THIRDS, seen_kept=True)
    values = measure_all(kept, LISTS)
    assert values["pop_rsp"] == pytest.approx(0.0, abs=1e-15)
    # PopREO: held out SH 1 + 3 = 4 (item 0 counts now), LT 1 + 1 = 2; hits SH {2}, LT {4}: P = (1/4, 1/2).
    assert values["pop_reo"] == pytest.approx(1 / 3)
    # Excluded (the default), u2's trained item 0 leaves the denominator: P = (1/3, 1/2) as above.
    excluded = ListContext(POP, profiles=csr(PROFILES), relevant=csr(relevant), groups=THIRDS)
    assert measure_all(excluded, LISTS)["pop_reo"] == pytest.approx(0.2)
    assert measure_all(excluded, LISTS)["pop_rsp"] == pytest.approx(1 / 9)


def test_missing_inputs_bind_to_none() -> None:
    without_holdout = measure_all(hand_context(relevant=False), LISTS)
    assert without_holdout["pop_reo"] is None and without_holdout["ndcg_niche"] is None
    assert without_holdout["pop_rsp"] == pytest.approx(1 / 9)
    bare = measure_all(ListContext(POP), LISTS)
    assert {name for name, v in bare.items() if v is not None} == {"aclt"}
    assert all(m.definition.startswith(m.name + ": ") for m in GROUP_MEASURES)
    assert all("null without" in m.definition for m in GROUP_MEASURES if m.name != "aclt")


def test_each_list_matrix_is_measured_afresh() -> None:
    context = hand_context()
    scorers = {m.name: m.bind(context) for m in GROUP_MEASURES}
    first = scorers["gap_delta_niche"]
    assert first is not None
    assert first(Slots(LISTS, 5)) == pytest.approx(2.5)
    assert first(Slots(np.array([[2, 3], [4, 3], [4, -1]]), 5) ) == pytest.approx((1.5 - 2) / 2)
    assert first(Slots(LISTS[:, :1], 5)) == pytest.approx((8 - 2) / 2)
    other = ListContext(POP * 2, profiles=csr(PROFILES), groups=THIRDS)  # another audit: its own groups
    bound = GROUP_MEASURES[0].bind(other)
    assert bound is not None and bound(Slots(LISTS, 5)) == pytest.approx(2.5)


def test_group_table_holds_every_figure() -> None:
    table = group_table(hand_context(), LISTS)
    assert table is not None
    rows = {row.group: row for row in table}
    assert rows["niche"].n_users == 1 and rows["niche"].gap_profile == 2 and rows["niche"].gap_list == 7
    assert rows["niche"].n_evaluated == 0 and rows["diverse"].n_evaluated == 1
    assert rows["blockbuster"].to_dict()["gap_delta"] == pytest.approx(-0.875)
    assert group_table(ListContext(POP), LISTS) is None


def test_policy_values_are_checked_and_named() -> None:
    with pytest.raises(InputError, match=r"head.mass must be a number in"):
        GroupPolicy(head_mass=0)
    with pytest.raises(InputError, match=r"head.mass \+ (--)?tail.mass must be at most 1"):
        GroupPolicy(head_mass=0.6, tail_mass=0.5)
    with pytest.raises(InputError, match="niche.fraction"):
        GroupPolicy(niche_fraction=0.7, blockbuster_fraction=0.4)
    assert "holding 20% of the popularity mass" in GroupPolicy().describe()


def test_the_measures_register_through_the_hook_with_the_builtins() -> None:
    registered = collect_measures(get_plugin_manager(entry_points=False))
    assert registered.list_names[-len(GROUP_MEASURES) :] == [m.name for m in GROUP_MEASURES]


# --- the published reference code ---------------------------------------------------------


@pytest.fixture(scope="module")
def reference() -> tuple[dict[str, object], dict[str, object]]:
    return json.loads((DATA / "inputs.json").read_text()), json.loads((DATA / "expected.json").read_text())


def reference_context(data: dict[str, object]) -> ListContext:
    train = np.asarray(data["train"])
    test = np.asarray(data["test"])
    n_users, n_items = int(data["n_users"]), int(data["n_items"])  # type: ignore[call-overload]
    popularity = np.bincount(train[:, 1], minlength=n_items)  # distinct pairs: users = interactions
    profiles = [train[train[:, 0] == u, 1].tolist() for u in range(n_users)]
    relevant = [test[test[:, 0] == u, 1].tolist() for u in range(n_users)]
    return ListContext(popularity, profiles=csr(profiles), relevant=csr(relevant))


@pytest.mark.parametrize("k", [5, 10])
def test_elliot_pop_rsp_pop_reo_and_aclt(reference: tuple[dict, dict], k: int) -> None:
    data, expected = reference
    elliot = expected["elliot"]["values"][str(k)]
    context = reference_context(data)
    values = measure_all(context, np.asarray(data["lists"])[:, :k])
    assert np.flatnonzero(~long_tail(context.popularity)).tolist() == elliot["short_head"]
    for name in ("pop_rsp", "pop_reo", "aclt"):
        assert values[name] == pytest.approx(elliot[name], rel=1e-12), name


@pytest.mark.parametrize("k", [5, 10])
def test_daniil_groups_and_gap_delta(reference: tuple[dict, dict], k: int) -> None:
    data, expected = reference
    daniil = expected["daniil"]["values"][str(k)]
    context = reference_context(data)
    codes = user_groups(context.popularity, as_profiles(context.profiles, context.n_items, "profiles"))  # type: ignore[arg-type]
    assert np.flatnonzero(codes == NICHE).tolist() == daniil["niche_users"]
    assert np.flatnonzero(codes == BLOCKBUSTER).tolist() == daniil["blockbuster_users"]
    values = measure_all(context, np.asarray(data["lists"])[:, :k])
    for group in ("niche", "diverse", "blockbuster"):
        assert values[f"gap_delta_{group}"] == pytest.approx(daniil[f"gap_delta_{group}"], rel=1e-12), group
    table = group_table(context, np.asarray(data["lists"])[:, :k])
    assert table is not None
    n_users = int(data["n_users"])  # type: ignore[call-overload]
    # The notebook's popularity is users(i) / n_users: the same GAP up to that scale.
    assert [row.gap_profile / n_users for row in table] == pytest.approx(daniil["gap_profile"], rel=1e-12)
    assert [row.n_users for row in table] == daniil["group_sizes"]
