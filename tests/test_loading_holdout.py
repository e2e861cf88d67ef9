"""Held-out logs (auditor/loading/holdout.py): formats, id mapping, counts, overlap with the
training items, checkpoint pairs, and every refusal."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from auditor.config import AuditConfig
from auditor.errors import IdMappingError, InteractionsError, setting
from auditor.loading import csr
from auditor.loading import holdout as ho
from auditor.loading import holdout_queries as hq
from auditor.loading import logs
from auditor.values import ItemRows
from auditor.values import RowIdPolicy
from auditor.values import LogSpec
from auditor.model import InteractionPairs, ModelBundle

N_ITEMS = 6


def _s(name: str) -> str:
    """How messages spell setting ``name`` (the CLI registers flags once it is imported)."""
    return re.escape(setting(name))


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _csr(users: ho.HeldOutUsers) -> list[list[int]]:
    return [users.item_rows[users.indptr[u] : users.indptr[u + 1]].tolist() for u in range(users.n)]


# user 7: items 3, 1, 3 (again); user 2: items 5, 9 (no row in a 6-row table); user 4: item 0
HOLDOUT_CSV = "user_id,item_id,rating\n7,3,5\n2,5,4\n7,1,3\n4,0,1\n2,9,2\n7,3,1\n"


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tiny record batches, so every batch-wise step meets several batches."""
    monkeypatch.setattr(logs, "BATCH_ROWS", 2)
    monkeypatch.setattr(logs, "CSV_BLOCK_BYTES", 64)


@pytest.mark.parametrize("batches", ["whole", "small"])
def test_csv_without_user_table(tmp_path: Path, request: pytest.FixtureRequest, batches: str) -> None:
    if batches == "small":
        request.getfixturevalue("small_batches")
    path = _write(tmp_path / "holdout.csv", HOLDOUT_CSV)
    held = ho.read_holdout(LogSpec(path), ItemRows(None, N_ITEMS))
    users = held.users
    assert users.raw_ids.tolist() == [7, 2, 4]  # order of first appearance
    assert users.user_rows.tolist() == [-1, -1, -1]  # no user table
    assert _csr(users) == [[1, 3], [5], [0]]  # distinct, ascending; item 9 dropped
    assert (held.n_interactions, held.n_dropped_items, held.n_empty_ids, held.n_dropped_users) == (6, 1, 0, 0)
    assert held.n_users_evaluated == 3 and held.n_dropped == 1
    assert held.warnings == [
        f"1 of the 6 held-out interactions in {path} (16.7%) have an item without a row in the item table; "
        "left out of the accuracy"
    ]


def test_parquet_through_item_ids_and_user_ids(tmp_path: Path) -> None:
    path = tmp_path / "holdout.parquet"
    pq.write_table(
        pa.table({"user": ["bo", "al", "zz", "bo", "al"], "sku": ["b", "a", "c", "x", "d"]}), path
    )
    item_ids = np.array(["d", "c", "b", "a", "e", "f"], dtype=object)  # raw id of each item row
    user_ids = np.array(["al", "bo", "cy"], dtype=object)  # raw id of each user row
    held = ho.read_holdout(
        LogSpec(path, user_col="user", item_col="sku"), ItemRows(item_ids, N_ITEMS), user_ids=user_ids, n_user_rows=3
    )
    assert held.users.raw_ids.tolist() == ["bo", "al"]
    assert held.users.user_rows.tolist() == [1, 0]
    assert _csr(held.users) == [[2], [0, 3]]  # bo: b; al: a, d ("x" has no row)
    assert (held.n_dropped_items, held.n_dropped_users, held.n_dropped_user_interactions) == (1, 1, 1)
    assert held.n_dropped == 2
    assert held.warnings[1].startswith("1 held-out user in") and held.warnings[1].endswith(
        "(1 interaction) has no row in the user table: left out of the accuracy")  # training users unknown: no why


def test_recbole_inter_file_with_user_table_rows(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "ml.test.inter",
        "user_id:token\titem_id:token\trating:float\n1\t2\t4.0\n0\t5\t3.0\n1\t4\t1.0\n",
    )
    held = ho.read_holdout(LogSpec(path), ItemRows(None, N_ITEMS), n_user_rows=2)
    assert held.users.raw_ids.tolist() == [1, 0]
    assert held.users.user_rows.tolist() == [1, 0]
    assert _csr(held.users) == [[2, 4], [5]]


def test_movielens_dat_with_one_based_ids(tmp_path: Path) -> None:
    path = _write(tmp_path / "ratings.dat", "1::6::5::978300760\n2::1::3::978302109\n1::3::4::978301968\n")
    held = ho.read_holdout(LogSpec(path), ItemRows(None, N_ITEMS, 1), n_user_rows=2, row_ids=RowIdPolicy(offset=1))
    assert held.users.user_rows.tolist() == [0, 1]
    assert _csr(held.users) == [[2, 5], [0]]


def test_empty_user_or_item_ids_are_counted(tmp_path: Path) -> None:
    path = _write(tmp_path / "holdout.csv", "user_id,item_id\n1,2\n,3\n1,\n2,4\n")
    held = ho.read_holdout(LogSpec(path), ItemRows(None, N_ITEMS))
    assert _csr(held.users) == [[2], [4]]
    assert (held.n_interactions, held.n_empty_ids, held.n_dropped) == (4, 2, 2)
    # Logs 2 N4: the column and data row of the first (was: neither)
    assert held.warnings == [f"2 held-out interactions in {path} have an empty user or item id ('user_id' column, first at data row 2)"]


def test_assumed_user_rows_with_assume_row_ids_drop_the_users_beyond(tmp_path: Path) -> None:
    path = _write(tmp_path / "holdout.csv", "user_id,item_id\n0,1\n5,2\n1,3\n")
    held = ho.read_holdout(
        LogSpec(path), ItemRows(None, N_ITEMS), n_user_rows=2, row_ids=RowIdPolicy(assume_row_ids=True)
    )
    assert held.users.user_rows.tolist() == [0, 1]
    assert (held.n_dropped_users, held.n_dropped_user_interactions) == (1, 1)


# ---------------------------------------------------------------- refusals


def test_empty_holdout(tmp_path: Path) -> None:
    path = _write(tmp_path / "holdout.csv", "user_id,item_id\n")
    with pytest.raises(InteractionsError, match=rf"the held-out log {path} \({_s('holdout')}\) holds no interactions"):
        ho.read_holdout(LogSpec(path), ItemRows(None, N_ITEMS))


def test_no_held_out_item_has_a_row(tmp_path: Path) -> None:
    path = _write(tmp_path / "holdout.csv", "user_id,item_id\n1,10\n2,11\n")
    with pytest.raises(IdMappingError, match=rf"no item id of the held-out log {path} \({_s('holdout')}\) \(column 'item_id'\)"
                       rf".*6-row item table when mapped taken as row numbers: pass {_s('item_ids')} FILE"):
        ho.read_holdout(LogSpec(path), ItemRows(None, N_ITEMS))
    item_ids = np.array([100, 101, 102, 103, 104, 105])
    with pytest.raises(IdMappingError, match=rf"mapped through {_s('item_ids')}: the holdout must come from the model's catalogue"):
        ho.read_holdout(LogSpec(path), ItemRows(item_ids, N_ITEMS))


def test_text_item_ids_without_item_ids(tmp_path: Path) -> None:
    path = _write(tmp_path / "holdout.csv", "user_id,item_id\n1,a\n")
    with pytest.raises(IdMappingError, match=rf"item ids in {path} are not integers.*pass {_s('item_ids')} FILE"):
        ho.read_holdout(LogSpec(path), ItemRows(None, N_ITEMS))


def test_users_beyond_the_user_table_without_user_ids(tmp_path: Path) -> None:
    path = _write(tmp_path / "holdout.csv", "user_id,item_id\n" + "".join(f"{u},1\n" for u in range(100, 140)))
    with pytest.raises(IdMappingError, match=rf"40 of the 40 distinct user ids in {path} have no row.*"
                       rf"2-row user table.*Pass {_s('user_ids')} FILE with the raw user id of each table row"):
        ho.read_holdout(LogSpec(path), ItemRows(None, N_ITEMS), n_user_rows=2)


def test_new_users_past_the_user_table_are_dropped_and_counted_not_refused(tmp_path: Path) -> None:
    """With the training users known, only they are evidence on the assumed row mapping: a
    held-out user past the table who never trained (user 2 on a 2-row table) is dropped and
    counted like a new item id, while the same id among the training users is refused."""
    path = _write(tmp_path / "holdout.csv", "user_id,item_id\n0,1\n2,3\n1,2\n2,4\n")
    held = ho.read_holdout(LogSpec(path), ItemRows(None, N_ITEMS), n_user_rows=2, trained_ids=np.array([1, 0]))
    assert held.users.raw_ids.tolist() == [0, 1] and held.users.user_rows.tolist() == [0, 1]
    assert _csr(held.users) == [[1], [2]]
    assert (held.n_dropped_users, held.n_dropped_user_interactions, held.n_dropped) == (1, 2, 2)
    assert held.warnings == [f"1 held-out user in {path} (2 interactions) has no row in the user table and never "
                             "appears in the training log on an item with a table row (nothing trained; a training "
                             "user without a row counts as a miss instead): left out of the accuracy"]
    with pytest.raises(IdMappingError, match=rf"1 of the 2 distinct user ids in {path} have no row.*2-row user table"):
        ho.read_holdout(LogSpec(path), ItemRows(None, N_ITEMS), n_user_rows=2, trained_ids=np.array([0, 2]))


def test_trained_users_without_a_row_are_kept_as_misses(tmp_path: Path) -> None:
    """A held-out user who trained but has no user-table row ("cy" beside rows al, bo) is
    kept (row -1): the population serves them nothing, so they count as a miss; one who
    never trained ("dee") is still dropped and counted."""
    path = _write(tmp_path / "holdout.csv", "user,item\nbo,1\ncy,2\ndee,3\ncy,4\n")
    held = ho.read_holdout(LogSpec(path, user_col="user", item_col="item"), ItemRows(None, N_ITEMS),
                           user_ids=np.array(["al", "bo"], dtype=object), n_user_rows=2,
                           trained_ids=np.array(["al", "bo", "cy"], dtype=object))
    assert held.users.raw_ids.tolist() == ["bo", "cy"] and held.users.user_rows.tolist() == [1, -1]
    assert _csr(held.users) == [[1], [2, 4]]
    assert (held.n_dropped_users, held.n_dropped_user_interactions) == (1, 1)


def test_text_user_ids_without_user_ids(tmp_path: Path) -> None:
    path = _write(tmp_path / "holdout.csv", "user_id,item_id\nalice,1\n")
    with pytest.raises(IdMappingError, match=rf"user ids of {path} \(column 'user_id'\) are not integers.*"
                       rf"pass {_s('user_ids')} FILE with the raw user id of each user-table row"):
        ho.read_holdout(LogSpec(path), ItemRows(None, N_ITEMS), n_user_rows=2)


def test_no_holdout_user_among_the_user_ids(tmp_path: Path) -> None:
    path = _write(tmp_path / "holdout.csv", "user_id,item_id\nalice,1\n")
    with pytest.raises(IdMappingError, match=r"none of the 1 user ids of .* is among the raw ids of the user table's "
                       rf"rows \({_s('user_ids')}\)"):
        ho.read_holdout(LogSpec(path), ItemRows(None, N_ITEMS), user_ids=np.array(["bob", "cy"], dtype=object),
                        n_user_rows=2)
    with pytest.raises(IdMappingError, match="3 user ids for a user table of 2 rows"):
        ho.read_holdout(LogSpec(path), ItemRows(None, N_ITEMS), user_ids=np.array([1, 2, 3]), n_user_rows=2)


def test_no_user_column(tmp_path: Path) -> None:
    path = _write(tmp_path / "holdout.csv", "item_id\n1\n2\n")
    with pytest.raises(InteractionsError, match=rf"held-out accuracy needs the user of each interaction, but no user "
                       rf"id column was found in {path}.*Pass {_s('user_col')} NAME"):
        ho.read_holdout(LogSpec(path), ItemRows(None, N_ITEMS))


# ---------------------------------------------------------------- overlap with the training items


def _seen(*sets: list[int]) -> hq.SeenItems:
    indptr = np.concatenate(([0], np.cumsum([len(x) for x in sets]))).astype(np.int64)
    return hq.SeenItems(indptr, np.array([r for x in sets for r in x], dtype=np.int64), "train.csv")


def test_overlap_warnings(tmp_path: Path) -> None:
    path = _write(tmp_path / "holdout.csv", "user_id,item_id\n1,2\n1,3\n2,4\n")
    held = ho.read_holdout(LogSpec(path), ItemRows(None, N_ITEMS))
    [identical] = hq.overlap_warnings(held.users, _seen([2, 3], [4]), str(path), keep_seen=False)
    assert identical.startswith(f"the holdout {path} is identical to the training log train.csv for its 2 users: "
                                "accuracy on training data says nothing")
    assert identical.endswith("excluded from the candidates as training items, they can never be hit")
    [subset] = hq.overlap_warnings(held.users, _seen([2, 3], [4, 5]), str(path), keep_seen=True)
    assert " is a subset of the training log " in subset and subset.endswith(f"(kept among the candidates with {setting('keep_seen')})")
    [partial] = hq.overlap_warnings(held.users, _seen([3], [5]), str(path), keep_seen=False)
    assert partial.startswith(f"1 of the 3 held-out (user, item) pairs in {path} (33.3%) also appear in the training")
    assert hq.overlap_warnings(held.users, _seen([4], [2]), str(path), keep_seen=False) == []


def test_a_recorded_holdout_found_whole_in_the_log_given_is_refused(tmp_path: Path) -> None:
    """A retrain checkpoint audited beside the whole log it was split from: every recorded
    held-out pair is in that log, so it would count as training and accuracy read 0 for
    every scoring (with advice to check the ids). Refused, saying what to pass; a partial
    overlap stays a warning, and a user-given holdout inside the log stays a warning."""
    path = _write(tmp_path / "holdout.csv", "user_id,item_id\n1,2\n1,3\n2,4\n")
    held = ho.read_holdout(LogSpec(path), ItemRows(None, N_ITEMS))
    with pytest.raises(InteractionsError, match=r"holds every held-out pair of m\.pt \(recorded holdout\) \(3 for "
                       r"its 2 users\): it is the whole log .* Leave out " + _s("interactions")):
        hq.overlap_warnings(held.users, _seen([2, 3, 7], [4]), "m.pt (recorded holdout)", keep_seen=False, recorded=True)
    [partial] = hq.overlap_warnings(held.users, _seen([3], [5]), "m.pt (recorded holdout)", keep_seen=False,
                                    recorded=True)
    assert partial.startswith("1 of the 3 held-out (user, item) pairs")


# ---------------------------------------------------------------- checkpoint pairs and the audit's entry points


def _recorded(users: list[int], items: list[int], n_users: int = 4) -> InteractionPairs:
    """Pairs as a popaudit checkpoint records them: user-table rows, raw ids per row."""
    return InteractionPairs(np.array(users), np.array(items), np.array([f"u{r}" for r in range(n_users)], dtype=object))


def test_checkpoint_pairs() -> None:
    pairs = _recorded([2, 0, 2, 2], [5, 1, 0, 5])  # users 1 and 3 have no held-out pair
    user_ids = np.array(["u0", "u1", "u2", "u3"], dtype=object)
    held = ho.holdout_from_pairs(pairs, user_ids=user_ids, n_user_rows=4, source="model.pt (recorded holdout)")
    assert held.users.raw_ids.tolist() == ["u0", "u2"]
    assert held.users.user_rows.tolist() == [0, 2]
    assert _csr(held.users) == [[1], [0, 5]]
    assert (held.n_interactions, held.n_dropped) == (4, 0)
    with pytest.raises(InteractionsError, match="the held-out pairs recorded in model.pt are empty"):
        ho.holdout_from_pairs(_recorded([], []), user_ids=user_ids, n_user_rows=4, source="model.pt")


def test_load_holdout_from_the_audit_settings(tmp_path: Path) -> None:
    holdout = _write(tmp_path / "holdout.csv", "user_id,item_id\n2,3\n1,1\n2,6\n")  # 1-based ids
    bundle = ModelBundle(
        source=tmp_path / "model.npy", format="npy",
        item_table=np.eye(N_ITEMS, 3, dtype=np.float32), user_table=np.ones((3, 3), dtype=np.float32),
    )
    config = AuditConfig(model=bundle.source, holdout=holdout, id_offset=1)
    held = ho.load_holdout(bundle, config, n_user_rows=3)
    assert held.users.user_rows.tolist() == [1, 0] and _csr(held.users) == [[2, 5], [0]]
    by_id = ho.load_holdout(bundle, config, n_user_rows=None)  # history queries: users by raw id
    assert by_id.users.raw_ids.tolist() == [2, 1] and by_id.users.user_rows.tolist() == [-1, -1]
    recorded = ModelBundle(source=tmp_path / "m.pt", format="popaudit", item_table=bundle.item_table,
                           holdout_pairs=_recorded([1, 3], [0, 2]))
    from_pairs = ho.load_holdout(recorded, AuditConfig(model=recorded.source), n_user_rows=None)
    assert from_pairs.source == f"{recorded.source} (recorded holdout)" and _csr(from_pairs.users) == [[0], [2]]


# ---------------------------------------------------------------- helpers


def test_csr_helpers_and_mean_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    indptr, values = csr.build_csr(np.array([2, 0, 2, 2, 0]), np.array([9, 4, 1, 9, 4]), 4)
    assert indptr.tolist() == [0, 1, 1, 3, 3] and values.tolist() == [4, 1, 9]
    new, taken = csr.take_csr(indptr, values, np.array([2, 1, 0, 2]))
    assert new.tolist() == [0, 2, 2, 3, 5] and taken.tolist() == [1, 9, 4, 1, 9]
    table = np.arange(12, dtype=np.float32).reshape(4, 3)
    means = csr.mean_rows(table, np.array([0, 2, 2, 3]), np.array([0, 2, 3]))
    np.testing.assert_array_equal(means, [[3, 4, 5], [0, 0, 0], [9, 10, 11]])
    assert means.dtype == np.float32
    monkeypatch.setattr(csr, "GATHER_ROWS", 2)  # user 0's rows split across gathers
    spans = csr.mean_rows(table, np.array([0, 3, 3, 4]), np.array([0, 1, 3, 2]))
    np.testing.assert_array_equal(spans, [[4, 5, 6], [0, 0, 0], [6, 7, 8]])
    users = ho.HeldOutUsers(np.array([5, 6, 7]), np.array([0, 1, 2]), np.array([0, 1, 3, 4]), np.array([2, 0, 1, 5]))
    sub = users.subset(np.array([2, 1]))
    assert sub.raw_ids.tolist() == [7, 6] and sub.user_rows.tolist() == [2, 1] and _csr(sub) == [[5], [0, 1]]


@pytest.mark.parametrize("largest", [50, 2**62])  # a packed-key sort, and a key that would overflow
def test_build_csr_sets_are_distinct_and_ascending_either_way(largest: int) -> None:
    rng = np.random.default_rng(7)
    owner = rng.integers(0, 30, 2_000).astype(np.int32)
    values = rng.integers(0, 50, 2_000)
    values[::97] = largest
    indptr, got = csr.build_csr(owner, values, 31)
    want = [sorted({int(v) for o, v in zip(owner, values) if o == u}) for u in range(31)]
    assert [got[indptr[u]:indptr[u + 1]].tolist() for u in range(31)] == want
    assert got.dtype == np.int64 and indptr[-1] == sum(map(len, want))
    empty_ptr, empty = csr.build_csr(np.zeros(0, np.int64), np.zeros(0, np.int64), 3)
    assert empty_ptr.tolist() == [0, 0, 0, 0] and empty.size == 0


def test_a_missing_held_out_file_is_called_a_held_out_log(tmp_path: Path) -> None:
    """QA F9: a batch row whose holdout was not found said "interaction log not found"."""
    from auditor.errors import InputError

    with pytest.raises(InputError, match=r"^held-out log not found: .*gone\.parquet$"):
        ho.read_holdout(LogSpec(tmp_path / "gone.parquet"), ItemRows(None, N_ITEMS))
