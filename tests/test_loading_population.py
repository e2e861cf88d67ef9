"""The query population (auditor/loading/population.py): who is queried, by which vector,
with which training items excluded, whatever else the audit is asked."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from auditor.config import AuditConfig
from auditor.errors import IdMappingError, QueryError, setting
from auditor.loading import logs
from auditor.loading.population import load_population
from auditor.model import QueryPopulation
from auditor.model import InteractionPairs, ModelBundle

N_ITEMS = 6


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _bundle(tmp_path: Path, users: np.ndarray | None = None, **kwargs: object) -> ModelBundle:
    items = np.arange(1, N_ITEMS * 3 + 1, dtype=np.float32).reshape(N_ITEMS, 3)
    return ModelBundle(source=tmp_path / "model.npy", format="npy", item_table=items, user_table=users,
                       **kwargs)  # type: ignore[arg-type]


def _population(bundle: ModelBundle, **settings: object) -> QueryPopulation:
    config = AuditConfig(model=bundle.source, **settings)  # type: ignore[arg-type]
    return load_population(
        bundle, queries=config.queries, log=config.training_log, mapping=config.item_rows(bundle),
        row_ids=config.row_ids, max_queries=config.max_queries, seed=config.seed, keep_seen=config.keep_seen,
    )


def _seen(population: QueryPopulation) -> list[list[int]]:
    indptr, rows = population.seen_indptr, population.seen_rows
    assert indptr is not None and rows is not None
    return [rows[indptr[u] : indptr[u + 1]].tolist() for u in range(population.n_queries)]


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tiny record batches, so every streamed step meets several batches."""
    monkeypatch.setattr(logs, "BATCH_ROWS", 2)
    monkeypatch.setattr(logs, "CSV_BLOCK_BYTES", 64)


def test_history_population_from_the_log(tmp_path: Path, small_batches: None) -> None:
    train = _write(tmp_path / "train.csv", "user_id,item_id\n4,2\n9,1\n7,0\n4,2\n4,5\n7,8\n2,4\n")
    population = _population(_bundle(tmp_path), interactions=train)
    # Users in order of first appearance; item 8 has no row; user 4's repeated item 2 counts once.
    assert population.source == "history" and population.raw_ids.tolist() == [4, 9, 7, 2]
    assert _seen(population) == [[2, 5], [1], [0], [4]]
    table = _bundle(tmp_path).item_table
    np.testing.assert_allclose(population.vectors[0], table[[2, 5]].mean(axis=0))
    assert population.seen_items == "excluded" and population.exclude is not None
    kept = _population(_bundle(tmp_path), interactions=train, keep_seen=True)
    assert kept.seen_items == "kept" and kept.exclude is None and _seen(kept) == _seen(population)


def test_users_population_skips_untrained_rows_and_counts_them(tmp_path: Path) -> None:
    users = np.arange(1, 6 * 3 + 1, dtype=np.float32).reshape(6, 3)  # 6 user rows
    train = _write(tmp_path / "train.csv", "user_id,item_id\n5,1\n2,3\n5,4\n9,0\n2,2\n")  # user 9: no row
    bundle = _bundle(tmp_path, users, user_ids=np.arange(6))
    population = _population(bundle, interactions=train)
    assert population.source == "users"
    assert population.raw_ids.tolist() == [2, 5] and population.source_rows.tolist() == [2, 5]  # row order
    np.testing.assert_array_equal(population.vectors, users[[2, 5]])
    assert _seen(population) == [[2, 3], [1, 4]]
    assert (population.n_user_rows, population.n_untrained_rows, population.n_unmatched_users) == (6, 4, 1)
    assert any("4 user-table rows belong to users who never appear in the training log" in w
               for w in population.warnings)
    assert any("1 user of the training log" in w and "has no row in the user table" in w and "serve them nothing" in w
               for w in population.warnings)
    # User 9 (no row) is served nothing, as a zero vector is: a row after the queries, with
    # their training profile (their group reads it), never queried.
    assert population.unserved_ids.tolist() == [9] and population.row_ids.tolist() == [2, 5, 9]
    assert population.row_profiles is not None and population.row_profiles[1].tolist() == [2, 3, 1, 4, 0]
    assert (population.n_queries, population.n_rows, population.n_eligible, population.n_zero) == (2, 3, 3, 0)
    assert "for the 3 users in the training log" in population.description
    assert "(1 of them without a row: zero queries)" in population.description


def test_rowless_users_are_sampled_with_the_others_and_a_sample_of_them_alone_is_refused(tmp_path: Path) -> None:
    """The eligible users are the rows' users in row order, then the rowless ones: the sample
    draws among all of them; one that draws only rowless users has nothing to query."""
    users = np.arange(1, 4 * 3 + 1, dtype=np.float32).reshape(4, 3)
    users[1] = 0.0  # user 1's vector is zero: served nothing too, after the rowless users
    train = _write(tmp_path / "train.csv", "user_id,item_id\n8,1\n3,2\n0,3\n1,4\n9,5\n")  # 8, 9: no row
    bundle = _bundle(tmp_path, users, user_ids=np.arange(4))
    every = _population(bundle, interactions=train)
    assert every.eligible_ids.tolist() == [0, 1, 3, 8, 9] and every.raw_ids.tolist() == [0, 3]
    assert every.unserved_ids.tolist() == [8, 9, 1] and every.n_zero == 1 and every.n_unmatched_users == 2
    assert every.row_profiles is not None and every.row_profiles[1].tolist() == [3, 2, 1, 5, 4]
    picked = np.sort(np.random.default_rng(5).choice(5, size=3, replace=False))
    sample = _population(bundle, interactions=train, max_queries=3, seed=5)
    assert sample.row_ids is not None and sorted(sample.row_ids.tolist()) == sorted([0, 1, 3, 8, 9][i] for i in picked)
    seed = next(s for s in range(50) if set(np.random.default_rng(s).choice(5, size=2, replace=False)) == {3, 4})
    with pytest.raises(QueryError, match=rf"none of the 2 users sampled from .* with seed {seed} "
                                         r"has a row in the user table"):
        _population(bundle, interactions=train, max_queries=2, seed=seed)


def test_users_matched_through_user_ids_and_text_ids(tmp_path: Path) -> None:
    users = np.eye(4, 3, dtype=np.float32) + 1
    train = tmp_path / "train.parquet"  # user ids written as text, item ids as raw ids
    pq.write_table(pa.table({"user_id": ["b", "d", "b", "x"], "item_id": [12, 13, 14, 12]}), train)
    bundle = _bundle(tmp_path, users, user_ids=np.array(["a", "b", "c", "d"], dtype=object),
                     item_ids=np.array([10, 11, 12, 13, 14, 15]))
    population = _population(bundle, interactions=train)
    assert population.raw_ids.tolist() == ["b", "d"] and population.source_rows.tolist() == [1, 3]
    assert _seen(population) == [[2, 4], [3]]
    assert population.n_untrained_rows == 2 and population.n_unmatched_users == 1


def test_assumed_user_rows_are_checked(tmp_path: Path) -> None:
    users = np.ones((3, 3), dtype=np.float32)
    train = _write(tmp_path / "train.csv", "user_id,item_id\n1,1\n2,2\n3,3\n")  # 1-based user ids
    with pytest.raises(IdMappingError, match=re.escape(setting("id_offset")) + " 1"):
        _population(_bundle(tmp_path, users), interactions=train)
    shifted = _population(_bundle(tmp_path, users), interactions=train, id_offset=1)
    assert shifted.source_rows.tolist() == [0, 1, 2] and _seen(shifted) == [[0], [1], [2]]


def test_sampling_is_seeded_and_in_user_row_order(tmp_path: Path) -> None:
    users = np.random.default_rng(0).standard_normal((50, 3)).astype(np.float32)
    lines = "".join(f"{u},{u % N_ITEMS}\n" for u in range(49, -1, -1))
    train = _write(tmp_path / "train.csv", "user_id,item_id\n" + lines)
    a = _population(_bundle(tmp_path, users), interactions=train, max_queries=10, seed=3)
    b = _population(_bundle(tmp_path, users), interactions=train, max_queries=10, seed=3)
    picked = np.sort(np.random.default_rng(3).choice(50, size=10, replace=False))
    assert a.source_rows.tolist() == picked.tolist() == b.source_rows.tolist()
    assert a.sampled and a.n_eligible == 50 and "10 sampled with seed 3" in a.description


def test_without_the_log_every_user_row_is_queried(tmp_path: Path) -> None:
    users = np.ones((4, 3), dtype=np.float32)
    users[2] = 0.0
    population = _population(_bundle(tmp_path, users))
    assert population.source_rows.tolist() == [0, 1, 3] and population.n_zero == 1
    assert population.seen_items == "unknown" and population.exclude is None
    assert any("every row of the user table was queried" in w for w in population.warnings)
    assert any("1 of 4 query vectors are zero" in w for w in population.warnings)


def test_recorded_pairs_stand_in_for_the_log(tmp_path: Path) -> None:
    pairs = InteractionPairs(np.array([1, 1, 3, 0]), np.array([4, 0, 5, 5]),
                             np.array(["u0", "u1", "u2", "u3"], dtype=object))
    bundle = _bundle(tmp_path, train_pairs=pairs, item_frequencies=np.array([1, 1, 1, 1, 1, 5]))
    population = _population(bundle)
    assert population.raw_ids.tolist() == ["u0", "u1", "u3"] and _seen(population) == [[5], [0, 4], [5]]
    assert population.warnings[0].startswith(f"{bundle.source} records 4 of its 10 training interactions")


def test_query_file_has_no_identity(tmp_path: Path) -> None:
    np.save(tmp_path / "q.npy", np.ones((5, 3), dtype=np.float32))
    train = _write(tmp_path / "train.csv", "user_id,item_id\n1,1\n")
    population = _population(_bundle(tmp_path), interactions=train, queries=str(tmp_path / "q.npy"))
    assert population.source == "file" and population.raw_ids is None and population.seen_items == "unknown"
    assert "carry no user identity" in population.warnings[0]


def test_refusals(tmp_path: Path) -> None:
    with pytest.raises(QueryError, match="no user table"):
        _population(_bundle(tmp_path), queries="users")
    with pytest.raises(QueryError, match=re.escape(setting("interactions"))):
        _population(_bundle(tmp_path), queries="history")
    users = np.ones((2, 3), dtype=np.float32)
    users[1, 0] = np.nan
    with pytest.raises(QueryError, match="user table in .*model.npy holds NaN or infinite values \\(first at row 1, which is queried\\)"):
        _population(_bundle(tmp_path, users))
    train = _write(tmp_path / "train.csv", "user_id,item_id\na,1\n")
    with pytest.raises(IdMappingError, match="not integers"):
        _population(_bundle(tmp_path, np.ones((2, 3), dtype=np.float32)), interactions=train)


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_an_empty_user_id_is_no_user(tmp_path: Path, fmt: str) -> None:
    """Logs F3: one empty user id among integer ids was refused as "user ids ... are not
    integers"; it is an interaction without a user, as counting has it."""
    user_ids = [0, 1, None, 2, 1, 3]
    item_ids = [0, 1, 2, 3, 4, 5]
    if fmt == "parquet":
        train = tmp_path / "train.parquet"
        pq.write_table(pa.table({"user_id": pa.array(user_ids, pa.int64()), "item_id": item_ids}), train)
    else:
        rows = "".join(f"{'' if u is None else u},{i}\n" for u, i in zip(user_ids, item_ids))
        train = _write(tmp_path / "train.csv", "user_id,item_id\n" + rows)
    users = np.arange(1, 5 * 3 + 1, dtype=np.float32).reshape(5, 3)  # 5 user rows; row 4 untrained
    population = _population(_bundle(tmp_path, users), interactions=train)
    assert population.raw_ids.tolist() == [0, 1, 2, 3] and population.source_rows.tolist() == [0, 1, 2, 3]
    assert _seen(population) == [[0], [1, 4], [3], [5]]  # item 2 (the empty user's) is nobody's
    assert (population.n_untrained_rows, population.n_unmatched_users) == (1, 0)


def test_users_without_a_row_are_not_described_as_without_history(tmp_path: Path) -> None:
    """Logs F5: users beyond the user table (their items all have rows) were described as
    having "no interaction on a table row"; they are the unmatched users, said once."""
    users = np.arange(1, 4 * 3 + 1, dtype=np.float32).reshape(4, 3)  # 4 user rows
    # users 0..3 have rows; 5 and 6 do not; user 2 trained on item 9 alone, which has no row
    train = _write(tmp_path / "train.csv", "user_id,item_id\n0,0\n1,1\n2,9\n3,3\n5,4\n6,5\n")
    population = _population(_bundle(tmp_path, users), interactions=train, assume_row_ids=True)
    assert population.raw_ids.tolist() == [0, 1, 3] and population.n_unmatched_users == 2
    assert "(1 more user of it has no interaction on a table row)" in population.description
    assert any("2 users of the training log" in w and "no row in the user table" in w for w in population.warnings)


def test_recorded_pairs_keep_each_users_items_when_their_ids_are_in_another_order_than_the_table(
    tmp_path: Path,
) -> None:
    """The recorded pairs name users in their own order ("c", "a", "b"); the user table's rows
    are "a", "b", "c": each queried user keeps their own training items (c trained on 1 and 2,
    a on 3, b on 4), in user-row order."""
    pairs = InteractionPairs(np.array([0, 0, 1, 2]), np.array([1, 2, 3, 4]), np.array(["c", "a", "b"], dtype=object))
    users = np.arange(1, 10, dtype=np.float32).reshape(3, 3)
    bundle = _bundle(tmp_path, users, train_pairs=pairs, item_frequencies=np.array([0, 1, 1, 1, 1, 0]),
                     user_ids=np.array(["a", "b", "c"], dtype=object))
    population = _population(bundle)
    assert population.raw_ids.tolist() == ["a", "b", "c"]
    assert _seen(population) == [[3], [4], [1, 2]]
