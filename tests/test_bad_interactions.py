"""Bad interaction logs: a clear ``Error:`` naming the file, the column and the row, exit
code 1, no traceback (``popaudit check --interactions`` and ``popaudit retrain --data``)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner, Result

from auditor.cli import cli
from auditor.errors import IdMappingError, InteractionsError
from auditor.loading import count_item_ids, read_pairs
from auditor.values import ItemRows
from auditor.values import LogSpec


def run(*args: object) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args])


def assert_error(result: Result, *words: str) -> None:
    """Exit 1, an ``Error:`` line holding every word, and no traceback."""
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    if result.exception is not None:
        assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Error:" in result.output
    for word in words:
        assert word in result.output, (word, result.output)


@pytest.fixture
def table(tmp_path: Path) -> Path:
    path = tmp_path / "items.npy"
    np.save(path, np.random.default_rng(0).random((10, 4)).astype(np.float32))
    return path


def _parquet(path: Path, **columns: object) -> Path:
    pq.write_table(pa.table(columns), path)
    return path


def _text(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# ---------------------------------------------------------------- id column types


@pytest.mark.parametrize(
    ("item", "type_words"),
    [([{"a": 1}, {"a": 2}], "struct<a: int64>"), ([[1, 2], [3]], "list<"), ([True, False], "type bool")],
)
def test_item_column_of_unusable_type(tmp_path, table, item, type_words):
    log = _parquet(tmp_path / "log.parquet", user_id=[1, 2], item_id=item)
    for result in (
        run("check", table, "--interactions", log),
        run("retrain", "--data", log, "-o", tmp_path / "m.pt"),
    ):
        assert_error(result, str(log), "item column 'item_id'", type_words, "integers or strings", "--item-col")
    assert not (tmp_path / "m.pt").exists()


def test_user_column_of_unusable_type(tmp_path, table):
    log = _parquet(tmp_path / "log.parquet", user_id=[[1], [2]], item_id=[1, 2])
    assert_error(
        run("check", table, "--interactions", log),
        str(log), "user column 'user_id'", "list<", "--user-col",
    )


def test_dictionary_and_float_id_columns_still_count(tmp_path):
    users = pa.array(["a", "b", "a"]).dictionary_encode()
    log = _parquet(tmp_path / "log.parquet", user_id=users, item_id=[3.0, 3.0, 1.0])
    c = count_item_ids(LogSpec(log))
    assert c.ids.tolist() == [1, 3] and c.counts.tolist() == [1, 2] and c.n_users == 2


def test_csv_bool_and_date_ids_are_read_as_text(tmp_path):
    # pyarrow's CSV reader infers bool / timestamp types; as ids they are just text
    log = _text(tmp_path / "log.csv", "user_id,item_id\ntrue,2020-01-01\nfalse,2020-01-02\ntrue,2020-01-01\n")
    c = count_item_ids(LogSpec(log))
    assert c.ids.tolist() == ["2020-01-01", "2020-01-02"] and c.counts.tolist() == [2, 1]
    assert c.user_counts.tolist() == [1, 1] and c.n_users == 2


# ---------------------------------------------------------------- non-integer ids


@pytest.mark.parametrize(
    ("name", "text", "row"),
    [
        ("log.csv", "user_id,item_id\n1,2\n2,abc\n3,4\n", 2),
        ("log.tsv", "user_id\titem_id\n1\t2\n2\t4\n3\tabc\n1\tzzz\n", 3),
        ("log.inter", "user_id:token\titem_id:float\n1\t2\n2\t3\n3\t5\n4\tabc\n", 4),
        ("headerless.csv", "1,2\n2,3\n3,x7\n", 3),
        ("sorted.csv", "user_id,item_id\n1,zeta\n2,abc\n3,4\n", 1),  # the file's first, not the counts' (abc < zeta)
    ],
)
def test_not_integers_names_the_row_of_an_offending_id_but_not_the_id(tmp_path, table, name, text, row):
    log = _text(tmp_path / name, text)
    result = run("check", table, "--interactions", log)
    assert_error(result, str(log), "not integers", f"the first in data row {row}", "--item-ids")
    assert "x7" not in result.output and "abc" not in result.output


def test_not_integers_row_found_across_batches(tmp_path, monkeypatch):
    from auditor.loading import logs

    monkeypatch.setattr(logs, "CSV_BLOCK_BYTES", 64)
    lines = "".join(f"{u},{u % 7}\n" for u in range(200))
    log = _text(tmp_path / "log.csv", "user_id,item_id\n" + lines + "5,x9\n6,1\n,\n7,x9\n")
    c = count_item_ids(LogSpec(log))
    with pytest.raises(IdMappingError, match=r"the first in data row 201"):
        from auditor.loading import align_counts

        align_counts(c, ItemRows(None, 10))
    with pytest.raises(IdMappingError, match=r"the first in data row 201"):
        read_pairs(LogSpec(log), ItemRows(None, 10))


def test_read_pairs_accepts_integral_float_ids_and_names_a_fractional_one(tmp_path):
    good = _parquet(tmp_path / "good.parquet", user_id=[1, 2, 1], item_id=[0.0, 2.0, 9.0])
    pairs = read_pairs(LogSpec(good), ItemRows(None, 5))
    assert pairs.item_rows.tolist() == [0, 2] and pairs.user_ids.tolist() == [1, 2]
    bad = _parquet(tmp_path / "bad.parquet", user_id=[1, 2, 1], item_id=[0.0, 2.5, 1.0])
    # refused as it is read, naming the column and row (Logs 2 N4), as every reader of the log does
    with pytest.raises(InteractionsError, match=r"item column 'item_id' of .*bad\.parquet: data row 2 is not a whole number"):
        read_pairs(LogSpec(bad), ItemRows(None, 5))


# ---------------------------------------------------------------- binary files as text


def test_npy_file_as_log(tmp_path, table):
    assert_error(run("check", table, "--interactions", table), str(table), "not a text interaction log", ".npy")


def test_pickle_as_log(tmp_path, table):
    import pickle

    log = tmp_path / "log.pkl"
    log.write_bytes(pickle.dumps({"user_id": [1, 2], "item_id": [3, 4]}, protocol=4))
    assert_error(run("check", table, "--interactions", log), str(log), "not a text interaction log", "pickle")

def test_random_bytes_csv(tmp_path, table):
    log = tmp_path / "log.csv"
    log.write_bytes(bytes(np.random.default_rng(1).integers(0, 256, 3000, dtype=np.uint8)))
    result = run("check", table, "--interactions", log)
    assert_error(result, str(log), "not a text interaction log", "binary")
    assert "columns found" not in result.output


def test_invalid_utf8_binary_and_latin1_text(tmp_path, table):
    # no NUL byte and no known magic, but not text: invalid UTF-8, few printable bytes
    junk = tmp_path / "junk.csv"
    junk.write_bytes(bytes(range(0x80, 0x100)) * 4)
    assert_error(run("check", table, "--interactions", junk), str(junk), "binary data, invalid UTF-8 at byte 0")
    # Latin-1 text: read as text; the column of a non-UTF-8 id is named (not the id), a
    # non-UTF-8 title column is no matter
    log = tmp_path / "log.csv"
    log.write_bytes("user_id,item_id\n1,caf\u00e9\n".encode("latin-1"))
    result = run("check", table, "--interactions", log)
    assert_error(result, str(log), "item column 'item_id'", "not valid UTF-8")
    assert "caf" not in result.output
    titled = tmp_path / "titled.csv"
    titled.write_bytes("user_id,item_id,title\n1,2,caf\u00e9\n2,2,na\u00efve\n".encode("latin-1"))
    c = count_item_ids(LogSpec(titled))
    assert c.ids.tolist() == [2] and c.counts.tolist() == [2] and c.n_users == 2


def test_utf8_character_cut_at_the_check_boundary_is_fine(tmp_path):
    from auditor.loading import sniff

    header = "user_id,item_id\n"
    # a 2-byte character straddling byte 1024 of the sample
    pad = "x" * (sniff._TEXT_CHECK_BYTES - len(header) - 3)
    log = _text(tmp_path / "log.csv", header + f"1,{pad}\u00e9\n2,b\n")
    assert count_item_ids(LogSpec(log)).n_interactions == 2


def test_parquet_given_a_text_format(tmp_path, table):
    log = _parquet(tmp_path / "log.parquet", user_id=[1, 2], item_id=[1, 2])
    for fmt in ("movielens", "csv", "recbole"):
        result = run("check", table, "--interactions", log, "--interactions-format", fmt)
        assert_error(result, str(log), "not a text interaction log", "Parquet", "--interactions-format parquet")
        assert "PAR1" not in result.output
    assert_error(
        run("retrain", "--data", log, "--data-format", "tsv", "-o", tmp_path / "m.pt"),
        "Parquet", "--data-format parquet",
    )


def test_gzip_without_gz_name(tmp_path):
    log = tmp_path / "log.csv"
    log.write_bytes(gzip.compress(b"user_id,item_id\n1,2\n"))
    with pytest.raises(InteractionsError, match="gzip"):
        count_item_ids(LogSpec(log))
    named = tmp_path / "log.csv.gz"
    named.write_bytes(gzip.compress(b"user_id,item_id\n1,2\n"))
    assert count_item_ids(LogSpec(named)).n_interactions == 1


# ---------------------------------------------------------------- empty user ids


def test_empty_user_ids_are_counted(tmp_path):
    c = count_item_ids(LogSpec(_text(tmp_path / "log.csv", "user_id,item_id\n1,2\n,4\n3,5\n,5\n")))
    assert (c.n_interactions, c.n_users, c.n_null_users) == (4, 2, 2)
    assert c.user_counts.tolist() == [1, 0, 1]  # items 2 4 5: the empty users are no user
    # a row with neither id is an empty item row, not an empty user row
    c = count_item_ids(LogSpec(_text(tmp_path / "both.csv", "user_id,item_id\n1,2\n,\n3,5\n")))
    assert (c.n_interactions, c.n_null_items, c.n_null_users) == (2, 1, 0)
    no_users = count_item_ids(LogSpec(_text(tmp_path / "items.csv", "item_id\n2\n4\n")))
    assert no_users.n_null_users == 0 and no_users.n_users is None

