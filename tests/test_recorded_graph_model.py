"""A checkpoint that is no RecBole file but records a model serving more than its tables
(``model: LightGCN`` in Lightning's hyper-parameters) is audited on its stored tables only
with that said first, as the RecBole route says it: the served figures' gates are not
measured (exit 1), never passed on the layer-0 tables (auditor/loading/recbole_models.py
``recorded_serving``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from click.testing import CliRunner

from auditor.cli import cli
from auditor.loading.recbole_models import recorded_serving


def write_model(tmp_path: Path, model: str) -> tuple[Path, Path]:
    g = np.random.default_rng(0)
    users, items = g.normal(size=(6, 3)).astype(np.float32), g.normal(size=(8, 3)).astype(np.float32)
    state = {"embedding_user.weight": torch.from_numpy(users), "embedding_item.weight": torch.from_numpy(items)}
    path = tmp_path / "model.ckpt.pt"
    torch.save({"state_dict": state, "hyper_parameters": {"model": model, "n_layers": 3, "lr": 0.001}}, path)
    log = tmp_path / "log.parquet"
    pairs = np.array([(u, (u + k) % 8) for u in range(6) for k in range(3)])
    pq.write_table(pa.table({"user_id": pa.array(pairs[:, 0]), "item_id": pa.array(pairs[:, 1])}), log)
    return path, log


def audit(model: Path, log: Path, *extra: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["check", str(model), "--interactions", str(log), "--no-probes", "--bootstrap",
                                      "0", "-q", "-k", "2", *extra], catch_exceptions=False)
    return result.exit_code, result.output


def test_a_lightning_checkpoint_of_lightgcn_says_its_tables_stand_in(tmp_path: Path) -> None:
    model, log = write_model(tmp_path, "LightGCN")
    code, output = audit(model, log, "--json", str(tmp_path / "r.json"))
    assert code == 0, output
    report: dict[str, Any] = json.loads((tmp_path / "r.json").read_text())
    served = report["served_vectors"]
    assert served["model"] == "LightGCN" and served["source"] == "tables" and served["as_served"] is False
    assert report["warnings"][0].startswith("audited the stored tables by their dot products; the model (LightGCN) "
                                            "scores with the mean of layers 0..n_layers of light-graph propagation")
    assert report["verdict"]["summary"].startswith("This audit is of the stored tables, not of the vectors LightGCN")
    code, output = audit(model, log, "--fail-on", "served_spearman>0.3")
    assert code == 1 and "stored tables stand in" in output, output


def test_a_recorded_model_that_serves_its_tables_changes_nothing(tmp_path: Path) -> None:
    model, log = write_model(tmp_path, "BPR")
    code, output = audit(model, log, "--json", str(tmp_path / "r.json"))
    assert code == 0, output
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["served_vectors"] is None and not report["warnings"]


@pytest.mark.parametrize(("config", "kind"), [
    ({"model": "lightgcn"}, "propagated"), ({"model_name": "SimGCL"}, "propagated"), ({"model": "SimpleX"}, "simplex"),
    ({"model": "NGCF"}, "cached"), ({"model": "BPR"}, None), ({"model": "MyTwoTower"}, None), ({}, None), (None, None),
])  # fmt: skip
def test_recorded_serving_by_name(config: dict[str, Any] | None, kind: str | None) -> None:
    found = recorded_serving(config)
    assert (found.kind if found is not None else None) == kind
