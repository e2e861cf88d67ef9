"""An id spelled like a missing value ("NA", "null", "nan", "N/A", "NULL") is an id in
every format (Logs 2: N1).

Before, a CSV/TSV log, a counts CSV and a .txt id file read pyarrow's default missing
words as empty ids while Parquet and .npy kept them: the QA's item coded "NA" (29 of 300
interactions, the most popular item) vanished from the CSV run, ρ 0.8455 → 0.7503 with
exit 0, and a .txt id file holding it was refused as "1 empty id". Only an empty or
blank cell is an empty id now; a RecBole .inter keeps pandas' missing words, as RecBole
reads the file (docs/measures.md).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy.stats import spearmanr

from auditor.loading import align_counts, count_item_ids
from auditor.loading.frequencies import read_frequencies
from auditor.loading.ids import read_id_file
from auditor.loading.logs import open_log
from auditor.train.timestamps import read_times
from auditor.values import ItemRows, LogSpec

N = 20
WORDS = ["NA", "null", "nan", "N/A", "NULL"]


def _rows_and_users() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    users = rng.integers(0, 10, 400)
    return np.minimum(rng.zipf(1.3, 400) - 1, N - 1), users  # row 19 gathers the tail


def _ids(word: str) -> list[str]:
    return [str(k) for k in range(N - 1)] + [word]


def _write_log(folder: Path, fmt: str, word: str) -> Path:
    rows, users = _rows_and_users()
    items = [_ids(word)[r] for r in rows]
    if fmt == "parquet":
        path = folder / "log.parquet"
        pq.write_table(pa.table({"user_id": users, "item_id": pa.array(items, pa.string())}), path)
        return path
    sep, header, name = {
        "csv": (",", "user_id,item_id,timestamp", "log.csv"),
        "tsv": ("\t", "user_id\titem_id\ttimestamp", "log.tsv"),
        "inter": ("\t", "user_id:token\titem_id:token\ttimestamp:float", "log.inter"),
    }[fmt]
    path = folder / name
    path.write_text(header + "\n" + "".join(f"{u}{sep}{i}{sep}{t}\n" for t, (u, i) in enumerate(zip(users, items))))
    return path


def _write_ids(folder: Path, fmt: str, word: str) -> Path:
    path = folder / f"ids.{fmt}"
    if fmt == "npy":
        np.save(path, np.array(_ids(word)))
    else:  # .txt, and .csv with a header line
        path.write_text(("item_id\n" if fmt == "csv" else "") + "\n".join(_ids(word)) + "\n")
    return path


@pytest.mark.parametrize("word", WORDS)
@pytest.mark.parametrize("id_fmt", ["txt", "csv", "npy"])
@pytest.mark.parametrize("log_fmt", ["csv", "tsv", "parquet"])
def test_an_item_spelled_like_a_missing_value_counts_in_every_format(tmp_path, log_fmt, id_fmt, word):
    row_ids = read_id_file(_write_ids(tmp_path, id_fmt, word))
    assert row_ids.tolist() == _ids(word)  # was: "has 1 empty id (row 19)" for .txt/.csv
    counts = count_item_ids(LogSpec(_write_log(tmp_path, log_fmt, word)))
    stats = align_counts(counts, ItemRows(row_ids, N))
    rows, _ = _rows_and_users()
    truth = np.bincount(rows, minlength=N)
    assert truth[N - 1] == 149 and truth.argmax() == N - 1  # the most popular item
    assert counts.n_null_items == 0 and stats.n_unmapped == 0
    assert stats.frequencies.tolist() == truth.tolist()  # CSV/TSV: row 19 was 0
    # against norms rising with the row: ρ −0.5219 in every format (−0.8094 with row 19 dropped, as CSV had it)
    norms = np.arange(1, N + 1)
    assert spearmanr(stats.frequencies, norms).statistic == pytest.approx(-0.52195, abs=1e-4)
    assert spearmanr(np.where(norms == N, 0, truth), norms).statistic == pytest.approx(-0.80939, abs=1e-4)


def test_recbole_inter_keeps_pandas_missing_words(tmp_path):
    """Deliberate: RecBole reads a .inter with pandas, so "NA" is missing there (as before)."""
    counts = count_item_ids(LogSpec(_write_log(tmp_path, "inter", "NA")))
    rows, _ = _rows_and_users()
    assert counts.n_null_items == int((rows == N - 1).sum()) == 149
    assert "NA" not in counts.ids.tolist()


@pytest.mark.parametrize("word", ["NA", "null"])
def test_counts_file_and_times_keep_such_an_id(tmp_path, word):
    counts_csv = tmp_path / "counts.csv"
    counts_csv.write_text(f"item_id,count\n0,5\n{word},7\n2,1\n")
    counts = read_frequencies(counts_csv)
    assert sorted(map(str, counts.ids.tolist())) == sorted(["0", "2", word]) and counts.n_interactions == 13
    assert counts.n_null_items == 0  # was 7 (the row left out as an empty id)
    # the time reader keeps the same rows as the pairs reader (one time per kept pair)
    log = open_log(LogSpec(_write_log(tmp_path, "csv", word)))
    assert read_times(log, "timestamp").tolist() == list(range(400))
