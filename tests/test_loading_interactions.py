"""Interaction logs: formats, column detection, streaming counts, alignment, pairs."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from auditor.errors import IdMappingError, InputError, InteractionsError
from auditor.loading import align_counts, count_item_ids, read_pairs
from auditor.loading import counting, logs, merging
from auditor.values import ItemRows
from auditor.values import LogSpec
from auditor.progress import Progress

# user, item, rating, timestamp: items 3 (x3, users 1 2 3), 5 (x2, user 1 twice), 8 (x1)
ROWS = [(1, 3, 5, 100), (1, 5, 4, 101), (2, 3, 3, 102), (1, 5, 2, 103), (3, 3, 1, 104), (2, 8, 5, 105)]


def _check_counts(c, item_col: str, user_col: str | None) -> None:
    assert c.ids.dtype == np.int64 and c.ids.tolist() == [3, 5, 8]
    assert c.counts.tolist() == [3, 2, 1]
    assert c.n_interactions == 6
    assert (c.item_col, c.user_col) == (item_col, user_col)
    if user_col is not None:
        assert c.user_counts.tolist() == [3, 1, 1]
        assert c.n_users == 3


@pytest.fixture
def small_batches(monkeypatch):
    """Many tiny batches and frequent merges, so streaming and merging are exercised."""
    monkeypatch.setattr(logs, "BATCH_ROWS", 7)
    monkeypatch.setattr(merging, "MERGE_ROWS", 16)
    monkeypatch.setattr(logs, "CSV_BLOCK_BYTES", 64)


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# ---------------------------------------------------------------- formats


def test_parquet(tmp_path):
    u, i, r, t = zip(*ROWS)
    path = tmp_path / "log.parquet"
    pq.write_table(pa.table({"user_id": u, "item_id": i, "rating": r}), path)
    c = count_item_ids(LogSpec(path))
    _check_counts(c, "item_id", "user_id")
    assert c.format == "parquet" and c.source == path


def test_parquet_explicit_format(tmp_path):
    u, i, r, t = zip(*ROWS)
    path = tmp_path / "log.data"
    pq.write_table(pa.table({"userId": u, "movieId": i}), path)
    _check_counts(count_item_ids(LogSpec(path, fmt="parquet")), "movieId", "userId")


def test_csv_explicit_format(tmp_path):
    text = "user_id,item_id\n" + "".join(f"{a},{b}\n" for a, b, _, _ in ROWS)
    c = count_item_ids(LogSpec(_write(tmp_path / "log.txt", text), fmt="csv"))
    _check_counts(c, "item_id", "user_id")
    assert c.format == "csv"


def test_headerless_csv_two_columns_and_one_column(tmp_path):
    two = _write(tmp_path / "pairs.csv", "".join(f"{a},{b}\n" for a, b, _, _ in ROWS))
    _check_counts(count_item_ids(LogSpec(two)), "item_id", "user_id")
    one = count_item_ids(LogSpec(_write(tmp_path / "items.csv", "3\n3\n5\n3\n5\n8\n")))
    assert one.ids.tolist() == [3, 5, 8] and one.counts.tolist() == [3, 2, 1] and one.user_col is None


def test_parquet_without_extension_is_sniffed(tmp_path):
    u, i, r, t = zip(*ROWS)
    path = tmp_path / "log.bin"
    pq.write_table(pa.table({"uid": u, "iid": i}), path)
    _check_counts(count_item_ids(LogSpec(path)), "iid", "uid")


def test_movielens_ratings_csv(tmp_path):
    text = "userId,movieId,rating,timestamp\n" + "".join(f"{a},{b},{c}.0,{d}\n" for a, b, c, d in ROWS)
    c = count_item_ids(LogSpec(_write(tmp_path / "ratings.csv", text)))
    _check_counts(c, "movieId", "userId")
    assert c.format == "csv"


@pytest.mark.parametrize("delimiter", ["\t", ";", "|"])
def test_delimited_with_header(tmp_path, delimiter):
    text = delimiter.join(["User", "Item", "Rating"]) + "\n"
    text += "".join(delimiter.join(map(str, row[:3])) + "\n" for row in ROWS)
    _check_counts(count_item_ids(LogSpec(_write(tmp_path / "log.txt", text))), "Item", "User")


def test_tsv_explicit(tmp_path):
    text = "customer_id\tproduct_id\n" + "".join(f"{a}\t{b}\n" for a, b, _, _ in ROWS)
    c = count_item_ids(LogSpec(_write(tmp_path / "log.data", text), fmt="tsv"))
    _check_counts(c, "product_id", "customer_id")
    assert c.format == "tsv"


@pytest.mark.parametrize("fmt", ["auto", "movielens"])
def test_movielens_u_data(tmp_path, fmt):
    text = "".join(f"{a}\t{b}\t{c}\t{d}\n" for a, b, c, d in ROWS)
    c = count_item_ids(LogSpec(_write(tmp_path / "u.data", text), fmt=fmt))
    _check_counts(c, "item_id", "user_id")
    assert c.format == "movielens"


@pytest.mark.parametrize("fmt", ["auto", "movielens"])
def test_movielens_ratings_dat(tmp_path, fmt, small_batches):
    text = "".join(f"{a}::{b}::{c}::{d}\n" for a, b, c, d in ROWS * 5)
    c = count_item_ids(LogSpec(_write(tmp_path / "ratings.dat", text), fmt=fmt))
    assert c.ids.tolist() == [3, 5, 8] and c.counts.tolist() == [15, 10, 5]
    assert c.user_counts.tolist() == [3, 1, 1] and c.n_users == 3
    assert c.format == "movielens"


def test_ratings_dat_column_override_and_string_ids(tmp_path):
    text = "".join(f"{a}::m{b}::{c}::{d}\n" for a, b, c, d in ROWS)
    c = count_item_ids(LogSpec(_write(tmp_path / "ratings.dat", text)))
    assert c.ids.tolist() == ["m3", "m5", "m8"] and c.counts.tolist() == [3, 2, 1]
    by_rating = count_item_ids(LogSpec(tmp_path / "ratings.dat", user_col="user_id", item_col="rating"))
    assert by_rating.ids.tolist() == [1, 2, 3, 4, 5] and by_rating.counts.tolist() == [1, 1, 1, 1, 2]


def test_ratings_dat_bad_line(tmp_path):
    path = _write(tmp_path / "ratings.dat", "1::2::5::9\n1;2;5;9\n")
    with pytest.raises(InteractionsError, match=r"line 2 of .*ratings.dat has fewer than 2 '::'-separated fields"):
        count_item_ids(LogSpec(path))


@pytest.mark.parametrize("fmt", ["auto", "recbole"])
def test_recbole_inter(tmp_path, fmt):
    text = "user_id:token\titem_id:token\trating:float\ttimestamp:float\n"
    text += "".join(f"{a}\t{b}\t{c}\t{d}\n" for a, b, c, d in ROWS)
    name = "ml.inter" if fmt == "auto" else "ml.tsv"
    c = count_item_ids(LogSpec(_write(tmp_path / name, text), fmt=fmt))
    _check_counts(c, "item_id", "user_id")
    assert c.format == "recbole"


def test_recbole_column_override_uses_stripped_names(tmp_path):
    text = "session:token\tsku:token\n" + "".join(f"{a}\t{b}\n" for a, b, _, _ in ROWS)
    c = count_item_ids(LogSpec(_write(tmp_path / "x.inter", text), user_col="session", item_col="sku"))
    _check_counts(c, "sku", "session")


def test_gzip_csv(tmp_path):
    text = "user_id,item_id\n" + "".join(f"{a},{b}\n" for a, b, _, _ in ROWS)
    path = tmp_path / "log.csv.gz"
    path.write_bytes(gzip.compress(text.encode()))
    _check_counts(count_item_ids(LogSpec(path)), "item_id", "user_id")


# ---------------------------------------------------------------- columns


def test_column_overrides(tmp_path):
    text = "who,what,user_id,item_id\n" + "".join(f"{a},{b},0,0\n" for a, b, _, _ in ROWS)
    path = _write(tmp_path / "log.csv", text)
    _check_counts(count_item_ids(LogSpec(path, user_col="who", item_col="what")), "what", "who")
    _check_counts(count_item_ids(LogSpec(path, user_col="WHO", item_col="What")), "what", "who")  # case-insensitive
    assert count_item_ids(LogSpec(path)).ids.tolist() == [0]  # auto-detection picks item_id


def test_missing_override_column_lists_columns(tmp_path):
    path = _write(tmp_path / "log.csv", "user_id,item_id,rating\n1,2,3\n")
    with pytest.raises(InteractionsError, match=r"item column 'sku' is not in .*log.csv; columns found: user_id, item_id, rating"):
        count_item_ids(LogSpec(path, item_col="sku"))
    with pytest.raises(InteractionsError, match=r"user column 'customer' is not in"):
        count_item_ids(LogSpec(path, user_col="customer"))


def test_no_item_column_lists_the_columns_of_a_header(tmp_path):
    path = tmp_path / "log.parquet"
    pq.write_table(pa.table({"customer_id": [1], "sku_code": [2]}), path)
    with pytest.raises(InteractionsError, match=r"cannot find an item id column in .*; columns found: customer_id, sku_code\. Pass item_col"):
        count_item_ids(LogSpec(path))


def test_a_headerless_data_line_is_never_echoed(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text("alice,hunter2\nbob,letmein\n")
    with pytest.raises(InteractionsError, match=r"2 fields that do not look like a header") as err:
        count_item_ids(LogSpec(path))
    assert "alice" not in str(err.value) and "hunter2" not in str(err.value)


def test_no_user_column_counts_items_only(tmp_path):
    path = _write(tmp_path / "log.csv", "item,weight\n3,1\n3,1\n4,1\n")
    c = count_item_ids(LogSpec(path))
    assert c.ids.tolist() == [3, 4] and c.counts.tolist() == [2, 1]
    assert c.user_col is None and c.user_counts is None and c.n_users is None


def test_need_users_false(tmp_path):
    u, i, _, _ = zip(*ROWS)
    path = tmp_path / "log.parquet"
    pq.write_table(pa.table({"user": u, "item": i}), path)
    c = count_item_ids(LogSpec(path), need_users=False)
    assert c.user_counts is None and c.n_users == 3 and c.counts.tolist() == [3, 2, 1]


# ---------------------------------------------------------------- bad logs


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match=r"^interaction log not found: .*nope.csv$"):
        count_item_ids(LogSpec(tmp_path / "nope.csv"))


@pytest.mark.parametrize("text", ["", "user_id,item_id\n"])
def test_empty_csv(tmp_path, text):
    with pytest.raises(InteractionsError, match="no interactions in .*log.csv"):
        count_item_ids(LogSpec(_write(tmp_path / "log.csv", text)))


def test_empty_parquet(tmp_path):
    path = tmp_path / "log.parquet"
    pq.write_table(pa.table({"user_id": pa.array([], pa.int64()), "item_id": pa.array([], pa.int64())}), path)
    with pytest.raises(InteractionsError, match="no interactions in"):
        count_item_ids(LogSpec(path))


def test_null_item_ids_are_skipped_and_counted(tmp_path):
    path = tmp_path / "log.parquet"
    pq.write_table(pa.table({"user_id": [1, 2, 3, None], "item_id": [7, None, 7, 8]}), path)
    c = count_item_ids(LogSpec(path))
    assert c.ids.tolist() == [7, 8] and c.counts.tolist() == [2, 1]
    assert c.n_null_items == 1 and c.n_interactions == 3
    assert c.user_counts.tolist() == [2, 0]  # the row with no user still counts as an interaction
    assert c.n_users == 2  # users of counted rows only: user 2's row had no item


def test_all_item_ids_null(tmp_path):
    path = _write(tmp_path / "log.csv", "user_id,item_id\n1,\n2,\n")
    with pytest.raises(InteractionsError, match=r"no interactions in .* \(2 rows, every item id empty\)"):
        count_item_ids(LogSpec(path))


def test_unknown_format(tmp_path):
    path = _write(tmp_path / "log.csv", "user_id,item_id\n1,2\n")
    with pytest.raises(InteractionsError, match="unknown interactions format 'xlsx'"):
        count_item_ids(LogSpec(path, fmt="xlsx"))


# ---------------------------------------------------------------- streaming


def _zipf_log(n_rows: int, n_items: int, n_users: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    items = np.minimum(rng.zipf(1.3, n_rows) - 1, n_items - 1).astype(np.int64)
    users = rng.integers(0, n_users, n_rows)
    return users, items


def _numpy_counts(users, items):
    ids, counts = np.unique(items, return_counts=True)
    pairs = np.unique(np.stack([items, users], axis=1), axis=0)
    pair_ids, per_item_users = np.unique(pairs[:, 0], return_counts=True)
    assert (pair_ids == ids).all()
    return ids, counts, per_item_users


def test_streaming_parquet_counts_match_numpy(tmp_path, small_batches):
    users, items = _zipf_log(3000, 400, 90)
    path = tmp_path / "log.parquet"
    pq.write_table(pa.table({"user_id": users, "item_id": items}), path, row_group_size=50)
    assert pq.ParquetFile(path).metadata.num_row_groups == 60

    class Recorder(Progress):
        def __init__(self):
            self.calls = []

        def track(self, description, total=None):
            self.calls.append((description, total))
            return super().track(description, total)

    rec = Recorder()
    c = count_item_ids(LogSpec(path), progress=rec)
    ids, counts, per_item_users = _numpy_counts(users, items)
    np.testing.assert_array_equal(c.ids, ids)
    np.testing.assert_array_equal(c.counts, counts)
    np.testing.assert_array_equal(c.user_counts, per_item_users)
    assert c.n_interactions == 3000 and c.n_users == len(np.unique(users))
    assert rec.calls == [("Counting interactions", 3000)]


def test_streaming_csv_counts_match_numpy(tmp_path, small_batches):
    users, items = _zipf_log(1500, 200, 40, seed=1)
    path = _write(tmp_path / "log.csv", "user_id,item_id\n" + "".join(f"{u},{i}\n" for u, i in zip(users, items)))
    c = count_item_ids(LogSpec(path))
    ids, counts, per_item_users = _numpy_counts(users, items)
    np.testing.assert_array_equal(c.ids, ids)
    np.testing.assert_array_equal(c.counts, counts)
    np.testing.assert_array_equal(c.user_counts, per_item_users)


def test_string_ids_after_integer_blocks_are_reread_as_strings(tmp_path, small_batches):
    lines = [f"{u},{i}" for u, i in [(1, 1), (1, 2), (2, 1)] * 20] + ["3,sku-9"]
    c = count_item_ids(LogSpec(_write(tmp_path / "log.csv", "user_id,item_id\n" + "\n".join(lines) + "\n")))
    assert c.ids.dtype == object and c.ids.tolist() == ["1", "2", "sku-9"]
    assert c.counts.tolist() == [40, 20, 1]
    assert c.user_counts.tolist() == [2, 1, 1] and c.n_users == 3


def test_string_users_after_integer_blocks_keep_integer_items(tmp_path, small_batches):
    lines = [f"{u},{i}" for u, i in [(1, 0), (1, 2), (2, 0)] * 20] + ["guest,2"]
    path = _write(tmp_path / "log.csv", "user_id,item_id\n" + "\n".join(lines) + "\n")
    c = count_item_ids(LogSpec(path))
    assert c.ids.dtype == np.int64 and c.ids.tolist() == [0, 2] and c.counts.tolist() == [40, 21]
    assert c.user_counts.tolist() == [2, 2]
    p = read_pairs(LogSpec(path), ItemRows(None, 3))
    assert p.user_ids.tolist() == ["1", "2", "guest"] and p.item_rows.tolist()[-2:] == [0, 2]


def test_ids_that_cannot_be_packed_switch_pair_sets(tmp_path, small_batches):
    users, items = _zipf_log(400, 50, 30, seed=2)
    items[300:] -= 60  # later batches hold negative ids: packed (user, item) keys no longer fit
    users[350] = 2**40
    path = tmp_path / "log.parquet"
    pq.write_table(pa.table({"user_id": users, "item_id": items}), path, row_group_size=25)
    c = count_item_ids(LogSpec(path))
    ids, counts, per_item_users = _numpy_counts(users, items)
    np.testing.assert_array_equal(c.ids, ids)
    np.testing.assert_array_equal(c.counts, counts)
    np.testing.assert_array_equal(c.user_counts, per_item_users)


# ---------------------------------------------------------------- alignment


def _counts(ids, counts, user_counts=None):
    return counting.IdCounts(
        ids=np.asarray(ids),
        counts=np.asarray(counts, dtype=np.int64),
        user_counts=None if user_counts is None else np.asarray(user_counts, dtype=np.int64),
        n_interactions=int(np.sum(counts)),
        n_users=4,
        source=Path("log.csv"),
        user_col="user_id",
        item_col="item_id",
    )


def test_align_row_index_is_id_and_unmapped_counted():
    c = _counts([-1, 0, 2, 4, 5, 9], [1, 10, 20, 40, 50, 90], [1, 1, 2, 3, 4, 4])
    s = align_counts(c, ItemRows(None, 5))
    assert s.frequencies.tolist() == [10, 0, 20, 0, 40]
    assert s.user_counts.tolist() == [1, 0, 2, 0, 3]
    assert s.n_unmapped == 1 + 50 + 90 and s.n_unmapped_ids == 3
    assert s.n_interactions == 211 and s.n_users == 4


def test_align_string_ids_need_item_ids():
    with pytest.raises(IdMappingError, match=r"not integers, .*pass item_ids"):
        align_counts(_counts(np.array(["a", "b"], dtype=object), [1, 2]), ItemRows(None, 5))


def test_align_with_item_ids():
    c = _counts(np.array(["x", "y", "z", "q"], dtype=object), [5, 6, 7, 8])
    s = align_counts(c, ItemRows(np.array(["z", "w", "x"], dtype=object), 3))
    assert s.frequencies.tolist() == [7, 0, 5]
    assert s.n_unmapped == 6 + 8 and s.n_unmapped_ids == 2


def test_align_integer_log_with_string_item_ids():
    s = align_counts(_counts([10, 20, 30], [1, 2, 3]), ItemRows(np.array(["30", "10", "99"], dtype=object), 3))
    assert s.frequencies.tolist() == [3, 1, 0] and s.n_unmapped == 2


def test_counts_realign_to_many_tables(tmp_path):
    path = _write(tmp_path / "log.csv", "user_id,item_id\n1,0\n1,1\n2,1\n2,2\n")
    c = count_item_ids(LogSpec(path))
    assert align_counts(c, ItemRows(None, 3)).frequencies.tolist() == [1, 2, 1]
    assert align_counts(c, ItemRows(np.array([2, 1, 0]), 3)).frequencies.tolist() == [1, 2, 1][::-1]
    two = align_counts(c, ItemRows(None, 2))
    assert two.frequencies.tolist() == [1, 2] and two.n_unmapped == 1


# ---------------------------------------------------------------- pairs


def test_read_pairs_dense_users_in_order_of_first_appearance(tmp_path):
    text = "user_id,item_id\nu9,1\nu2,0\nu9,7\nu5,2\nu2,2\n"
    p = read_pairs(LogSpec(_write(tmp_path / "log.csv", text)), ItemRows(None, 3))
    assert p.user_ids.tolist() == ["u9", "u2", "u5"]
    assert p.user_index.tolist() == [0, 1, 2, 1]  # (u9, 7) dropped: no row 7
    assert p.item_rows.tolist() == [1, 0, 2, 2]
    assert len(p) == 4


def test_read_pairs_block_whose_user_ids_are_all_empty(tmp_path, small_batches):
    # The first CSV blocks hold no user id at all: the log is re-read as text and those
    # blocks add no pair, instead of failing as "item ids are not integers".
    log = tmp_path / "log.csv"
    log.write_text("item_id,user_id\n" + "5,\n" * 40 + "5,7\n6,8\n5,8\n")
    pairs = read_pairs(LogSpec(log), ItemRows(None, 10))
    assert pairs.item_rows.tolist() == [5, 6, 5]
    assert pairs.user_index.tolist() == [0, 1, 1]
    assert pairs.user_ids.tolist() == [7, 8]


def test_read_pairs_with_item_ids(tmp_path):
    path = tmp_path / "log.parquet"
    pq.write_table(pa.table({"user": [5, 6, 5], "sku": ["b", "zz", "a"]}), path)
    p = read_pairs(LogSpec(path, item_col="sku"), ItemRows(np.array(["a", "b"], dtype=object), 2))
    assert p.user_ids.tolist() == [5] and p.item_rows.tolist() == [1, 0] and p.user_index.tolist() == [0, 0]


def test_read_pairs_needs_a_user_column(tmp_path):
    path = _write(tmp_path / "log.csv", "item_id\n1\n")
    with pytest.raises(InteractionsError, match="cannot find a user id column .*user_col"):
        read_pairs(LogSpec(path), ItemRows(None, 3))


def test_read_pairs_sample_is_seeded_ordered_and_uniform(tmp_path, small_batches):
    n = 120
    path = tmp_path / "log.parquet"
    # item = row number, so a sampled pair tells which row it came from
    pq.write_table(pa.table({"user_id": np.arange(n) % 11, "item_id": np.arange(n)}), path, row_group_size=10)
    full = read_pairs(LogSpec(path), ItemRows(None, n))
    assert full.item_rows.tolist() == list(range(n))
    a = read_pairs(LogSpec(path), ItemRows(None, n), max_rows=12, seed=3)
    b = read_pairs(LogSpec(path), ItemRows(None, n), max_rows=12, seed=3)
    assert len(a) == 12 and a.item_rows.tolist() == b.item_rows.tolist()
    assert a.item_rows.tolist() == sorted(a.item_rows.tolist())  # log order kept
    assert a.user_ids[a.user_index].tolist() == (a.item_rows % 11).tolist()
    hits = np.zeros(n)
    trials = 200
    for seed in range(trials):
        hits[read_pairs(LogSpec(path), ItemRows(None, n), max_rows=12, seed=seed).item_rows] += 1
    rate = hits / trials  # each row: 12/120 = 0.1
    assert abs(rate[: n // 2].mean() - 0.1) < 0.02 and abs(rate[n // 2 :].mean() - 0.1) < 0.02


# ---------------------------------------------------------------- counting paths


def _reference(users: np.ndarray, items: np.ndarray, user_ok: np.ndarray, item_ok: np.ndarray):
    """(ids, counts, distinct users per id, distinct users) computed directly with numpy.

    Rows with an empty item are skipped; rows with an empty user count as interactions
    but add no user.
    """
    ids, item_code, counts = np.unique(items[item_ok], return_inverse=True, return_counts=True)
    u, u_ok = users[item_ok], user_ok[item_ok]
    user_values, user_code = np.unique(u[u_ok], return_inverse=True)
    pairs = np.unique(item_code[u_ok].astype(np.int64) * len(user_values) + user_code)
    per_item = np.bincount(pairs // len(user_values), minlength=len(ids)) if len(user_values) else np.zeros(len(ids), int)
    return ids, counts, per_item, len(user_values)


def _log_of_kind(kind: str, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, pa.DataType, pa.DataType]:
    """(users, items, user type, item type) of one id layout; Zipf-like items, repeated users."""
    items = np.minimum(rng.zipf(1.4, n) - 1, 300)
    users = rng.integers(0, 60, n)
    if kind == "dense":
        return users, items, pa.int64(), pa.int64()
    if kind == "narrow":  # small integer types: int16 items, uint8 users
        return users, items, pa.uint8(), pa.int16()
    if kind == "uint64":
        return users, items, pa.uint64(), pa.uint64()
    if kind == "sparse":  # huge ids: the hash path from the first batch
        return users * 7_919_000_003 + 2**40, items * 1_000_000_007 + 2**41, pa.int64(), pa.int64()
    if kind == "late-sparse":  # dense at first, then one huge id: dense counts move to the hash path
        items[-40] = 2**45 + 1
        users[-30] = 2**44
        return users, items, pa.int64(), pa.int64()
    if kind == "negative":
        return users - 30, items - 5, pa.int32(), pa.int64()
    if kind == "strings":
        return (
            np.array([f"u{v}" for v in users], dtype=object),
            np.array([f"sku-{v:03d}" for v in items], dtype=object),
            pa.string(),
            pa.string(),
        )
    raise AssertionError(kind)


KINDS = ["dense", "narrow", "uint64", "sparse", "late-sparse", "negative", "strings"]


@pytest.mark.parametrize("need_users", [True, False])
@pytest.mark.parametrize("kind", KINDS)
def test_counting_paths_match_numpy(tmp_path, small_batches, monkeypatch, kind, need_users):
    rng = np.random.default_rng(KINDS.index(kind))
    n = 1200
    users, items, user_type, item_type = _log_of_kind(kind, n, rng)
    item_ok = rng.random(n) > 0.05
    user_ok = rng.random(n) > 0.05
    item_ok[-40] = user_ok[-30] = True  # keep the late huge ids
    table = pa.table(
        {
            "user_id": pa.array(users.tolist(), type=user_type, mask=~user_ok),
            "item_id": pa.array(items.tolist(), type=item_type, mask=~item_ok),
        }
    )
    path = tmp_path / "log.parquet"
    pq.write_table(table, path, row_group_size=100)
    assert pq.ParquetFile(path).metadata.num_row_groups == 12
    ids, counts, per_item, n_users = _reference(users, items, user_ok, item_ok)
    for scan_bytes in (logs.SCAN_ROW_GROUP_BYTES, 0):  # whole row groups read ahead, then iter_batches
        monkeypatch.setattr(logs, "SCAN_ROW_GROUP_BYTES", scan_bytes)
        c = count_item_ids(LogSpec(path), need_users=need_users)
        assert c.ids.dtype == (object if kind == "strings" else np.int64)
        assert c.ids.tolist() == ids.tolist()
        np.testing.assert_array_equal(c.counts, counts)
        assert c.n_interactions == int(item_ok.sum()) and c.n_null_items == int((~item_ok).sum())
        assert c.n_users == n_users
        if need_users:
            np.testing.assert_array_equal(c.user_counts, per_item)
        else:
            assert c.user_counts is None


@pytest.mark.parametrize("need_users", [True, False])
def test_csv_negative_and_sparse_ids_match_numpy(tmp_path, small_batches, need_users):
    users, items = _zipf_log(900, 80, 25, seed=7)
    items = np.where(items % 3 == 0, -items, items * 10**12)
    users = users - 12
    path = _write(tmp_path / "log.csv", "user_id,item_id\n" + "".join(f"{u},{i}\n" for u, i in zip(users, items)))
    ok = np.ones(len(items), dtype=bool)
    ids, counts, per_item, n_users = _reference(users, items, ok, ok)
    c = count_item_ids(LogSpec(path), need_users=need_users)
    assert c.ids.tolist() == ids.tolist() and c.counts.tolist() == counts.tolist()
    assert c.n_users == n_users
    if need_users:
        assert c.user_counts.tolist() == per_item.tolist()


def test_item_counter_switches_to_hashing_for_sparse_ids():
    dense = counting._ItemCounter()
    dense.add(pa.array([3, 1, 3], pa.int32()))
    dense.add(pa.array([1_000_000, 3], pa.int64()))  # below 4 x 5 rows + 2**20: the array grows
    assert dense.dense is not None and dense.dense.size >= 1_000_001
    t = dense.result()
    assert t.column("id").to_pylist() == [1, 3, 1_000_000] and t.column("n").to_pylist() == [1, 3, 1]

    switched = counting._ItemCounter()
    switched.add(pa.array([0, 5, 5]))
    switched.add(pa.array([2**33, 5]))  # above DENSE_MAX_ID: the counts so far move to the hash path
    assert switched.dense is None
    t = switched.result().sort_by("id")
    assert t.column("id").to_pylist() == [0, 5, 2**33] and t.column("n").to_pylist() == [1, 3, 1]

    negative = counting._ItemCounter()
    negative.add(pa.array([-1, 2, -1]))
    assert negative.dense is None
    assert dict(zip(*negative.result().to_pydict().values())) == {-1: 2, 2: 1}


def test_dense_limit_follows_rows_read(monkeypatch):
    monkeypatch.setattr(counting, "DENSE_COUNTS_SLACK", 10)
    monkeypatch.setattr(counting, "DENSE_SEEN_SLACK", 10)
    assert counting._dense_limit(5, 4, 10) == 30
    assert counting._dense_limit(10**12, 4, 10) == counting.DENSE_MAX_ID
    counter, seen = counting._ItemCounter(), counting._DistinctIds()
    counter.add(pa.array([0, 1, 29, 29, 29]))  # 5 rows: ids below 4 x 5 + 10 fit
    seen.add(pa.array([0, 1, 49, 49, 49]))  # 8 x 5 + 10 = 50
    assert counter.dense is not None and seen.seen is not None
    counter.add(pa.array([60]))  # 6 rows: limit 34 and nothing allocated that far
    seen.add(pa.array([60, None]))  # nulls dropped: 6 ids, limit 58
    assert counter.dense is None and seen.seen is None
    assert dict(zip(*counter.result().to_pydict().values())) == {0: 1, 1: 1, 29: 3, 60: 1}
    assert seen.count() == 4
    seen.add(pa.array([49, 61, 0]))
    assert seen.count() == 5


def test_distinct_ids_dense_grows_and_counts():
    seen = counting._DistinctIds()
    for part in ([4, 4, 0], [9], [], [1_000, 4]):
        seen.add(pa.array(part, pa.int64()))
    assert seen.seen is not None and seen.count() == 4
    strings = counting._DistinctIds()
    strings.add(pa.array(["a", "b", None, "a"]))
    strings.add(pa.array(["c", "a"]))
    assert strings.seen is None and strings.count() == 3


def test_grown_doubles_up_to_the_limit():
    a = np.arange(4, dtype=np.int64)
    assert counting._grown(a, 3, 100) is a
    assert counting._grown(a, 5, 100).tolist() == [0, 1, 2, 3, 0, 0, 0, 0]
    assert counting._grown(a, 6, 6).size == 6  # doubling capped by the limit
    assert counting._grown(a, 50, 100).size == 50


def test_sorted_unique_drops_repeats_across_chunks(monkeypatch):
    monkeypatch.setattr(merging, "_DEDUP_CHUNK", 4)
    rng = np.random.default_rng(5)
    for n in (0, 1, 2, 7, 8, 9, 301):
        keys = rng.integers(-20, 20, n)
        expected = sorted(set(keys.tolist()))
        assert merging._sorted_unique(keys.copy()).tolist() == expected
    runs = np.array([3, 3, 3, 3, 3, 3, 3, 3, 3, 4], dtype=np.int64)  # a repeat spanning three chunks
    assert merging._sorted_unique(runs).tolist() == [3, 4]


def test_sorted_keys_merge_runs(monkeypatch):
    monkeypatch.setattr(merging, "MERGE_ROWS", 4)
    keys = merging.SortedKeys()
    rng = np.random.default_rng(3)
    parts = [rng.integers(0, 40, 9) for _ in range(12)]
    for part in parts:
        keys.add(part.copy())
    np.testing.assert_array_equal(keys.flush(), np.unique(np.concatenate(parts)))


def test_pair_set_packs_item_major_and_counts_users_per_item():
    for late_user in (None, 2**31):
        pairs = counting._PairSet()
        pairs.add(pa.array([5, 5, 7, 2**31 - 1]), pa.array([9, 9, 9, 2**32 - 1]))
        pairs.add(pa.array([7, 1]), pa.array([0, 9]))
        assert pairs.packed is not None
        if late_user is None:
            t = pairs.users_per_item()
            assert t.column("i").to_pylist() == [0, 9, 2**32 - 1] and t.column("n").to_pylist() == [1, 3, 1]
    pairs.add(pa.array([late_user]), pa.array([0]))  # a user that no longer fits: the set unpacks
    assert pairs.packed is None
    t = pairs.users_per_item().sort_by("i")
    assert t.column("i").to_pylist() == [0, 9, 2**32 - 1] and t.column("n").to_pylist() == [2, 3, 1]


def test_big_row_groups_stream_with_iter_batches(tmp_path, small_batches, monkeypatch):
    users, items = _zipf_log(500, 40, 20, seed=4)
    path = tmp_path / "log.parquet"
    pq.write_table(pa.table({"user_id": users, "item_id": items}), path, row_group_size=200)
    pf = pq.ParquetFile(path)
    meta = pf.metadata
    sizes = [[meta.row_group(r).column(j).total_uncompressed_size for j in (0, 1)] for r in range(3)]
    assert logs._largest_row_group_bytes(pf, ["item_id"]) == max(s[1] for s in sizes)
    assert logs._largest_row_group_bytes(pf, ["user_id", "item_id"]) == max(sum(s) for s in sizes)

    calls = []
    original = pq.ParquetFile.iter_batches

    def spy(self, *args, **kwargs):
        calls.append(kwargs.get("batch_size"))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy)
    ids, counts, per_item = _numpy_counts(users, items)
    largest = max(sum(s) for s in sizes)
    for scan_rows, scan_bytes, expected_calls in ((200, largest, []), (200, largest - 1, [7]), (199, largest, [7])):
        monkeypatch.setattr(logs, "SCAN_ROW_GROUP_ROWS", scan_rows)
        monkeypatch.setattr(logs, "SCAN_ROW_GROUP_BYTES", scan_bytes)
        calls.clear()
        c = count_item_ids(LogSpec(path))
        assert calls == expected_calls  # row groups above the bound: iter_batches, else the scanner
        assert c.ids.tolist() == ids.tolist() and c.counts.tolist() == counts.tolist()
        assert c.user_counts.tolist() == per_item.tolist()


# ---------------------------------------------------------------- ids beyond int64 (hashed uint64 ids)


def test_csv_ids_beyond_int64_stay_distinct_and_match_an_id_file(tmp_path):
    from auditor.loading.ids import read_id_file

    big = [2**63 + 1, 2**63 + 2, 2**64 - 1]  # neighbours a double would merge
    log = _write(tmp_path / "log.csv", "user_id,item_id\n" + "".join(f"{u},{i}\n" for u, i in enumerate(big + big[:1])))
    counts = count_item_ids(LogSpec(log))
    assert sorted(counts.ids.tolist()) == sorted(str(i) for i in big)
    assert sorted(counts.counts.tolist()) == [1, 1, 2]
    ids_file = _write(tmp_path / "ids.txt", "".join(f"{i}\n" for i in big))
    item_ids = read_id_file(ids_file)
    stats = align_counts(counts, ItemRows(item_ids, len(big)))
    assert stats.frequencies.tolist() == [2, 1, 1] and stats.n_unmapped == 0
    with pytest.raises(IdMappingError, match=r"reach 18446744073709551615, beyond any table row.*item_ids"):
        align_counts(counts, ItemRows(None, len(big)))


def test_maybe_int_reads_text_beyond_int64_as_uint64():
    assert logs.maybe_int(pa.array(["1", "18446744073709551615"])).type == pa.uint64()
    assert logs.maybe_int(pa.array(["1", "-2"])).type == pa.int64()
    assert logs.maybe_int(pa.array(["1", "18446744073709551616"])).type == pa.string()  # beyond uint64: text


def test_a_field_longer_than_the_csv_block_is_a_long_line(tmp_path, monkeypatch):
    monkeypatch.setattr(logs, "CSV_BLOCK_BYTES", 1 << 16)
    log = _write(tmp_path / "log.csv", "user_id,item_id\n1,2\n2," + "x" * (90 << 10) + "\n")
    with pytest.raises(InteractionsError, match=r"log\.csv: a line is longer than 4 MiB"):
        count_item_ids(LogSpec(log))
