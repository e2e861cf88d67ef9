"""Retrieval: exact/sharded/approximate search, query sources, zero/NaN vectors, skew."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import faiss
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from threadpoolctl import threadpool_info

import auditor.retrieval.search as retrieval_module
from auditor.config import AuditConfig
from auditor.errors import EmbeddingTableError, InputError, QueryError
from auditor.metrics.list_measures import ExposureMeasures
from auditor.model import InteractionPairs, ItemStats, ModelBundle
from auditor.progress import Advance, Progress
from auditor.values import ItemRows
from auditor.values import LogSpec
from auditor.loading.population import load_population
from auditor.model import QueryPopulation
from auditor.progress import SILENT
from auditor.loading.parquet_table import parquet_shards
from auditor.loading.queries import load_query_file
from auditor.loading.shards import table_shards
from auditor.retrieval import (
    EXACT_FLOP_LIMIT,
    blas_path,
    choose_index,
    l2_normalise,
    measure_retrieval as _measure_population,
    recall_at,
    sharded_topk,
)

RNG = np.random.default_rng(7)


def _bundle(items: np.ndarray, users: np.ndarray | None = None) -> ModelBundle:
    return ModelBundle(source=Path("model.npy"), format="npy", item_table=items, user_table=users)


def _stats(freq: np.ndarray, users: np.ndarray | None = None, n_users: int | None = None) -> ItemStats:
    return ItemStats(
        frequencies=np.asarray(freq, dtype=np.int64),
        n_interactions=int(np.sum(freq)),
        user_counts=None if users is None else np.asarray(users, dtype=np.int64),
        n_users=n_users,
    )


def _config(**kwargs: object) -> AuditConfig:
    return AuditConfig(model=Path("model.npy"), **kwargs)  # type: ignore[arg-type]


def _population(bundle: ModelBundle, config: AuditConfig) -> QueryPopulation:
    return load_population(
        bundle, queries=config.queries, log=config.training_log, mapping=config.item_rows(bundle),
        row_ids=config.row_ids, max_queries=config.max_queries, seed=config.seed, keep_seen=config.keep_seen,
    )


def measure_retrieval(bundle: ModelBundle, stats: ItemStats, config: AuditConfig, progress: Progress = SILENT):
    """The retrieval section over the population ``config`` defines (as run_audit does)."""
    return _measure_population(bundle, stats, config, _population(bundle, config), progress)


def _skewed_model(n_items: int = 2000, dim: int = 16, n_users: int = 300, seed: int = 0):
    """Random directions, norms growing with popularity (what C1-C5 training produces)."""
    rng = np.random.default_rng(seed)
    freq = np.minimum(rng.zipf(1.6, n_items), 5000)
    directions = rng.standard_normal((n_items, dim)).astype(np.float32)
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    items = directions * (1.0 + np.log1p(freq))[:, None].astype(np.float32)
    users = rng.standard_normal((n_users, dim)).astype(np.float32)
    return items, users, freq


# --- exact and sharded search ----------------------------------------------------------
def test_exact_matches_bare_index_flat_ip() -> None:
    table = RNG.standard_normal((3000, 12)).astype(np.float32)
    queries = RNG.standard_normal((40, 12)).astype(np.float32)
    scores, rows = sharded_topk(queries, [table], 15, normalise=False)
    index = faiss.IndexFlatIP(12)
    index.add(table)
    bare_scores, bare_rows = index.search(queries, 15)
    np.testing.assert_array_equal(rows, bare_rows)
    np.testing.assert_allclose(scores, bare_scores, rtol=1e-5, atol=1e-5)
    # cosine == inner product of normalised copies
    cos_scores, cos_rows = sharded_topk(queries, [table], 15, normalise=True)
    index = faiss.IndexFlatIP(12)
    index.add(l2_normalise(table)[0])
    bare_scores, bare_rows = index.search(l2_normalise(queries)[0], 15)
    np.testing.assert_array_equal(cos_rows, bare_rows)
    assert cos_scores.max() <= 1.0 + 1e-5


@pytest.mark.parametrize("normalise", [False, True])
def test_sharded_equals_unsharded(normalise: bool) -> None:
    table = RNG.standard_normal((2500, 8)).astype(np.float32)
    table[[5, 1700]] = 0.0  # zero rows in two different shards
    queries = RNG.standard_normal((33, 8)).astype(np.float32)
    one_scores, one_rows = sharded_topk(queries, [table], 25, normalise)
    for shards in (table_shards(table, 700), np.array_split(table, [1, 2, 999, 1000, 2400])):
        scores, rows = sharded_topk(queries, shards, 25, normalise)
        np.testing.assert_array_equal(rows, one_rows)
        np.testing.assert_allclose(scores, one_scores, rtol=1e-5, atol=1e-6)
    if normalise:
        assert not np.isin(one_rows, [5, 1700]).any()


def test_threaded_slices_equal_one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retrieval_module, "MIN_ROWS_PER_THREAD", 100)
    table = RNG.standard_normal((1000, 8)).astype(np.float32)
    queries = RNG.standard_normal((37, 8)).astype(np.float32)
    for normalise in (False, True):
        one = sharded_topk(queries, [table], 30, normalise, threads=1, block=16)
        for threads in (2, 3, 7):
            many = sharded_topk(queries, [table], 30, normalise, threads=threads, block=16)
            np.testing.assert_array_equal(many[1], one[1])
            np.testing.assert_allclose(many[0], one[0], rtol=1e-5, atol=1e-6)
    # Small integers make every dot product exact, so the ties below are real ties:
    # rows 0, 50, 100, ... are copies of one vector, spread over every slice. Other rows
    # have entries in [-3, 2], so they score less.
    ints = np.random.default_rng(5).integers(-3, 3, size=(1000, 8)).astype(np.float32)
    ints[::50] = 3.0  # the query's own direction: the only items scoring the maximum, 72
    _, rows = sharded_topk(ints[:1], [ints], 20, False, threads=4)
    assert rows[0].tolist() == list(range(0, 1000, 50))


def test_sharded_ties_broken_by_row() -> None:
    # Every row has the same score: the top 5 must be rows 0..4 whatever the sharding.
    table = np.ones((100, 4), dtype=np.float32)
    queries = np.ones((3, 4), dtype=np.float32)
    for shards in ([table], table_shards(table, 7), table_shards(table, 1)):
        _, rows = sharded_topk(queries, shards, 5, normalise=False)
        assert rows.tolist() == [[0, 1, 2, 3, 4]] * 3
    # Two tied groups: higher score first, then lower row.
    table[::10] *= 2
    _, rows = sharded_topk(queries, table_shards(table, 13), 12, normalise=False)
    assert rows[0].tolist() == [0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 1, 2]


def test_parquet_shards_feed_sharded_search(tmp_path: Path) -> None:
    table = RNG.standard_normal((1000, 6)).astype(np.float32)
    path = tmp_path / "items.parquet"
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(table.ravel()), 6)
    pq.write_table(pa.table({"item_id": np.arange(1000), "vec": vectors}), path, row_group_size=300)
    queries = RNG.standard_normal((10, 6)).astype(np.float32)
    scores, rows = sharded_topk(queries, parquet_shards(path, "vec", rows_per_shard=128), 30, True)
    ref_scores, ref_rows = sharded_topk(queries, [table], 30, True)
    np.testing.assert_array_equal(rows, ref_rows)
    np.testing.assert_allclose(scores, ref_scores, rtol=1e-5, atol=1e-6)


def test_k_beyond_table_pads_with_empty_slots() -> None:
    table = np.array([[1.0, 0.0], [0.0, 0.0], [0.5, 0.5]], dtype=np.float32)
    scores, rows = sharded_topk(np.array([[1.0, 0.0]], dtype=np.float32), [table], 5, normalise=True)
    assert rows[0].tolist() == [0, 2, -1, -1, -1]  # zero row 1 is never served by cosine
    assert np.isneginf(scores[0, 2:]).all() and not np.isnan(scores).any()
    _, dot_rows = sharded_topk(np.array([[1.0, 0.0]], dtype=np.float32), [table], 5, normalise=False)
    assert dot_rows[0].tolist() == [0, 2, 1, -1, -1]


def test_blas_path_restores_global_threshold() -> None:
    before = faiss.cvar.distance_compute_blas_threshold
    with blas_path():
        assert faiss.cvar.distance_compute_blas_threshold == 0
        blas = [lib for lib in threadpool_info() if lib["user_api"] == "blas"]
        assert blas and all(lib["num_threads"] == 1 for lib in blas)
    assert faiss.cvar.distance_compute_blas_threshold == before
    with pytest.raises(RuntimeError), blas_path():
        raise RuntimeError("boom")
    assert faiss.cvar.distance_compute_blas_threshold == before


def test_nan_item_raises() -> None:
    table = RNG.standard_normal((50, 4)).astype(np.float32)
    table[17, 2] = np.nan
    with pytest.raises(EmbeddingTableError, match="row 17"):
        sharded_topk(np.ones((2, 4), dtype=np.float32), table_shards(table, 10), 3, False)


# --- the retrieval section ---------------------------------------------------------------
def test_dot_serves_popular_items_more_than_cosine() -> None:
    items, users, freq = _skewed_model()
    outcome = measure_retrieval(_bundle(items, users), _stats(freq), _config(ks=(10, 100)))
    retrieval = outcome.retrieval
    assert retrieval.index == "exact" and retrieval.n_queries == 300
    for k in (10, 100):
        cut = retrieval.at[k]
        assert cut.dot["head_share_1pct"] > 2 * cut.cosine["head_share_1pct"]
        assert cut.dot["head_share_10pct"] > cut.cosine["head_share_10pct"]
        assert cut.dot["arp"] > cut.cosine["arp"]
        assert cut.dot["gini"] > cut.cosine["gini"]
        assert cut.dot["coverage"] < cut.cosine["coverage"]
        assert 0.0 <= cut.overlap_dot_cosine < 1.0
        # The most-popular list is all head at 1% for K <= 1% of the catalogue.
        assert cut.popular["arp"] >= cut.dot["arp"]
    assert retrieval.at[10].popular["head_share_1pct"] == 1.0
    # With norms removed the table is direction-only: dot == cosine.
    unit = items / np.linalg.norm(items, axis=1, keepdims=True)
    same = measure_retrieval(_bundle(unit, users), _stats(freq), _config(ks=(10,))).retrieval
    assert same.at[10].overlap_dot_cosine == pytest.approx(1.0)
    assert same.at[10].dot == same.at[10].cosine


def test_measures_match_exposure_module_on_the_lists() -> None:
    items, users, freq = _skewed_model(n_items=500, n_users=50)
    outcome = measure_retrieval(_bundle(items, users), _stats(freq), _config(ks=(7,)))
    _, dot_rows = sharded_topk(users, [items], 7, False)
    _, cos_rows = sharded_topk(users, [items], 7, True)
    measures = ExposureMeasures(freq)
    assert outcome.retrieval.at[7].dot == measures.measure(dot_rows)
    assert outcome.retrieval.at[7].cosine == measures.measure(cos_rows)
    assert outcome.exposure["dot"][7].sum() == 50 * 7
    cosine_counts = np.bincount(cos_rows.ravel(), minlength=500)
    np.testing.assert_array_equal(outcome.exposure["cosine"][7], cosine_counts)
    popular = measures.popular_list(7)
    assert outcome.exposure["popular"][7][popular].tolist() == [50] * 7
    assert outcome.exposure["popular"][7].sum() == 50 * 7


def test_k_clamped_with_warning() -> None:
    items, users, freq = _skewed_model(n_items=40, n_users=20)
    outcome = measure_retrieval(_bundle(items, users), _stats(freq), _config(ks=(10, 100)))
    assert sorted(outcome.retrieval.at) == [10, 40]
    assert any("K=100" in w and "clamped to 40" in w for w in outcome.warnings)
    assert outcome.retrieval.at[40].dot["coverage"] == 1.0


def test_zero_and_nan_queries() -> None:
    items, users, freq = _skewed_model(n_items=300, n_users=30)
    users[[3, 9]] = 0.0
    outcome = measure_retrieval(_bundle(items, users), _stats(freq), _config(ks=(5,)))
    assert outcome.retrieval.n_zero_queries == 2
    assert outcome.retrieval.n_queries == 28
    assert any("2 of 30 query vectors are zero" in w for w in outcome.warnings)
    assert not np.isnan(outcome.retrieval.at[5].cosine["arp"])
    users[4, 1] = np.nan
    with pytest.raises(QueryError, match="row 4"):
        measure_retrieval(_bundle(items, users), _stats(freq), _config(ks=(5,)))
    with pytest.raises(QueryError, match="all 30 query vectors are zero"):
        measure_retrieval(_bundle(items, np.zeros_like(users)), _stats(freq), _config(ks=(5,)))


def test_zero_items_never_served_by_cosine() -> None:
    items, users, freq = _skewed_model(n_items=300, n_users=30)
    items[:20] = 0.0
    outcome = measure_retrieval(_bundle(items, users), _stats(freq), _config(ks=(10,)))
    assert outcome.exposure["cosine"][10][:20].sum() == 0
    assert any("20 item vectors are zero" in w for w in outcome.warnings)


def test_query_sources(tmp_path: Path) -> None:
    items, users, freq = _skewed_model(n_items=200, n_users=60)
    stats = _stats(freq)
    auto = measure_retrieval(_bundle(items, users), stats, _config(ks=(5,))).retrieval
    assert auto.queries.startswith("users") and auto.n_queries == 60
    with pytest.raises(QueryError, match="queries PATH.*interactions"):
        measure_retrieval(_bundle(items), stats, _config(ks=(5,)))
    with pytest.raises(QueryError, match="no user table"):
        measure_retrieval(_bundle(items), stats, _config(ks=(5,), queries="users"))
    with pytest.raises(QueryError, match="interactions"):
        measure_retrieval(_bundle(items, users), stats, _config(ks=(5,), queries="history"))

    npy = tmp_path / "queries.npy"
    np.save(npy, users)
    from_npy = measure_retrieval(_bundle(items), stats, _config(ks=(5,), queries=str(npy)))
    from_npy = from_npy.retrieval
    assert from_npy.at == auto.at
    parquet = tmp_path / "queries.parquet"
    pq.write_table(pa.table({"q": pa.array(list(users.astype(np.float64)))}), parquet)
    from_parquet = measure_retrieval(_bundle(items), stats, _config(ks=(5,), queries=str(parquet)))
    assert from_parquet.retrieval.at == auto.at

    np.save(tmp_path / "wrong.npy", users[:, :5])
    with pytest.raises(QueryError, match="dimension 5 but the item table has dimension 16"):
        wrong = _config(ks=(5,), queries=str(tmp_path / "wrong.npy"))
        measure_retrieval(_bundle(items), stats, wrong)
    with pytest.raises(QueryError, match="query file not found"):
        load_query_file(tmp_path / "missing.npy")
    two = tmp_path / "two.parquet"
    pq.write_table(pa.table({"a": pa.array([[1.0, 2.0]]), "b": pa.array([[1.0, 2.0]])}), two)
    with pytest.raises(QueryError, match="exactly one"):
        load_query_file(two)


def test_max_queries_sampling_is_seeded() -> None:
    items, users, freq = _skewed_model(n_items=200, n_users=500)
    runs = [
        measure_retrieval(
            _bundle(items, users), _stats(freq), _config(ks=(5,), max_queries=100, seed=s)
        )
        for s in (1, 1, 2)
    ]
    assert all(r.retrieval.n_queries == 100 for r in runs)
    assert runs[0].retrieval.at == runs[1].retrieval.at
    assert not np.array_equal(runs[0].exposure["dot"][5], runs[2].exposure["dot"][5])


def test_history_queries_are_means_of_distinct_training_items() -> None:
    items = RNG.standard_normal((6, 3)).astype(np.float32)
    pairs = InteractionPairs(
        user_index=np.array([0, 0, 1, 2, 2, 2, 0]),
        item_rows=np.array([1, 2, 5, 0, 0, 3, 4]),
        user_ids=np.array(["a", "b", "c"]),
    )
    # User c saw item 0 twice: its history is the set {0, 3}.
    expected = np.stack([items[[1, 2, 4]].mean(0), items[5], items[[0, 3]].mean(0)])
    bundle = _bundle(items)
    bundle.train_pairs = pairs
    history = _population(bundle, _config())
    np.testing.assert_allclose(history.vectors, expected, rtol=1e-6, atol=1e-6)
    assert (history.n_eligible, history.sampled, history.source) == (3, False, "history")
    assert history.raw_ids.tolist() == ["a", "b", "c"] and history.seen_items == "excluded"
    sampled = _population(bundle, _config(max_queries=2, seed=4))
    picked = np.sort(np.random.default_rng(4).choice(3, size=2, replace=False))
    np.testing.assert_allclose(sampled.vectors, expected[picked], rtol=1e-6, atol=1e-6)
    assert sampled.sampled and "2 sampled with seed 4" in sampled.description
    freq = np.bincount(pairs.item_rows, minlength=6)
    outcome = measure_retrieval(bundle, _stats(freq), _config(ks=(2,)))
    assert outcome.retrieval.queries.startswith("history") and outcome.retrieval.n_queries == 3
    # Training items are never served: user b's only item (5) never reaches its list.
    assert 5 not in outcome.lists["dot"][1] and 5 not in outcome.lists["cosine"][1]


def test_popularity_kind() -> None:
    items, users, freq = _skewed_model(n_items=100, n_users=20)
    with pytest.raises(InputError, match="no user column"):
        by_users = _config(ks=(5,), popularity="users")
        measure_retrieval(_bundle(items, users), _stats(freq), by_users)
    # Distinct users order the items in reverse of interactions: the popular list flips.
    user_counts = freq.max() - freq + 1
    outcome = measure_retrieval(
        _bundle(items, users),
        _stats(freq, user_counts, 5000),
        _config(ks=(5,), popularity="users"),
    )
    top_users = np.lexsort((np.arange(100), -user_counts))[:5]
    assert np.flatnonzero(outcome.exposure["popular"][5]).tolist() == sorted(top_users.tolist())
    assert outcome.retrieval.popularity == "users"
    with pytest.raises(InputError, match="cover 99 items"):
        measure_retrieval(_bundle(items, users), _stats(freq[:99]), _config(ks=(5,)))


class _Recorder(Progress):
    def __init__(self) -> None:
        self.seen: dict[str, float] = {}

    @contextmanager
    def track(self, description: str, total: float | None = None) -> Iterator[Advance]:
        self.seen[description] = 0.0

        def advance(n: float = 1) -> None:
            self.seen[description] += n

        yield advance


def test_progress_and_memory_bounded_sharding() -> None:
    items, users, freq = _skewed_model(n_items=9000, dim=8, n_users=50)
    recorder = _Recorder()
    plain = measure_retrieval(_bundle(items, users), _stats(freq), _config(ks=(10,)))
    sharded = measure_retrieval(
        _bundle(items, users), _stats(freq), _config(ks=(10,), max_memory=200_000), recorder
    )
    assert "shards merged" in sharded.retrieval.definitions["index"]
    assert sharded.retrieval.at == plain.retrieval.at
    assert recorder.seen["retrieval: every scoring in one pass"] == 50 * 3  # 3 shards of 4096 rows


# --- approximate indexes -------------------------------------------------------------------
def test_recall_at_hand_values() -> None:
    exact = np.array([[1, 2, 3, 4], [5, 6, -1, -1]])
    approx = np.array([[4, 3, 9, 8], [6, 7, 8, -1]])
    assert recall_at(approx, exact) == pytest.approx((2 / 4 + 1 / 2) / 2)


@pytest.mark.parametrize("kind", ["ivf", "hnsw"])
def test_approximate_index_reports_recall(kind: str) -> None:
    # Clustered items so an approximate index has structure to exploit.
    rng = np.random.default_rng(1)
    centres = rng.standard_normal((30, 16)).astype(np.float32) * 3
    items = centres[rng.integers(0, 30, 6000)] + rng.standard_normal((6000, 16)).astype(np.float32)
    users = centres[rng.integers(0, 30, 200)] + rng.standard_normal((200, 16)).astype(np.float32)
    freq = rng.zipf(1.7, 6000).clip(max=1000)
    bundle, stats = _bundle(items, users), _stats(freq)
    outcome = measure_retrieval(bundle, stats, _config(ks=(10, 50), index=kind))
    retrieval = outcome.retrieval
    assert retrieval.index == kind
    assert retrieval.recall is not None and sorted(retrieval.recall) == [10, 50]
    assert all(0.8 <= r <= 1.0 for r in retrieval.recall.values())
    assert "recall@K" in retrieval.definitions["recall"]
    assert "200 sampled queries" in retrieval.definitions["recall"]
    exact = measure_retrieval(bundle, stats, _config(ks=(10, 50), index="exact"))
    assert exact.retrieval.recall is None
    # High recall: the approximate measures are close to the exact ones.
    assert retrieval.at[10].dot["arp"] == pytest.approx(exact.retrieval.at[10].dot["arp"], rel=0.1)


def test_auto_index_threshold() -> None:
    assert choose_index("auto", 1_000_000, 10_000, 64) == "exact"
    assert choose_index("auto", 10_000_000, 10_000, 128) == "ivf"
    limit_items = int(EXACT_FLOP_LIMIT / (2 * 1000 * 100))
    assert choose_index("auto", limit_items, 1000, 100) == "exact"
    assert choose_index("auto", limit_items + 1, 1000, 100) == "ivf"
    assert choose_index("hnsw", 10, 10, 10) == "hnsw"


@pytest.mark.parametrize("max_users", [None, 7])
def test_streamed_population_equals_the_in_memory_one(tmp_path: Path, max_users: int | None) -> None:
    """The log streamed twice gives the population the full pair list gives (same sample)."""
    from auditor.loading import read_pairs

    rng = np.random.default_rng(3)
    items = rng.standard_normal((40, 5)).astype(np.float32)
    users = rng.choice(np.array([f"u{i}" for i in range(25)]), 600)
    log_items = rng.integers(0, 45, 600)  # ids 40-44 have no row: left out of the histories
    log = tmp_path / "log.parquet"
    pq.write_table(pa.table({"user_id": users, "item_id": log_items}), log)
    in_memory = _bundle(items)
    in_memory.train_pairs = read_pairs(LogSpec(log), ItemRows(None, 40))
    expected = _population(in_memory, _config(max_queries=max_users, seed=11))
    streamed = _population(_bundle(items), _config(interactions=log, max_queries=max_users, seed=11))
    assert (streamed.n_eligible, streamed.sampled) == (expected.n_eligible, expected.sampled)
    assert streamed.raw_ids.tolist() == expected.raw_ids.tolist()
    np.testing.assert_allclose(streamed.vectors, expected.vectors, rtol=1e-6)
    np.testing.assert_array_equal(streamed.seen_indptr, expected.seen_indptr)
    np.testing.assert_array_equal(streamed.seen_rows, expected.seen_rows)


def test_zero_rows_of_the_loaded_table_are_warned_once(tmp_path: Path) -> None:
    """The load stage says a table's zero rows; serving that same table does not say it
    again (QA: two overlapping warnings for one fact)."""
    from auditor.audit import run_audit

    items, users, freq = _skewed_model(n_items=300, n_users=30)
    items[:20] = 0.0
    np.save(tmp_path / "items.npy", items)
    rng = np.random.default_rng(0)
    log_items = rng.choice(300, size=3000, p=freq / freq.sum())
    pq.write_table(pa.table({"user_id": rng.integers(0, 30, size=3000), "item_id": log_items}), tmp_path / "log.parquet")
    result = run_audit(AuditConfig(model=tmp_path / "items.npy", interactions=tmp_path / "log.parquet", ks=(10,),
                                   probes=False, bootstrap=0))
    said = [w for w in result.warnings if "all-zero rows" in w or "item vectors are zero" in w]
    assert len(said) == 1 and said[0].startswith("item table in"), said
