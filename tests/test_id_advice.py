"""No silent id rule, no misleading advice (#20 item 7, #23 item 9): RecBole's numbering only
for its own .inter file, the raw ids first in every id error, the framework's own mapping
named instead of a guessed offset, and the cheap signals of 1-based ids or a padding row."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from scipy.stats import spearmanr

from auditor.cli import cli
from auditor.errors import IdMappingError
from auditor.id_shifts import offset_signals
from auditor.idmap import check_assumed_rows
from auditor.values import RowIdPolicy

DATA = Path(__file__).resolve().parent / "data"
FAST = ("--no-probes", "--bootstrap", "0", "-q")


def _check(*args: object) -> tuple[int, str]:
    ran = CliRunner().invoke(cli, ["check", *map(str, args), *FAST])
    return ran.exit_code, ran.output


def _shifted_csv(source: Path, target: Path, shift: int) -> Path:
    rows = list(csv.DictReader(source.open()))
    with target.open("w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["user_id", "item_id"])
        out.writerows([[row["user_id"], int(row["item_id"]) + shift] for row in rows])
    return target


def test_recbole_rule_only_for_its_own_inter_file(tmp_path: Path) -> None:
    inter = DATA / "recbole" / "tiny.inter"
    plain = tmp_path / "train.csv"
    lines = inter.read_text().splitlines()
    plain.write_text("user_id,item_id\n" + "".join(",".join(line.split("\t")[:2]) + "\n" for line in lines[1:]))
    code, output = _check(DATA / "recbole" / "BPR-tiny.pth", "--interactions", plain)
    assert code == 1
    assert re.search(r"Error: .*BPR-tiny\.pth is a RecBole checkpoint: its rows are numbered by RecBole's own rule "
                     r"over the \.inter file it read .*train\.csv is read as a csv log, not a RecBole \.inter file, "
                     r"so the numbering is not reproduced from it\. Pass --item-ids FILE .* or the dataset's \.inter "
                     r"file as --interactions \(--interactions-format recbole", " ".join(output.split()))
    # The same rows read as RecBole's own file: audited through the rule (the user rows given,
    # since this run's random-order split cannot be reproduced; a time-ordered run needs nothing).
    users = tmp_path / "users.txt"
    users.write_text("\n".join(json.loads((DATA / "recbole" / "BPR-tiny.tokens.json").read_text())["user_id"][1:]))
    assert _check(DATA / "recbole" / "BPR-tiny.pth", "--interactions", inter, "--user-ids", users)[0] == 0
    assert _check(DATA / "recbole" / "BPR-eval.pth", "--interactions", DATA / "recbole" / "eval.inter")[0] == 0


def test_a_framework_numbering_is_named_instead_of_an_offset(tmp_path: Path) -> None:
    """LightFM numbers rows by its Dataset's mapping: 1-based raw ids are not an offset."""
    log = _shifted_csv(DATA / "lightfm" / "interactions.csv", tmp_path / "one_based.csv", 1)
    code, output = _check(DATA / "lightfm" / "lightfm_warp.pkl", "--interactions", log)
    text = " ".join(output.split())
    assert code == 1 and "1 of the 80 distinct item ids" in text
    assert "Pass --item-ids FILE with the raw item id of each table row (LightFM numbers rows by " \
           "lightfm.data.Dataset's own mapping" in text
    assert "--id-offset" not in text


def test_the_raw_ids_come_first_and_an_offset_only_on_evidence() -> None:
    dense = np.arange(1, 101)  # 1-based ids over 100 rows: one shift puts every id on a row
    try:
        check_assumed_rows(dense, 100, RowIdPolicy(), "item", "log.csv")
    except IdMappingError as exc:
        message = str(exc)
    assert message.index("item_ids FILE") < message.index("id_offset 1")
    assert "if the rows are the ids minus 1 (1-based ids), pass id_offset 1 instead" in message
    sparse = np.array([1, 5, 40, 100])  # ids fit after a shift but cover 4% of the rows: a possibility
    try:
        check_assumed_rows(sparse, 100, RowIdPolicy(), "item", "log.csv")
    except IdMappingError as exc:
        message = str(exc)
    assert message.index("item_ids FILE") < message.index("id_offset 1") < message.index("assume_row_ids")
    assert "look shifted" not in message
    assert "every id has a row if the rows are the ids minus 1 (1-based ids), though the ids cover only 4 of the " \
           "100 rows: if they are, pass id_offset 1" in message
    wide = np.array([1, 50, 101])  # no shift puts every id on a row: no offset offered
    try:
        check_assumed_rows(wide, 100, RowIdPolicy(), "item", "log.csv")
    except IdMappingError as exc:
        message = str(exc)
    assert "id_offset" not in message and "assume_row_ids" in message


def test_a_sparse_one_based_log_is_offered_the_offset(tmp_path: Path) -> None:
    """QA12 logs F1: a 1-based MovieLens log leaving 10 of the 40 rows cold was offered only
    --assume-row-ids (ρ 0.196, severity none) while --id-offset 1 reads ρ 0.8455 (moderate)."""
    rng = np.random.default_rng(1)
    n_items = 40
    rows = np.minimum(rng.zipf(1.5, 300) - 1, n_items - 1)
    rows = np.concatenate([rows[~np.isin(rows, np.arange(5, 15))], [n_items - 1]])  # rows 5..14 cold
    counts = np.bincount(rows, minlength=n_items)
    table = rng.normal(size=(n_items, 8)) * (1 + np.log1p(counts))[:, None]
    np.save(tmp_path / "items.npy", table.astype(np.float32))
    log = tmp_path / "ratings.dat"
    log.write_text("".join(f"{k % 9 + 1}::{row + 1}::4::{978300760 + k}\n" for k, row in enumerate(rows)))
    code, output = _check(tmp_path / "items.npy", "--interactions", log)
    text = " ".join(output.split())
    assert code == 1 and "Pass --item-ids FILE" in text
    covered = np.unique(rows).size
    assert covered == 25  # under 90% of the 40 rows, where the offset was offered before
    assert f"every id has a row if the rows are the ids minus 1 (1-based ids), though the ids cover only {covered} of " \
           "the 40 rows: if they are, pass --id-offset 1 (or --assume-row-ids" in text
    report = tmp_path / "r.json"
    assert _check(tmp_path / "items.npy", "--interactions", log, "--id-offset", "1", "--json", report)[0] == 0
    expected = spearmanr(counts, np.linalg.norm(table.astype(np.float32).astype(np.float64), axis=1))[0]
    assert json.loads(report.read_text())["frequency_norm"]["spearman"] == pytest.approx(expected, abs=1e-12)
    assert _check(tmp_path / "items.npy", "--interactions", log, "--assume-row-ids", "--json", report)[0] == 0
    assert any("every id has a row if the rows are the ids minus 1: if they are, pass --id-offset 1" in warning
               for warning in json.loads(report.read_text())["warnings"])


def test_ids_that_fit_by_chance_are_warned_about() -> None:
    table_row0 = np.ones(4, dtype=np.float32)
    # Rows 1..9 all occur, row 0 never: 1-based ids whose last item is not in the log.
    [one_based] = offset_signals(np.arange(1, 10), 10, RowIdPolicy(), "item", "log.csv", table_row0)
    assert "row 0 of the item table never occurs in log.csv while every other row does" in one_based
    assert "pass id_offset 1 (row = id − 1)" in one_based
    # The same with row 0 all zeros: a padding row, named as such.
    [padding] = offset_signals(np.arange(1, 10), 10, RowIdPolicy(), "item", "model.onnx log", np.zeros(4))
    assert "all zeros" in padding and "padding row (as nn.Embedding(n + 1, padding_idx=0) keeps)" in padding
    # assume_row_ids over 1-based ids: only the last id (10) has no row.
    [assumed] = offset_signals(np.arange(1, 11), 10, RowIdPolicy(assume_row_ids=True), "item", "log.csv", table_row0)
    assert "only the largest item id of log.csv (10) has no row" in assumed and "id_offset 1" in assumed
    # No signal: row 0 occurs, or some other row is missing too, or an offset was given.
    assert offset_signals(np.arange(0, 10), 10, RowIdPolicy(), "item", "log.csv", table_row0) == []
    assert offset_signals(np.arange(2, 10), 10, RowIdPolicy(), "item", "log.csv", table_row0) == []
    assert offset_signals(np.arange(1, 10), 10, RowIdPolicy(offset=0), "item", "log.csv", table_row0) == []


def test_the_padding_row_warning_reaches_the_report(tmp_path: Path) -> None:
    """An nn.Embedding(n + 1, padding_idx=0) table audited against its 1..n log."""
    rng = np.random.default_rng(0)
    table = rng.normal(size=(21, 4)).astype(np.float32)
    table[0] = 0.0
    np.save(tmp_path / "items.npy", table)
    items = np.repeat(np.arange(1, 21), 3)
    pq.write_table(pa.table({"user_id": np.arange(items.size) % 7, "item_id": items}), tmp_path / "log.parquet")
    report = tmp_path / "r.json"
    code, output = _check(tmp_path / "items.npy", "--interactions", tmp_path / "log.parquet", "--json", report)
    assert code == 0, output
    warnings = json.loads(report.read_text())["warnings"]
    assert any("row 0 of the item table is all zeros and never occurs" in w and "padding row" in w for w in warnings)


def test_a_wrong_offset_is_told_which_offset_fits(tmp_path: Path) -> None:
    """QA12 logs N1: 0-based ids under a wrong --id-offset 1 were offered only
    --assume-row-ids, which read ρ 0.066 (severity none) for the ids' own 0.8455; the
    refusal and the escape's warning now say the ids fit without the offset."""
    rng = np.random.default_rng(4)
    n_items = 40
    rows = np.minimum(rng.zipf(1.5, 300) - 1, n_items - 1)
    rows = np.concatenate([rows[~np.isin(rows, np.arange(5, 15))], [0, n_items - 1]])  # rows 5..14 cold
    counts = np.bincount(rows, minlength=n_items)
    table = rng.normal(size=(n_items, 8)) * (1 + np.log1p(counts))[:, None]
    np.save(tmp_path / "items.npy", table.astype(np.float32))
    log = tmp_path / "log.csv"
    log.write_text("user_id,item_id\n" + "".join(f"{k % 9},{row}\n" for k, row in enumerate(rows)))
    code, output = _check(tmp_path / "items.npy", "--interactions", log, "--id-offset", "1")
    text = " ".join(output.split())
    assert code == 1 and "Pass --item-ids FILE" in text
    covered = np.unique(rows).size
    assert covered == 20  # under 90% of the 40 rows: a possibility
    assert f"every id has a row without --id-offset 1 (row = id), though the ids cover only {covered} of the 40 " \
           "rows: if the rows are the ids, drop --id-offset (or --assume-row-ids" in text
    report = tmp_path / "r.json"
    assert _check(tmp_path / "items.npy", "--interactions", log, "--json", report)[0] == 0
    expected = spearmanr(counts, np.linalg.norm(table.astype(np.float32).astype(np.float64), axis=1))[0]
    assert json.loads(report.read_text())["frequency_norm"]["spearman"] == pytest.approx(expected, abs=1e-12)
    assert _check(tmp_path / "items.npy", "--interactions", log, "--id-offset", "1", "--assume-row-ids",
                  "--json", report)[0] == 0
    assert any("taken minus 1 as rows (--assume-row-ids took them as rows and left their interactions out), while "
               "every id has a row without --id-offset 1 (row = id)" in warning
               for warning in json.loads(report.read_text())["warnings"])
    # Another offset that fits is named in place of the given one; none fits: no offset.
    try:
        check_assumed_rows(np.arange(2, 42), 40, RowIdPolicy(offset=1), "item", "log.csv")
    except IdMappingError as exc:
        assert "if the rows are the ids minus 2, pass id_offset 2 instead" in str(exc)
    try:
        check_assumed_rows(np.arange(0, 42), 40, RowIdPolicy(offset=1), "item", "log.csv")
    except IdMappingError as exc:
        assert "id_offset" not in str(exc).split(";")[-1].split("(or")[0]
    [dense] = offset_signals(np.arange(0, 40), 40, RowIdPolicy(offset=3, assume_row_ids=True), "item", "log.csv",
                             np.ones(4))
    assert "every id has a row without id_offset 3 (row = id): if the rows are the ids, drop id_offset" in dense
    assert offset_signals(np.arange(0, 40), 40, RowIdPolicy(offset=3), "item", "log.csv", np.ones(4)) == []


def test_an_offered_offset_must_fit_the_other_table_too() -> None:
    """QA12 logs N3: --id-offset shifts every id taken as a row. Users 3..12 on 12 rows beside
    0-based items 0..39 were offered --id-offset 1 plainly; the items then failed it."""
    users, items = np.arange(3, 13), np.arange(40)
    with pytest.raises(IdMappingError) as raised:
        check_assumed_rows(users, 12, RowIdPolicy(), "user", "log.csv", other=("item", items, 40))
    assert "every id has a row if the rows are the ids minus 1, but id_offset shifts every id taken as a row and " \
           "some item id then has none: pass id_offset 1 with item_ids FILE for the items" in str(raised.value)
    # Items 2..41 need --id-offset 2; the 0-based users fit only without it: keep it, give the users' rows.
    with pytest.raises(IdMappingError) as raised:
        check_assumed_rows(np.arange(10), 12, RowIdPolicy(offset=2), "user", "log.csv",
                           other=("item", np.arange(2, 42), 40))
    assert "every id has a row without id_offset 2 (row = id), but the item ids need it and id_offset shifts every " \
           "id taken as a row: keep it and pass user_ids FILE for the users (0..11 one per line" in str(raised.value)
    # Where the offset fits the other table too, it is offered plainly.
    with pytest.raises(IdMappingError) as raised:
        check_assumed_rows(users, 12, RowIdPolicy(), "user", "log.csv", other=("item", np.arange(1, 41), 40))
    assert "if they are, pass id_offset 1 (or assume_row_ids" in str(raised.value)


def test_the_offset_offered_for_users_names_its_reach_over_the_items(tmp_path: Path) -> None:
    """QA12 logs N3 where the refusal does not hold the other side's ids (the query
    population's users, the item counts' users): the offered offset says that it shifts
    the other table's ids too, and which id file then goes with it (was: a second refusal)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    torch.save({"user_embedding.weight": torch.tensor(rng.normal(size=(12, 4)), dtype=torch.float32),
                "item_embedding.weight": torch.tensor(rng.normal(size=(40, 4)), dtype=torch.float32)}, tmp_path / "m.pt")
    log = tmp_path / "log.csv"  # users 3..12 on 12 rows (1-based, two cold), items 0-based 0..39
    log.write_text("user_id,item_id\n" + "".join(f"{k % 10 + 3},{k % 40}\n" for k in range(200)))
    code, text = _check(tmp_path / "m.pt", "--interactions", log)
    text = " ".join(text.split())
    assert code == 1 and "10 distinct user ids" in text
    assert "if they are, pass --id-offset 1 (--id-offset applies to the item ids taken as rows too: where they lack " \
           "rows under it, pass --item-ids FILE for the items) (or --assume-row-ids" in text
    # Following it, as the message says: the identity item list beside the offset audits (exit 0).
    (tmp_path / "items.txt").write_text("".join(f"{k}\n" for k in range(40)))
    assert _check(tmp_path / "m.pt", "--interactions", log, "--id-offset", "1", "--item-ids", tmp_path / "items.txt")[0] == 0
    # Items 2..41 need --id-offset 2, under which the 0-based users lack rows: keep it, give the users' rows.
    log.write_text("user_id,item_id\n" + "".join(f"{k % 10},{k % 40 + 2}\n" for k in range(200)))
    code, text = _check(tmp_path / "m.pt", "--interactions", log, "--id-offset", "2")
    assert code == 1 and "drop --id-offset (where the item ids taken as rows need --id-offset 2, keep it and pass " \
                         "--user-ids FILE for the users instead" in " ".join(text.split())
