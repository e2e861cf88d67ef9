"""Built-in extra measures go through popaudit_measures like plugins' (item bias vs frequency)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from auditor.audit import run_audit
from auditor.cli import cli
from auditor.config import AuditConfig

LIGHTFM = Path(__file__).parent / "data" / "lightfm"


def test_item_bias_spearman_matches_scipy_on_a_real_lightfm_model() -> None:
    expected = json.loads((LIGHTFM / "expected.json").read_text())["bias_spearman"]
    config = AuditConfig(model=LIGHTFM / "lightfm_warp.pkl", interactions=LIGHTFM / "interactions.csv",
                         probes=False, bootstrap=0, retrieval=False)
    result = run_audit(config)
    assert result.measures["item_bias_spearman"] == pytest.approx(expected, abs=1e-12)
    assert result.flat_metrics()["item_bias_spearman"] == pytest.approx(expected, abs=1e-12)


def test_no_bias_term_is_null_and_the_gate_says_not_measured(tmp_path: Path) -> None:
    args = ["check", "sample_data/biased.pt", "--interactions", "sample_data/interactions.parquet",
            "--no-probes", "--no-retrieval", "--bootstrap", "0", "-q", "--json", str(tmp_path / "r.json")]
    ran = CliRunner().invoke(cli, args + ["--fail-on", "item_bias_spearman>0.5"])
    assert ran.exit_code == 1 and "item_bias_spearman>0.5: the model has no item bias" in ran.output
    # A run that ends in an error writes no report (all outputs of a run or none); without the gate it does.
    assert "No report was written" in ran.output and not (tmp_path / "r.json").exists()
    assert CliRunner().invoke(cli, args).exit_code == 0
    assert json.loads((tmp_path / "r.json").read_text())["measures"] == {"item_bias_spearman": None}


def test_gate_on_the_bias_channel_trips() -> None:
    ran = CliRunner().invoke(cli, ["check", str(LIGHTFM / "lightfm_warp.pkl"), "--interactions",
                                   str(LIGHTFM / "interactions.csv"), "--no-probes", "--no-retrieval", "-q",
                                   "--fail-on", "item_bias_spearman>0.5"])
    assert ran.exit_code == 3, ran.output


def test_a_null_measure_is_shown_with_what_it_measures(tmp_path: Path) -> None:
    """``n/a`` alone says nothing: every report shows the measure's own description beside
    its value (which says when it is null), and the JSON keeps findings only."""
    args = ["check", "sample_data/biased.pt", "--interactions", "sample_data/interactions.parquet", "--no-probes",
            "--no-retrieval", "--bootstrap", "0", "--json", str(tmp_path / "r.json"), "--markdown", str(tmp_path / "r.md")]
    ran = CliRunner().invoke(cli, args)
    assert ran.exit_code == 0, ran.output
    row = next(line for line in ran.stdout.splitlines() if "item_bias_spearman" in line)
    assert "n/a" in row and "Spearman rho between the model's per-item bias term" in row
    markdown = (tmp_path / "r.md").read_text()
    assert "| item\\_bias\\_spearman | n/a | Spearman rho between the model's per-item bias term" in markdown
    assert "null without a bias term" in markdown
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["measures"] == {"item_bias_spearman": None} and "measure_descriptions" not in json.dumps(report)
