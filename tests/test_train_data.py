"""Training data: the synthetic generator, user histories and file logs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy import sparse, stats
from scipy.sparse.csgraph import connected_components

from auditor.errors import InputError, InteractionsError
from auditor.train.data import (
    TrainingData,
    random_projection_features,
    read_interactions,
    synthetic_interactions,
)


def test_synthetic_shapes_and_ranges() -> None:
    d = synthetic_interactions(50, 80, 3000, 1.0, seed=3)
    assert d.users.shape == d.items.shape == (3000,)
    assert d.users.dtype == d.items.dtype == np.int64
    assert 0 <= d.users.min() and d.users.max() < 50
    assert 0 <= d.items.min() and d.items.max() < 80
    assert d.user_ids == list(range(50)) and d.item_ids == list(range(80))
    assert d.item_frequencies.sum() == 3000 and d.item_frequencies.shape == (80,)
    assert d.item_features is not None and d.item_features.shape == (80, 32)
    assert d.description["kind"] == "synthetic" and d.description["zipf"] == 1.0


def test_synthetic_is_seeded() -> None:
    a = synthetic_interactions(40, 60, 2000, seed=7)
    b = synthetic_interactions(40, 60, 2000, seed=7)
    c = synthetic_interactions(40, 60, 2000, seed=8)
    assert np.array_equal(a.users, b.users) and np.array_equal(a.items, b.items)
    assert np.array_equal(a.item_features, b.item_features)
    assert not np.array_equal(a.items, c.items)


def test_uniform_popularity_without_zipf_or_topics() -> None:
    # zipf 0 and no topical choice: every item equally likely (chi-square goodness of fit)
    d = synthetic_interactions(100, 20, 20_000, 0.0, seed=1, affinity=0.0)
    p = stats.chisquare(d.item_frequencies).pvalue
    assert p > 1e-3


def test_zipf_frequencies_follow_the_power_law() -> None:
    # no topics: item frequency is proportional to rank^-zipf, so log f vs log rank has
    # slope about -zipf among the well-sampled head
    d = synthetic_interactions(200, 500, 400_000, 1.2, seed=0, affinity=0.0)
    f = np.sort(d.item_frequencies)[::-1][:50].astype(float)
    slope = np.polyfit(np.log(np.arange(1, 51)), np.log(f), 1)[0]
    assert slope == pytest.approx(-1.2, abs=0.1)


def test_topical_users_form_one_component_per_topic() -> None:
    # affinity 1: a user only ever picks items of its topic, so the user-item graph splits
    # into exactly n_topics connected components (among nodes with interactions)
    n_users, n_items = 300, 60
    d = synthetic_interactions(n_users, n_items, 20_000, 0.0, seed=2, n_topics=5, affinity=1.0)
    adj = sparse.coo_matrix(
        (np.ones(d.n_interactions), (d.users, n_users + d.items)),
        shape=(n_users + n_items, n_users + n_items),
    )
    _, labels = connected_components(adj, directed=False)
    used = np.zeros(n_users + n_items, bool)
    used[d.users] = True
    used[n_users + d.items] = True
    assert len(np.unique(labels[used])) == 5


def test_synthetic_rejects_bad_sizes() -> None:
    with pytest.raises(InputError):
        synthetic_interactions(10, 1, 100)
    with pytest.raises(InputError):
        synthetic_interactions(10, 10, 100, zipf=-1)


def test_histories_keep_the_most_recent_items_right_aligned() -> None:
    d = TrainingData(
        users=np.array([0, 1, 0, 0, 2]),
        items=np.array([5, 6, 7, 8, 1]),
        n_users=4,
        n_items=10,
        user_ids=[0, 1, 2, 3],
        item_ids=list(range(10)),
        description={},
    )
    h = d.histories(2)
    assert h.tolist() == [[7, 8], [10, 6], [10, 1], [10, 10]]
    assert d.histories(4)[0].tolist() == [10, 5, 7, 8]


def test_random_projection_features_are_seeded_and_scaled() -> None:
    a = random_projection_features(500, 64, seed=1)
    assert a.shape == (500, 64) and a.dtype == np.float32
    assert np.array_equal(a, random_projection_features(500, 64, seed=1))
    assert np.linalg.norm(a, axis=1).mean() == pytest.approx(1.0, abs=0.05)


def test_read_movielens_u_data(tmp_path: Path) -> None:
    path = tmp_path / "u.data"
    path.write_text("196\t242\t3\t881250949\n186\t302\t3\t891717742\n196\t302\t1\t878887116\n22\t377\t1\t878887116\n")
    d = read_interactions(path)
    assert d.item_ids == [242, 302, 377]
    assert d.n_items == 3 and d.n_interactions == 4
    assert [d.item_ids[r] for r in d.items] == [242, 302, 302, 377]
    assert [d.user_ids[u] for u in d.users] == [196, 186, 196, 22]
    assert d.item_frequencies.tolist() == [1, 2, 1]
    assert d.description["kind"] == "file"


def test_read_ratings_dat_and_recbole(tmp_path: Path) -> None:
    dat = tmp_path / "ratings.dat"
    dat.write_text("1::1193::5::978300760\n1::661::3::978302109\n2::1193::4::978298413\n")
    d = read_interactions(dat)
    assert d.item_ids == [661, 1193] and d.item_frequencies.tolist() == [1, 2]
    inter = tmp_path / "ml.inter"
    inter.write_text("user_id:token\titem_id:token\trating:float\n7\tb\t1\n8\ta\t1\n7\ta\t1\n")
    r = read_interactions(inter)
    assert r.item_ids == ["a", "b"] and r.item_frequencies.tolist() == [2, 1]
    assert [r.user_ids[u] for u in r.users] == [7, 8, 7]


def test_read_parquet_with_string_ids(tmp_path: Path) -> None:
    path = tmp_path / "log.parquet"
    pq.write_table(pa.table({"user_id": ["u1", "u2", "u1"], "item_id": ["z", "x", "x"]}), path)
    d = read_interactions(path)
    assert d.item_ids == ["x", "z"] and d.item_frequencies.tolist() == [2, 1]


def test_read_errors_name_the_problem(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not found"):
        read_interactions(tmp_path / "missing.csv")
    path = tmp_path / "items.csv"
    path.write_text("item_id,rating\n1,2\n3,4\n")
    with pytest.raises(InteractionsError, match="user"):
        read_interactions(path)
    with pytest.raises(InputError, match="data_format"):
        read_interactions(path, fmt="xlsx")
