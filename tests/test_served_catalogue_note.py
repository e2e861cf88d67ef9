"""Beside a model, served lists are grouped over the model's whole item table; the same
lists alone know only the items of the log and the lists. The audit beside the model
counts the rows neither trained on nor served, which can move users between groups
(Harms N1)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from click.testing import CliRunner

from auditor.cli import cli

N_USERS, N_ITEMS, DIM, K = 12, 20, 4, 3


def _audit(tmp_path: Path, n_rows: int) -> list[str]:
    """A model of ``n_rows`` item rows; the log trains on items 0..13, the lists serve 0..15."""
    rng = np.random.default_rng(5)
    users, items = rng.normal(size=(N_USERS, DIM)), rng.normal(size=(n_rows, DIM))
    torch.save({"user_embedding.weight": torch.tensor(users, dtype=torch.float32),
                "item_embedding.weight": torch.tensor(items, dtype=torch.float32)}, tmp_path / "m.pt")
    train = [(u, (u + d) % 14) for u in range(N_USERS) for d in (0, 1, 2, 5)]  # every item 0..13 trained
    pq.write_table(pa.table({"user_id": [u for u, _ in train], "item_id": [i for _, i in train]}),
                   tmp_path / "train.parquet")
    lists = [(u, 13 + (u + r) % 3, r + 1) for u in range(N_USERS) for r in range(K)]  # items 13, 14, 15
    pq.write_table(pa.table({"user_id": [x[0] for x in lists], "item_id": [x[1] for x in lists],
                             "rank": [x[2] for x in lists]}), tmp_path / "recs.parquet")
    out = tmp_path / f"r{n_rows}.json"
    ran = CliRunner().invoke(cli, ["check", str(tmp_path / "m.pt"), "--interactions", str(tmp_path / "train.parquet"),
                                   "--recommendations", str(tmp_path / "recs.parquet"), "-k", str(K), "--no-probes",
                                   "--bootstrap", "0", "-q", "--json", str(out), "-o", str(tmp_path / "r.html")])
    assert ran.exit_code == 0, ran.output
    return [w for w in json.loads(out.read_text())["warnings"] if "item rows of" in w]


def test_rows_neither_trained_nor_served_are_counted(tmp_path: Path) -> None:
    said = _audit(tmp_path, N_ITEMS)  # rows 16..19: neither trained (0..13) nor served (13..15)
    assert len(said) == 1 and said[0].startswith(
        f"4 of the {N_ITEMS} item rows of {tmp_path / 'm.pt'} are neither in the training log nor in the "
        f"served lists of {tmp_path / 'recs.parquet'}: they count in the catalogue whose top items group the users"), said


def test_no_note_when_every_row_is_trained_or_served(tmp_path: Path) -> None:
    assert _audit(tmp_path, 16) == []
