"""C4's gradient-alignment probe grades no slot whose gradient is rounding (retrain QA F7):
at dim 1 the cosine loss's gradient is exactly 0 (q/‖q‖ = sign q), so C4 is decided by the
loss, with the probe's reason, not graded violated; the dot loss at dim 1 stays violated
(any non-zero 1-d gradient is parallel to q: alignment exactly 1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from auditor.cli import cli
from auditor.probes.copies import tolerance
from auditor.probes.numerics import gradient_rounding_floor

SMALL = ["--dim", "1", "--n-users", "50", "--n-items", "60", "--n-interactions", "1000", "--epochs", "2",
         "--threads", "1", "-q"]


def _c4(tmp_path: Path, *extra: str) -> tuple[dict, dict]:
    out, report = tmp_path / "m.pt", tmp_path / "r.json"
    got = CliRunner().invoke(cli, ["retrain", *SMALL, *extra, "-o", str(out)])
    assert got.exit_code == 0, got.output
    got = CliRunner().invoke(cli, ["check", str(out), "-q", "--bootstrap", "0", "--json", str(report)])
    assert got.exit_code == 0, got.output
    audit = json.loads(report.read_text())
    return audit["conditions"]["C4"], audit["probes"]["c4_gradient_alignment"]


def test_dim_one_cosine_is_not_graded_from_rounding(tmp_path: Path) -> None:
    c4, probe = _c4(tmp_path)
    assert c4["status"] == "holds"
    assert "graded no item slot" in c4["evidence"] and "in one dimension" in c4["evidence"]
    assert probe["n"] == 0 and probe["orthogonal"] is None and probe["n_rounding"] > 0


def test_dim_one_dot_loss_stays_violated(tmp_path: Path) -> None:
    c4, probe = _c4(tmp_path, "--loss", "infonce-dot")
    assert c4["status"] == "violated" and probe["n_rounding"] == 0
    assert probe["max"] == pytest.approx(1.0) and probe["median"] == pytest.approx(1.0)


def test_floor_formula() -> None:
    for dtype in (torch.float32, torch.float64):
        eps = torch.finfo(dtype).eps
        assert gradient_rounding_floor(-5.0, 250, dtype) == pytest.approx(10 * eps / tolerance(dtype) * 5.0 / 250)
