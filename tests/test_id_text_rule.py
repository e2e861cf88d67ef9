"""One rule for text ids in every reader (Logs F1, F2 of QA round 8).

A text id is an integer only when it is spelled as one (a minus sign and digits,
surrounding spaces allowed); "5.0", "5E0", "+5", "007" stay text in CSV/TSV/RecBole
``.inter``/``::`` logs, ``.txt`` id files, counts files and Parquet string columns alike.
Before, the CSV reader typed "5.0" and "5E0" as the number 5 (pyarrow inference), so a
table whose rows 5 and 39 have the ids "5" and "5.0" got row 39's interactions on row 5
from a CSV log (ρ 0.7531) and not from the same log in Parquet (ρ 0.8455).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy.stats import spearmanr

from auditor.errors import IdMappingError
from auditor.loading import align_counts, count_item_ids
from auditor.loading.frequencies import read_frequencies
from auditor.loading.id_text import infer_block
from auditor.loading.ids import read_id_file
from auditor.loading.logs import maybe_int
from auditor.values import ItemRows, LogSpec

N = 40


@pytest.mark.parametrize(("ids", "typed"), [
    (["12", "-3", " 7 "], [12, -3, 7]),
    (["5", "5.0"], ["5", "5.0"]),
    (["5E0"], ["5E0"]),
    (["1e3", "2"], ["1e3", "2"]),
    (["+5"], ["+5"]),
    (["007", "7"], ["007", "7"]),
    (["-0"], ["-0"]),
    (["0x10"], ["0x10"]),
    (["18446744073709551615", "1"], [18446744073709551615, 1]),
])
def test_one_rule_for_text_ids(ids, typed):
    """maybe_int (Parquet/.npy/served strings) and infer_block (CSV blocks, .txt) agree."""
    assert maybe_int(pa.array(ids)).to_pylist() == typed
    block = infer_block(pa.array(ids, pa.binary()))
    ints = all(isinstance(t, int) for t in typed) and max(typed) < 2**63
    assert block.to_pylist() == (typed if ints else ids)


def _log(folder: Path, fmt: str, raw: list[str]) -> Path:
    rng = np.random.default_rng(1)
    users = rng.integers(0, 10, 300)
    items = np.minimum(rng.zipf(1.5, 300) - 1, N - 1)
    names = [raw[i] for i in items]
    path = folder / f"log.{fmt}"
    if fmt == "parquet":
        pq.write_table(pa.table({"user_id": users, "item_id": names}), path)
    elif fmt == "inter":
        path.write_text("user_id:token\titem_id:token\n" + "".join(f"{u}\t{i}\n" for u, i in zip(users, names)))
    elif fmt == "dat":
        path.write_text("".join(f"{u}::{i}::5::0\n" for u, i in zip(users, names)))
    else:
        path.write_text("user_id,item_id\n" + "".join(f"{u},{i}\n" for u, i in zip(users, names)))
    return path


@pytest.mark.parametrize("spelling", ["5.0", "5E0"])
@pytest.mark.parametrize("fmt", ["csv", "inter", "dat", "parquet"])
def test_number_like_text_id_is_its_own_item(tmp_path, fmt, spelling):
    """Row 39's id "5.0" keeps its 29 interactions in every format (ρ 0.8455 as from Parquet)."""
    raw = [str(i) for i in range(N - 1)] + [spelling]
    np.save(tmp_path / "ids.npy", np.array(raw))
    rng = np.random.default_rng(1)
    rng.integers(0, 10, 300)
    items = np.minimum(rng.zipf(1.5, 300) - 1, N - 1)
    expected = np.bincount(items, minlength=N)
    assert (expected[5], expected[39]) == (9, 29)
    stats = align_counts(count_item_ids(LogSpec(_log(tmp_path, fmt, raw))),
                         ItemRows(read_id_file(tmp_path / "ids.npy"), N))
    assert stats.frequencies.tolist() == expected.tolist()
    assert stats.n_unmapped == 0
    norms = np.linspace(1.0, 2.0, N) + 0.3 * np.sin(np.arange(N))
    assert spearmanr(stats.frequencies, norms).statistic == pytest.approx(spearmanr(expected, norms).statistic)


@pytest.mark.parametrize("id_file", ["ids.txt", "ids.npy", "ids.parquet"])
@pytest.mark.parametrize("fmt", ["csv", "inter", "parquet"])
def test_decimal_spelling_matches_itself_in_every_pair_of_formats(tmp_path, fmt, id_file):
    """F2: "3.0" in the log and "3.0" in the id file match, whatever the two formats."""
    raw = [f"{i}.0" for i in range(N)]
    (tmp_path / "ids.txt").write_text("".join(r + "\n" for r in raw))
    np.save(tmp_path / "ids.npy", np.array(raw))
    pq.write_table(pa.table({"id": raw}), tmp_path / "ids.parquet")
    rng = np.random.default_rng(1)
    rng.integers(0, 10, 300)
    expected = np.bincount(np.minimum(rng.zipf(1.5, 300) - 1, N - 1), minlength=N)
    ids = read_id_file(tmp_path / id_file)
    assert ids.tolist() == raw
    stats = align_counts(count_item_ids(LogSpec(_log(tmp_path, fmt, raw))), ItemRows(ids, N))
    assert stats.frequencies.tolist() == expected.tolist()


@pytest.mark.parametrize("fmt", ["csv", "inter", "parquet"])
def test_whole_decimals_without_id_file_say_how_to_fix(tmp_path, fmt):
    """Every id "3.0" (pandas' integer column with missing values): refused, with the fix."""
    log = _log(tmp_path, fmt, [f"{i}.0" for i in range(N)])
    with pytest.raises(IdMappingError, match=r"not integers .*written as decimals \(3\.0\).*astype\(\"Int64\"\).*item_ids FILE"):
        align_counts(count_item_ids(LogSpec(log)), ItemRows(None, N))


def test_counts_file_keeps_decimal_ids_apart(tmp_path):
    """A CSV counts file: "5" and "5.0" are two items (inference merged them into a duplicate)."""
    path = tmp_path / "counts.csv"
    path.write_text("item_id,count\n5,9\n5.0,29\n007,1\n")
    counts = read_frequencies(path)
    assert sorted(zip(map(str, counts.ids.tolist()), counts.counts.tolist())) == [("007", 1), ("5", 9), ("5.0", 29)]


def test_first_non_integer_row_skips_integers_with_spaces(tmp_path):
    """The error names the first id that is not an integer: " 5" is one (row 1), "abc" (row 3) is not."""
    log = tmp_path / "log.csv"
    log.write_text("user_id,item_id\n1, 5\n2,7\n3,abc\n")
    with pytest.raises(IdMappingError, match=r"not integers \(the first in data row 3,"):
        align_counts(count_item_ids(LogSpec(log)), ItemRows(None, N))


@pytest.mark.parametrize("side", ["item", "user"])
def test_decimal_id_file_beside_an_integer_log_says_why_nothing_matches(tmp_path, side):
    """An id file of "0.0".."N.0" against a log of integers: refused naming the spelling
    (before F1 a .txt file of decimals read as integers and matched; a .npy of the same text did not)."""
    import torch
    from click.testing import CliRunner

    from auditor.cli import cli

    rng = np.random.default_rng(0)
    torch.save({"user_embedding.weight": torch.tensor(rng.normal(size=(12, 4)), dtype=torch.float32),
                "item_embedding.weight": torch.tensor(rng.normal(size=(N, 4)), dtype=torch.float32)}, tmp_path / "m.pt")
    (tmp_path / "log.csv").write_text("user_id,item_id\n" + "".join(f"{u % 10},{u % N}\n" for u in range(200)))
    rows = N if side == "item" else 12
    (tmp_path / "ids.txt").write_text("".join(f"{i}.0\n" for i in range(rows)))
    result = CliRunner().invoke(cli, ["check", str(tmp_path / "m.pt"), "--interactions", str(tmp_path / "log.csv"),
                                      f"--{side}-ids", str(tmp_path / "ids.txt"), "-q", "--no-probes", "--bootstrap", "0"])
    assert result.exit_code == 1, result.output
    assert re.search(r"writes every id as a decimal \(3\.0\), the other as an integer \(3\); a decimal id is text, "
                     r"so none match", result.output), result.output
