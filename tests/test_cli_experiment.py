"""``popaudit experiment`` through click's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from auditor.cli import cli

SMALL = ["--n-users", "200", "--n-items", "200", "--n-interactions", "6000", "--epochs", "2", "--bootstrap", "50"]


def test_conditions_subset_writes_results(tmp_path: Path) -> None:
    out = tmp_path / "cond"
    res = CliRunner().invoke(
        cli, ["experiment", "conditions", *SMALL, "--seeds", "1", "--settings", "reference,adam,low-lr", "-o", str(out)]
    )
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in out.iterdir()) == ["angle_histograms.png", "results.json", "results.md", "rho_vs_lr.png"]
    doc = json.loads((out / "results.json").read_text())
    assert [r["name"] for r in doc["rows"]] == ["reference", "adam", "low-lr"]
    assert doc["seeds"] == [0] and doc["sizes"]["n_items"] == 200
    ref, adam = doc["rows"][0]["runs"][0], doc["rows"][1]["runs"][0]
    assert ref["share_90pm1"] >= 0.99 > adam["share_90pm1"]
    assert "| setting | violates |" in res.output and f"Wrote {out / 'results.md'}" in res.output


def test_lr_sweep_with_given_rates_and_seeds(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        cli, ["experiment", "lr-sweep", *SMALL, "--lrs", "0.1,10", "--seeds", "2", "--seed", "4", "-o", str(tmp_path)]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["experiment"] == "lr-sweep" and doc["seeds"] == [4, 5]
    assert [r["config"]["lr"] for r in doc["rows"]] == [0.1, 10.0]
    assert [run["seed"] for run in doc["rows"][0]["runs"]] == [4, 5]
    assert (tmp_path / "rho_vs_lr.png").stat().st_size > 0


def test_errors_and_usage(tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(cli, ["experiment", "lr-sweep", "--lrs", "0.1,fast", "-o", str(tmp_path)])
    assert res.exit_code == 1 and "Error:" in res.output and "--lrs" in res.output
    res = runner.invoke(cli, ["experiment", "conditions", "--settings", "reference,rmsprop", "-o", str(tmp_path)])
    assert res.exit_code == 1 and "rmsprop" in res.output
    assert runner.invoke(cli, ["experiment", "ablation", "-o", str(tmp_path)]).exit_code == 2
    assert runner.invoke(cli, ["experiment", "conditions"]).exit_code == 2  # -o is required
    help_text = runner.invoke(cli, ["experiment", "--help"]).output
    for word in ("conditions", "lr-sweep", "--seeds", "--output"):
        assert word in help_text
