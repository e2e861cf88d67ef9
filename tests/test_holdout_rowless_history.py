"""A held-out user whose every training item lacks a table row is a user of the training
log, with a trained vector, not one "absent from the training log" (QA accuracy F4): the
accuracy counts them as trained but not queried (``n_users_not_sampled``), with a warning
of their own, while a user who never appears in the log stays ``n_users_not_in_training``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from click.testing import CliRunner

from auditor.cli import cli

N_USERS, N_ITEMS, DIM = 30, 40, 6


def test_user_trained_only_on_rowless_items_is_not_absent_from_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(3)
    torch.save({"user_embedding.weight": torch.from_numpy(rng.normal(size=(N_USERS, DIM)).astype(np.float32)),
                "item_embedding.weight": torch.from_numpy(rng.normal(size=(N_ITEMS, DIM)).astype(np.float32))},
               tmp_path / "model.pt")
    users, items = [], []
    for u in range(N_USERS):
        if u == 7:  # never in the training log: untrained
            continue
        chosen = rng.choice(N_ITEMS, size=5, replace=False)
        users += [u] * 5
        items += [1000 + 10 * u + j for j in range(5)] if u == 5 else chosen.tolist()  # user 5: no item on a row
    pq.write_table(pa.table({"user_id": users, "item_id": items}), tmp_path / "train.parquet")
    pq.write_table(pa.table({"user_id": list(range(N_USERS)), "item_id": [u % N_ITEMS for u in range(N_USERS)]}),
                   tmp_path / "hold.parquet")
    (tmp_path / "item_ids.txt").write_text("".join(f"{i}\n" for i in range(N_ITEMS)))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["check", "model.pt", "--interactions", "train.parquet", "--holdout",
                                      "hold.parquet", "--item-ids", "item_ids.txt", "-k", "5", "--json", "r.json",
                                      "-q", "--no-probes", "--bootstrap", "0"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(Path("r.json").read_text())
    accuracy = report["accuracy"]
    assert (accuracy["n_users_evaluated"], accuracy["n_users_not_in_training"], accuracy["n_users_not_sampled"]) == (
        N_USERS - 2, 1, 1)  # user 7 absent from the log; user 5 in it, but no training item on a row
    warnings = report["warnings"]
    assert any(w.startswith("1 of the 30 held-out users in hold.parquet trained only on items without a row")
               for w in warnings)
    assert any(w.startswith("1 of the 30 held-out users in hold.parquet never appear in the training log")
               for w in warnings)
