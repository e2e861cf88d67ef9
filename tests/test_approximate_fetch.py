"""An approximate index's candidate fetch: each query fetches K plus its own training items,
a history too long to fetch around is searched exactly, and a block's candidates fit the
memory ceiling (checked before anything is allocated)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from auditor.errors import InputError
from auditor.memory import approximate_index_bytes
from auditor.progress import SILENT
import auditor.memory as memory_module
from auditor.retrieval.candidates import CANDIDATE_BYTES, MAX_EXTRA_FETCH, UNSET_CEILING_ROOM, candidate_room, plan_fetch
from auditor.retrieval.lists import SHARD_NOTE_MIN, approximate_lists, shard_cost_note
from auditor.retrieval.scorings import multi_scoring_topk
from auditor.retrieval.shards import shard_bounds
from auditor.retrieval.serving import Exclusions

N_ITEMS, DIM, N_QUERIES, K = 4000, 8, 400, 10
HEAVY = 2 * MAX_EXTRA_FETCH  # query 0's training items: past the fetch limit


def _exclusions(counts: list[int], n_items: int) -> Exclusions:
    """CSR of the first ``counts[q]`` even rows for query q."""
    indptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    rows = np.concatenate([np.arange(0, 2 * c, 2, dtype=np.int64) % n_items for c in counts])
    return indptr, rows


def _case() -> tuple[np.ndarray, np.ndarray, Exclusions]:
    rng = np.random.default_rng(11)
    # Norms vary over a decade: inner-product IVF then misses high-norm rows (imperfect recall).
    table = (rng.standard_normal((N_ITEMS, DIM)) * rng.uniform(0.2, 2.0, (N_ITEMS, 1))).astype(np.float32)
    queries = rng.standard_normal((N_QUERIES, DIM)).astype(np.float32)
    counts = [HEAVY] + [int(c) for c in rng.integers(0, 20, N_QUERIES - 1)]
    return table, queries, _exclusions(counts, N_ITEMS)


def test_plan_sizes_each_block_by_its_own_histories() -> None:
    # Histories 0, 3, 1, 2000, 5 with K=10, blocks of 2 queries (budget 2 x 15 x 64 bytes).
    exclude = _exclusions([0, 3, 1, 2000, 5], 5000)
    plan = plan_fetch(exclude, 5, 10, 5000, budget=2 * 15 * CANDIDATE_BYTES)
    assert plan.exact.tolist() == [3]  # 2000 > MAX_EXTRA_FETCH: searched exactly
    assert [(positions.tolist(), fetch) for positions, fetch in plan.blocks] == [([0, 2], 11), ([1, 4], 15)]
    assert plan.peak_bytes == 2 * 15 * CANDIDATE_BYTES
    # The old policy: every query fetched 10 + 2000.
    assert plan.peak_bytes < 5 * 2010 * 12


def test_plan_refuses_a_ceiling_without_room_for_one_query() -> None:
    exclude = _exclusions([0, 40], 1000)
    with pytest.raises(InputError, match=r"max_memory leaves 100 bytes beside the approximate index, less than one "
                                         r"query's 50 candidates need \(3,200 bytes\)"):
        plan_fetch(exclude, 2, 10, 1000, budget=100)
    with pytest.raises(InputError, match=r"\(at least 700 more\)"):  # 700 bytes short (it said the whole 4K)
        plan_fetch(exclude, 2, 10, 1000, budget=2500)


def test_heavy_query_gets_exact_lists_and_light_ones_their_own_fetch() -> None:
    table, queries, exclude = _case()
    lists = approximate_lists(queries, table, "ivf", [K], exclude, seed=0, progress=SILENT)
    exact = multi_scoring_topk(queries, table, K, (1.0, 0.0), exclude=exclude)
    for alpha in (1.0, 0.0):
        # Known answer: the heavy query's lists are exact search's, its training items never among them.
        assert lists.rows[alpha][0].tolist() == exact[alpha][1][0].tolist()
        assert not np.isin(lists.rows[alpha][0], exclude[1][: HEAVY]).any()
        for q in range(1, N_QUERIES):  # no light query is served an excluded row, and every slot is filled
            own = exclude[1][exclude[0][q] : exclude[0][q + 1]]
            assert not np.isin(lists.rows[alpha][q], own).any()
            assert (lists.rows[alpha][q] >= 0).all()
    assert "1 query with more than 1024 training items searched exactly" in lists.note
    assert "norm-aware scorings are not measured" in lists.note


def test_candidate_memory_stays_within_the_ceiling() -> None:
    table, queries, exclude = _case()
    ceiling = approximate_index_bytes(N_ITEMS, DIM) + (1 << 20)  # 1 MiB for candidates beside the index
    tracemalloc.start()
    try:
        approximate_lists(queries, table, "ivf", [K], exclude, seed=0, progress=SILENT, max_memory=ceiling)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Old policy: 400 queries x (10 + 2048) candidates x 12 bytes = 9.9 MB per scoring, plus filter copies.
    # Now: the table's float32 copy and normalised copy (2 x 128 KB), one block's candidates (<= 1 MiB),
    # and the lists (400 x 10 x 8 bytes per scoring).
    assert peak < ceiling + (1 << 20), peak


def test_many_small_shards_are_said_with_their_figures() -> None:
    # 20,000 x 32 under 300K: shards of 307,200 // (2 x 4 x 32) = 1,200 rows, 17 of them.
    bounds = shard_bounds(20_000, 32, 300 * 1024)
    assert len(bounds) == 17 >= SHARD_NOTE_MIN
    (note,) = shard_cost_note(bounds, 300 * 1024)
    assert note.startswith("the item table was searched in 17 row shards of up to 1,200 rows to fit the memory "
                           "ceiling (max_memory 307,200 bytes): every shard ranks every query")
    assert shard_cost_note(shard_bounds(20_000, 32, 2 << 20), 2 << 20) == []  # 3 shards: no visible cost


def test_candidate_room_is_what_the_ceiling_leaves_beside_the_index(monkeypatch: pytest.MonkeyPatch) -> None:
    # 1,000 x 16 float32 and its normalised copy: 128,000 bytes.
    assert candidate_room(200_000, 1000, 16) == 72_000
    assert candidate_room(100_000, 1000, 16) == -28_000  # plan_fetch refuses it, naming max_memory
    # No ceiling given: half the available memory, never below UNSET_CEILING_ROOM (nothing unset is refused).
    monkeypatch.setattr(memory_module, "available_memory", lambda: 200_000)
    assert candidate_room(None, 1000, 16) == UNSET_CEILING_ROOM
    monkeypatch.setattr(memory_module, "available_memory", lambda: None)
    assert candidate_room(None, 1000, 16) is None
