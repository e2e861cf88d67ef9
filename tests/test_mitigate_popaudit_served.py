"""``mitigate`` of a popaudit checkpoint says nothing false about what it serves (QA Api
F6): the docs/diff.md example (``mitigate sample_data/biased.pt``) printed that the stored
table "is not the item vectors the model serves" and that dot serving of the rescaled
table "is not what fixed.pt serves", where ``check`` of the same file warns of nothing. A
popaudit checkpoint stores its towers' outputs for every row as its tables, so the one true
note is kept: the state_dict's encoder weights are not rescaled."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import torch
from click.testing import CliRunner

from auditor.cli import cli
from auditor.loading.stand_in import tables_stand_in
from auditor.config import LoadOptions
from auditor.loading import load_model

SAMPLE = Path(__file__).resolve().parents[1] / "sample_data" / "biased.pt"


def test_the_stored_table_of_a_popaudit_checkpoint_is_what_it_serves(tmp_path: Path) -> None:
    model = tmp_path / "biased.pt"
    shutil.copy(SAMPLE, model)
    stored = torch.load(model, weights_only=False)
    assert torch.equal(stored["item_embeddings"], stored["state_dict"]["item_tower.table.weight"])
    assert tables_stand_in(load_model(model, LoadOptions()), users_queried=True) is None
    ran = CliRunner().invoke(cli, ["mitigate", str(model), "--alpha", "0.5", "-o", str(tmp_path / "fixed.pt")])
    assert ran.exit_code == 0, ran.output
    said = " ".join(ran.stderr.split())
    assert "not the item vectors" not in said and "scores with more than its item table" not in said
    assert "the item encoder's weights in state_dict were not" in said  # the true note stays
    table = stored["item_embeddings"].double().numpy()
    norms = np.linalg.norm(table, axis=1, keepdims=True)
    fixed = torch.load(tmp_path / "fixed.pt", weights_only=False)["item_embeddings"].double().numpy()
    np.testing.assert_allclose(fixed, table * norms ** (0.5 - 1.0), rtol=1e-6)
