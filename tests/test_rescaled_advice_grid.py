"""The advice of `check` on a `mitigate` output names one audit of the original (QA accuracy
F3): `--alpha` replaces the default grid, so the combined α is quoted beside the grid
`mitigate --alpha auto` chooses from (0.25, 0.5, 0.75), and the advice says which command
writes each answer that audit may give: `--alpha auto` for one of the grid, `--alpha
<combined>` for the combined α, which auto's grid lacks."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from auditor.cli import cli
from qa_norm_model import write_norm_model


def _run(*args: str) -> None:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output


def _advice(path: str) -> str:
    report = json.loads(Path(path).read_text())
    return next(r for r in report["verdict"]["recommendations"] if r.startswith("Held-out accuracy beside"))


def test_advice_on_an_output_quotes_the_whole_grid_and_the_command_for_each_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_norm_model(tmp_path)
    monkeypatch.chdir(tmp_path)
    logs = ["--interactions", "train.parquet", "--holdout", "hold.parquet", "--accuracy-tolerance", "0.95"]
    _run("mitigate", "model.pt", "--alpha", "0.75", "-o", "out75.pt", "--interactions", "train.parquet", "-q")
    _run("check", "out75.pt", *logs, "--json", "out.json", "-q")
    assert json.loads(Path("out.json").read_text())["accuracy"]["picked_on_output"] == "alpha_0.75"
    advice = _advice("out.json")
    quoted = re.search(r"audit the original table \(model\.pt\) with ((?:--alpha \S+ )+)", advice)
    assert quoted is not None, advice
    alphas = quoted.group(1).split()
    assert alphas[1::2] == ["0.5625", "0.25", "0.5", "0.75"]  # 0.75 × 0.75, then auto's grid: pass them all
    assert "where it recommends alpha_0.5625, which auto's grid lacks" in advice
    # Following it: the original's audit over the whole grid recommends the combined α
    # (95.0% of dot's NDCG@10 at tolerance 0.95: 0.2687 vs 0.2828), which --alpha 0.5625 writes
    # (the old advice quoted --alpha 0.5625 alone, whose audit and auto's disagreed: 0.5625 vs 0.75).
    _run("check", "model.pt", *logs, *alphas, "--json", "orig.json", "-q")
    accuracy = json.loads(Path("orig.json").read_text())["accuracy"]
    assert accuracy["recommended"] == "alpha_0.5625"
    at = accuracy["at"]["10"]
    assert at["alpha_0.5625"]["ndcg"] / at["dot"]["ndcg"] == pytest.approx(0.950, abs=5e-4)
    assert sorted(at) == sorted(["dot", "cosine", "popular", "alpha_0.5625", "alpha_0.25", "alpha_0.5", "alpha_0.75"])
