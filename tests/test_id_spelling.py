"""Ids match as they are spelled, whatever the file format (Logs F1, F2).

One rule: text ids that are all canonical integers are integers; zero-padded ids ("001")
stay text. Before Logs F1 a CSV log or a .txt id file read "001" as 1 (pyarrow's type
inference) while Parquet and .npy kept "001", so the same log gave ρ −0.61 from CSV and
+0.74 (or "no interaction matches") from Parquet; before F2 a Parquet string column of
row numbers "0".."49" was refused as "reaching 49, beyond any table row number".
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from click.testing import CliRunner
from scipy.stats import spearmanr

from auditor.cli import cli
from auditor.loading import align_counts, count_item_ids
from auditor.loading.ids import read_id_file
from auditor.values import ItemRows, LogSpec

N = 20
PADDED = [f"{k:03d}" for k in range(1, N + 1)]
PARTLY = [f"{k:03d}" for k in range(1, 10)] + [str(k) for k in range(100, 111)]


def _rows_and_users() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    users = rng.integers(0, 10, 400)
    return np.minimum(rng.zipf(1.3, 400) - 1, N - 1), users


def _write_log(folder: Path, fmt: str, ids: list[str]) -> Path:
    rows, users = _rows_and_users()
    items = [ids[r] for r in rows]
    if fmt == "csv":
        path = folder / "log.csv"
        path.write_text("user_id,item_id\n" + "".join(f"{u},{i}\n" for u, i in zip(users, items)))
    else:
        path = folder / "log.parquet"
        pq.write_table(pa.table({"user_id": users, "item_id": pa.array(items, pa.string())}), path)
    return path


def _write_ids(folder: Path, fmt: str, ids: list[str]) -> Path:
    if fmt == "txt":
        path = folder / "ids.txt"
        path.write_text("\n".join(ids) + "\n")
    elif fmt == "npy":
        path = folder / "ids.npy"
        np.save(path, np.array(ids))
    else:
        path = folder / "ids_file.parquet"
        pq.write_table(pa.table({"item_id": pa.array(ids, pa.string())}), path)
    return path


@pytest.mark.parametrize("ids", [PADDED, PARTLY], ids=["padded", "partly-padded"])
@pytest.mark.parametrize("id_fmt", ["txt", "npy", "parquet"])
@pytest.mark.parametrize("log_fmt", ["csv", "parquet"])
def test_spelled_alike_ids_map_alike_in_every_format(tmp_path, log_fmt, id_fmt, ids):
    log, id_file = _write_log(tmp_path, log_fmt, ids), _write_ids(tmp_path, id_fmt, ids)
    row_ids = read_id_file(id_file)
    assert row_ids.dtype == object and row_ids.tolist() == ids  # "001" stays text, never 1
    stats = align_counts(count_item_ids(LogSpec(log)), ItemRows(row_ids, N))
    rows, _ = _rows_and_users()
    truth = np.bincount(rows, minlength=N)
    assert stats.n_unmapped == 0 and stats.frequencies.tolist() == truth.tolist()
    # ρ of the table's norms 1..20 against the true counts: −0.6123 in every format
    assert spearmanr(truth, np.arange(1, N + 1)).statistic == pytest.approx(-0.6123, abs=1e-4)


@pytest.mark.parametrize("log_fmt", ["csv", "parquet"])
def test_partly_padded_gate_trips_in_both_formats(tmp_path, log_fmt):
    """The QA's gate: CSV tripped (exit 3) while Parquet passed with ρ +0.74 (exit 0)."""
    rng = np.random.default_rng(0)
    table = rng.normal(size=(N, 4)).astype(np.float32)
    table *= (np.arange(1, N + 1, dtype=np.float32) / np.linalg.norm(table, axis=1))[:, None]
    torch.save({"item_embedding.weight": torch.tensor(table)}, tmp_path / "model.pt")
    log, id_file = _write_log(tmp_path, log_fmt, PARTLY), _write_ids(tmp_path, "txt", PARTLY)
    result = CliRunner().invoke(cli, [
        "check", str(tmp_path / "model.pt"), "--interactions", str(log), "--item-ids", str(id_file),
        "--no-retrieval", "--no-probes", "--bootstrap", "0", "-q", "--fail-on", "spearman<-0.5",
    ])
    assert result.exit_code == 3, result.output
    assert "-0.61" in result.output


def test_padded_csv_ids_are_not_row_numbers(tmp_path):
    """Without an id file, "001".."020" are text, not rows 1..20 (exit 1 naming the first)."""
    log = _write_log(tmp_path, "csv", PADDED)
    with pytest.raises(Exception, match=r"item ids in .*log\.csv are not integers \(the first in data row 1"):
        align_counts(count_item_ids(LogSpec(log)), ItemRows(None, N + 1))


@pytest.mark.parametrize("column_type", [pa.string(), pa.large_string(), pa.dictionary(pa.int32(), pa.string())])
def test_parquet_text_row_numbers_are_rows(tmp_path, column_type):
    """F2: a Parquet text column holding "0".."49" is row numbers, as the same CSV column is."""
    rng = np.random.default_rng(1)
    users = rng.integers(0, 30, 500)
    items = np.minimum(rng.zipf(1.5, 500) - 1, 49)
    path = tmp_path / "log.parquet"
    pq.write_table(pa.table({
        "user_id": pa.array([str(u) for u in users]).cast(column_type),
        "item_id": pa.array([str(i) for i in items]).cast(column_type),
    }), path)
    counts = count_item_ids(LogSpec(path))
    assert counts.ids.dtype == np.int64 and counts.ids.tolist() == sorted(set(items.tolist()))
    stats = align_counts(counts, ItemRows(None, 50))
    assert stats.frequencies.tolist() == np.bincount(items, minlength=50).tolist()
    assert spearmanr(stats.frequencies, np.arange(1, 51)).statistic == pytest.approx(-0.68746, abs=1e-5)


def test_text_id_file_of_integers_with_spaces_and_floats(tmp_path):
    """Surrounding spaces are allowed (" 5" is 5); a decimal "3.0" is text, as in a
    Parquet or .npy id file (id_text's one rule), so it never merges with the id 3."""
    path = tmp_path / "ids.txt"
    path.write_text(" 5\n3\n7\n")
    assert read_id_file(path).tolist() == [5, 3, 7]
    path.write_text("5.0\n3.0\n")
    assert read_id_file(path).tolist() == ["5.0", "3.0"]


def test_movielens_dat_keeps_padded_ids(tmp_path):
    """The '::' reader follows the same rule: "001" stays text, "1" is an integer."""
    padded = tmp_path / "ratings.dat"
    padded.write_text("1::001::5::1\n2::002::4::2\n1::002::3::3\n")
    counts = count_item_ids(LogSpec(padded))
    assert counts.ids.tolist() == ["001", "002"] and counts.counts.tolist() == [1, 2]
    plain = tmp_path / "plain.dat"
    plain.write_text("1::1::5::1\n2::2::4::2\n1::2::3::3\n")
    counts = count_item_ids(LogSpec(plain))
    assert counts.ids.dtype == np.int64 and counts.ids.tolist() == [1, 2]
