"""``served_spearman`` of a model that adds an item bias (QA measures F3): the served vectors
[i, b_i] have norms √(‖i‖² + b_i²), U-shaped in b_i, so their ρ with frequency can read ≈0
for a bias that ranks popular items up with ρ = 1. The flat figure (and ``served_loglog_slope``)
is null for such a model, so a gate on it is not measured (exit 1) and names
``item_bias_spearman``, which gates the bias; the JSON keeps the served vectors' statistics."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from click.testing import CliRunner
from scipy import stats

from auditor.cli import cli
from auditor.flat import flat_metrics_from_report

N_ITEMS, N_USERS = 60, 40


def _centred_bias_model(folder: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Unit-norm item factors (no norm signal) and b_i = 2·(log1p f_i − mean): rare items get
    negative biases, popular ones positive; returns (frequencies, factors, bias)."""
    rng = np.random.default_rng(0)
    p = 1.0 / np.arange(1, N_ITEMS + 1) ** 1.1
    rows = [(u, int(i)) for u in range(N_USERS)
            for i in rng.choice(N_ITEMS, size=rng.integers(3, 10), replace=False, p=p / p.sum())]
    log = np.array(rows)
    freq = np.bincount(log[:, 1], minlength=N_ITEMS)
    factors = rng.normal(size=(N_ITEMS, 8))
    factors /= np.linalg.norm(factors, axis=1, keepdims=True)
    bias = 2.0 * (np.log1p(freq) - np.log1p(freq).mean())
    torch.save({"user_embedding.weight": torch.tensor(rng.normal(size=(N_USERS, 8)), dtype=torch.float32),
                "item_embedding.weight": torch.tensor(factors, dtype=torch.float32),
                "item_bias.weight": torch.tensor(bias[:, None], dtype=torch.float32)}, folder / "model.pt")
    pq.write_table(pa.table({"user_id": log[:, 0], "item_id": log[:, 1]}), folder / "train.parquet")
    return freq, factors.astype(np.float32).astype(np.float64), bias.astype(np.float32).astype(np.float64)


def _check(folder: Path, *gates: str) -> tuple[int, str]:
    args = ["check", str(folder / "model.pt"), "--interactions", str(folder / "train.parquet"), "-k", "5",
            "--seed", "1", "--bootstrap", "0", "--no-probes", "-q", "--json", str(folder / "r.json")]
    result = CliRunner().invoke(cli, [*args, *(a for g in gates for a in ("--fail-on", g))])
    return result.exit_code, " ".join(result.output.split())


def test_served_spearman_is_null_for_a_bias_model_and_its_gate_points_at_the_bias(tmp_path: Path) -> None:
    freq, factors, bias = _centred_bias_model(tmp_path)
    bias_rho = stats.spearmanr(bias, freq).statistic
    norm_rho = stats.spearmanr(np.linalg.norm(np.c_[factors, bias], axis=1), freq).statistic
    assert bias_rho > 0.99 and abs(norm_rho) < 0.1  # the bias follows popularity; the served norms do not
    code, output = _check(tmp_path)
    assert code == 0, output
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["served_vectors"]["source"] == "bias"
    assert abs(report["served_vectors"]["frequency_norm"]["spearman"]) < 0.1  # kept, as described: ≈ norm_rho
    assert abs(report["measures"]["item_bias_spearman"] - bias_rho) < 1e-9
    flat = flat_metrics_from_report(report)
    assert flat["served_spearman"] is None and flat["served_loglog_slope"] is None  # was ≈ -0.03: the gate passed
    code, output = _check(tmp_path, "served_spearman>0.3")
    assert code == 1, output  # was 0
    assert ("served_spearman is not comparable for a model that adds an item bias" in output
            and "gate item_bias_spearman" in output), output
    code, output = _check(tmp_path, "item_bias_spearman>0.5")
    assert code == 3 and "item_bias_spearman>0.5" in output and "TRIPPED" in output, output
