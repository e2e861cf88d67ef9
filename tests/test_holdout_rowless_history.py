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


@pytest.mark.parametrize("extra", [(30,), (30, 31)])
def test_rowless_heldout_user_who_never_trained_is_said_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extra: tuple[int, ...]
) -> None:
    # QA accuracy N2: held-out users past the user table (no row) who never appear in the
    # training log are dropped, and the warning says why (a training user without a row is
    # kept as a miss), in the right number.
    rng = np.random.default_rng(4)
    torch.save({"user_embedding.weight": torch.from_numpy(rng.normal(size=(N_USERS, DIM)).astype(np.float32)),
                "item_embedding.weight": torch.from_numpy(rng.normal(size=(N_ITEMS, DIM)).astype(np.float32))},
               tmp_path / "model.pt")
    users = np.repeat(np.arange(N_USERS), 4)
    pq.write_table(pa.table({"user_id": users, "item_id": rng.integers(0, N_ITEMS, users.size)}),
                   tmp_path / "train.parquet")
    held_users = list(range(N_USERS)) + [u for u in extra for _ in range(2)]  # each extra user: 2 interactions
    pq.write_table(pa.table({"user_id": held_users, "item_id": [(3 * u + j) % N_ITEMS for j, u in enumerate(held_users)]}),
                   tmp_path / "hold.parquet")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["check", "model.pt", "--interactions", "train.parquet", "--holdout",
                                      "hold.parquet", "-k", "5", "--json", "r.json", "-q", "--no-probes",
                                      "--bootstrap", "0"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(Path("r.json").read_text())
    accuracy = report["accuracy"]
    n = len(extra)
    assert (accuracy["n_users_evaluated"], accuracy["n_dropped_users"], accuracy["n_dropped"],
            accuracy["n_users_not_in_training"]) == (N_USERS, n, 2 * n, 0)
    said = (f"1 held-out user in hold.parquet (2 interactions) has no row in the user table and never appears in the "
            "training log on an item with a table row" if n == 1 else
            f"{n} held-out users in hold.parquet ({2 * n} interactions) have no row in the user table and never "
            "appear in the training log on an item with a table row")
    assert any(w.startswith(said) and w.endswith(": left out of the accuracy") for w in report["warnings"]), \
        report["warnings"]


def test_rowless_heldout_users_of_unknown_training_are_said_without_a_reason() -> None:
    from auditor.loading.holdout import HeldOut, HeldOutUsers

    none = np.empty(0, np.int64)
    users = HeldOutUsers(none, none, np.zeros(1, np.int64), none)
    held = HeldOut(users, "h.csv", 1, n_dropped_users=1, n_dropped_user_interactions=1)  # training users unknown
    assert held.warnings == ["1 held-out user in h.csv (1 interaction) has no row in the user table: left out of "
                             "the accuracy"]
