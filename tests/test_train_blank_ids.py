"""Rows with a blank user or item id (retrain QA F3): counted and warned about (number,
column, first row), and neither the item of a user-less row nor the user of an item-less
row enters the catalogue."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import torch
from click.testing import CliRunner

from auditor.cli import cli
from auditor.train.data import read_interactions


def test_small_log_catalogue_and_warning(tmp_path: Path) -> None:
    log = tmp_path / "missing.csv"
    log.write_text("user_id,item_id\n1,2\n1,\n,4\n2,3\n7,\n")
    data = read_interactions(log)
    # rows 1 and 4 are whole; item 4 (no user) and user 7 (no item) are in neither catalogue
    assert data.item_ids == [2, 3] and data.user_ids == [1, 2]
    assert data.item_frequencies.tolist() == [1, 1] and data.n_interactions == 2
    assert data.warnings == (
        f"{log}: 3 of 5 rows (60.0%) have a blank id and are left out of training and the catalogue: 2 with no item "
        "id (column 'item_id', first at data row 2); 1 with no user id (column 'user_id', first at data row 3)",)
    whole = tmp_path / "whole.csv"
    whole.write_text("user_id,item_id\n1,2\n2,3\n")
    assert read_interactions(whole).warnings == ()


def test_retrain_warns_with_the_counts_of_an_independent_reading(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    users, items = rng.integers(0, 40, 1000), rng.integers(0, 60, 1000)
    log = tmp_path / "holes.csv"
    with log.open("w") as fh:
        fh.write("user_id,item_id\n")
        for k, (u, i) in enumerate(zip(users, items)):
            fh.write(f"{'' if k % 10 == 7 else u},{'' if k % 10 == 3 else i}\n")
    with log.open() as fh:
        rows = list(csv.DictReader(fh))
    whole = [r for r in rows if r["user_id"] and r["item_id"]]
    out = tmp_path / "m.pt"
    got = CliRunner().invoke(cli, ["retrain", "--data", str(log), "--epochs", "1", "--threads", "1", "-q", "-o", str(out)])
    assert got.exit_code == 0, got.output
    assert (f"Warning: {log}: 200 of 1,000 rows (20.0%) have a blank id and are left out of training and the catalogue: "
            "100 with no item id (column 'item_id', first at data row 4); 100 with no user id (column 'user_id', "
            "first at data row 8)") in got.stderr
    ckpt = torch.load(out, weights_only=False)
    assert sorted(int(x) for x in ckpt["item_ids"]) == sorted({int(r["item_id"]) for r in whole})
    assert int(ckpt["item_frequencies"].sum()) == len(whole) == 800 and int((ckpt["item_frequencies"] == 0).sum()) == 0
