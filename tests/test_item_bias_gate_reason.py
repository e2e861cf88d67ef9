"""A gate on ``item_bias_spearman`` that has no value says why in the model's terms (QA11
report F4): a model with no item bias (most models) has nothing to correlate, which is no
numeric failure ("returned no finite number ... NaN or an infinite value"); a bias that is
one value for every item has an undefined ρ. A real bias is gated on its ρ."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from click.testing import CliRunner
from scipy import stats

from auditor.cli import cli

N_ITEMS, N_USERS, DIM = 30, 12, 4
GATE = "item_bias_spearman>0.5"


def _files(folder: Path, bias: np.ndarray | None) -> list[str]:
    """A state dict (with ``item_bias.weight`` when ``bias`` is given) and a log where item i
    is seen i + 1 times; the ``check`` arguments that gate ``item_bias_spearman``."""
    rng = np.random.default_rng(4)
    weights = {"user_embedding.weight": torch.tensor(rng.normal(size=(N_USERS, DIM)), dtype=torch.float32),
               "item_embedding.weight": torch.tensor(rng.normal(size=(N_ITEMS, DIM)), dtype=torch.float32)}
    if bias is not None:
        weights["item_bias.weight"] = torch.tensor(bias[:, None], dtype=torch.float32)
    torch.save(weights, folder / "model.pt")
    items = np.repeat(np.arange(N_ITEMS), np.arange(1, N_ITEMS + 1))
    pq.write_table(pa.table({"user_id": np.arange(items.size) % N_USERS, "item_id": items}), folder / "log.parquet")
    return ["check", str(folder / "model.pt"), "--interactions", str(folder / "log.parquet"), "--no-probes",
            "--bootstrap", "0", "-k", "5", "-q", "--fail-on", GATE]


def test_a_model_without_an_item_bias_is_said_so(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, _files(tmp_path, None))
    assert result.exit_code == 1, result.output
    assert (f"Error: cannot evaluate --fail-on {GATE}: the model has no item bias (no per-item b_i added to its "
            "scores: served_vectors.source is not 'bias'), so there is no bias to correlate with training frequency; "
            "gate spearman (the item norms) instead") in result.stderr
    assert "no finite number" not in result.stderr and "NaN" not in result.stderr


def test_a_constant_item_bias_has_an_undefined_rho(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, _files(tmp_path, np.full(N_ITEMS, 0.7)))
    assert result.exit_code == 1, result.output
    assert "the item bias is the same for every item, so its Spearman ρ with training frequency is undefined" \
        in result.stderr


def test_a_real_item_bias_is_gated_on_its_rho(tmp_path: Path) -> None:
    bias = np.sin(np.arange(N_ITEMS, dtype=np.float64))  # not monotone in frequency: ρ well inside (-1, 1)
    rho = stats.spearmanr(bias.astype(np.float32), np.arange(1, N_ITEMS + 1)).statistic
    assert -0.5 < rho < 0.5
    args = _files(tmp_path, bias)[:-2] + ["--fail-on", "item_bias_spearman<0.5"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 3, result.output
    assert f"gate item_bias_spearman<0.5: {rho:.4g} (TRIPPED)" in result.stderr, result.stderr
