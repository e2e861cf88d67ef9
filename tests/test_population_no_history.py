"""A log user whose every interaction is with an item without a table row trained a
vector all the same: its user-table row is counted as such, not as untrained, and the
population says the user was left out (issue "Served F8")."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from click.testing import CliRunner

from auditor.cli import cli


def test_a_user_of_row_less_items_is_not_called_untrained(tmp_path: Path) -> None:
    g = np.random.default_rng(0)
    np.savez(tmp_path / "model.npz", user_embeddings=g.normal(size=(8, 3)).astype(np.float32),
             item_embeddings=g.normal(size=(10, 3)).astype(np.float32),
             user_ids=np.array([f"u{k}" for k in range(8)]), item_ids=np.array([f"i{k}" for k in range(10)]))
    # u0..u4 train on table items; u5 only on iX (no row); u6 and u7 never appear
    users = [f"u{k}" for k in range(5) for _ in range(3)] + ["u5", "u5"]
    items = [f"i{(k + j) % 10}" for k in range(5) for j in range(3)] + ["iX", "iX"]
    pq.write_table(pa.table({"user_id": users, "item_id": items}), tmp_path / "log.parquet")
    result = CliRunner().invoke(cli, ["check", str(tmp_path / "model.npz"), "--interactions", str(tmp_path / "log.parquet"),
                                      "--json", str(tmp_path / "r.json"), "--no-probes", "--bootstrap", "0", "-q", "-k", "2"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "r.json").read_text())
    population = report["retrieval"]["population"]
    assert population["n_untrained_user_rows"] == 2  # u6, u7 (it said 3, u5 among them)
    assert population["description"].endswith("for the 5 users in the training log "
                                               f"{tmp_path / 'log.parquet'} (1 more user of it has no interaction on a "
                                               "table row)")
    assert any(w.startswith("1 user-table row belongs to users of the training log") and "trained vectors" in w
               for w in report["warnings"]), report["warnings"]
    assert any(w.startswith("2 user-table rows belong to users who never appear") for w in report["warnings"])
