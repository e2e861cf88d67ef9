"""A clean checkpoint whose pickle names ``torch.serialization._get_layout`` (a sparse or
sharded tensor's layout, which torch's own weights_only unpickler allows) is not called
hostile: the global is recorded as inert, so ``unsafe_globals`` is 0 and no warning says
"treat the file as hostile" (QA plugins N1: a clean TorchRec DistributedModelParallel
checkpoint tripped ``unsafe_globals>0``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from click.testing import CliRunner

from auditor.cli import cli
from auditor.loading.pickle_globals import INERT, RUNS_CODE, severity


def test_layout_lookup_is_inert_and_its_neighbours_still_run_code() -> None:
    assert severity("torch.serialization._get_layout") == INERT
    assert severity("torch.serialization.load") == RUNS_CODE
    assert severity("torch.serialization._get_layout_x") == RUNS_CODE


def test_a_state_dict_with_a_sparse_tensor_passes_the_unsafe_globals_gate(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    items = torch.tensor(rng.normal(size=(30, 4)), dtype=torch.float32)
    torch.save({"item_embedding.weight": items, "mask": torch.eye(4).to_sparse()}, tmp_path / "model.pt")
    pq.write_table(pa.table({"user_id": rng.integers(0, 10, 200), "item_id": rng.integers(0, 30, 200)}),
                   tmp_path / "log.parquet")
    result = CliRunner().invoke(cli, ["check", str(tmp_path / "model.pt"), "--interactions", str(tmp_path / "log.parquet"),
                                      "--no-probes", "--bootstrap", "0", "-q", "--json", str(tmp_path / "r.json"),
                                      "--fail-on", "unsafe_globals>0"])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "r.json").read_text())
    names = {g["name"]: g["severity"] for g in report["replaced_globals"]}
    assert names["torch.serialization._get_layout"] == INERT and set(names.values()) == {INERT}
    assert not any("hostile" in w for w in report["warnings"])
