"""Accuracy QA9 N3: a `mitigate` output whose trade-off keeps its own scoring (dot) tags that
row "picked on this output", not "picked on this output, not recommended": serving the
output by dot is how it is meant to be served, so "not recommended" there read as "do not
serve this output". A pick that would change the serving keeps the full tag."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from auditor.cli import cli
from auditor.report import accuracy as accuracy_view
from auditor.result import Accuracy, RankingAccuracy
from report_samples import full_result
from qa_norm_model import write_norm_model


def _tags(**choice: str | None) -> dict[str, str]:
    """Each scoring's tag in the trade-off table at K=10 of an accuracy section chosen as ``choice``."""
    at = {10: {"dot": RankingAccuracy(0.2, 0.30, 0.5, 0.2), "cosine": RankingAccuracy(0.1, 0.2, 0.3, 0.1)}}
    accuracy = Accuracy("p", 10, 0, at, quoted_k=10, **choice)  # type: ignore[arg-type]
    table = accuracy_view.tradeoff_table(replace(full_result(), accuracy=accuracy), 10)
    return {row[0]: row[-1] for row in table.rows}


def test_the_tag_of_a_mitigate_outputs_pick_says_not_recommended_only_of_a_change() -> None:
    assert _tags(recommended="dot")["dot product"] == "recommended"  # an ordinary model: unchanged
    kept = _tags(picked_on_output="dot")
    assert kept["dot product"] == "picked on this output" and kept["cosine"] == ""  # was "..., not recommended"
    assert _tags(picked_on_output="cosine")["cosine"] == "picked on this output, not recommended"
    assert _tags(picked_on_output="cosine", incumbent="cosine")["cosine"] == "picked on this output"  # its own


@pytest.mark.filterwarnings("ignore")
def test_the_qa_output_whose_trade_off_keeps_dot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """QA9 N3's repro: the output at alpha 0.9 checked with tolerance 0.999 keeps dot (old code:
    "| dot product | ... | picked on this output, not recommended, Pareto front |")."""
    monkeypatch.chdir(tmp_path)
    write_norm_model(tmp_path)
    run = CliRunner().invoke
    assert run(cli, ["mitigate", "model.pt", "--alpha", "0.9", "-o", "a09.pt", "--interactions", "train.parquet",
                     "-q"]).exit_code == 0
    checked = run(cli, ["check", "a09.pt", "--interactions", "train.parquet", "--holdout", "hold.parquet",
                        "--no-probes", "-q", "--accuracy-tolerance", "0.999", "--json", "o.json", "--markdown", "o.md"])
    assert checked.exit_code == 0, checked.output
    accuracy = json.loads(Path("o.json").read_text())["accuracy"]
    assert accuracy["recommended"] is None and accuracy["picked_on_output"] == "dot"
    row = next(line for line in Path("o.md").read_text().splitlines() if line.startswith("| dot product | 0."))
    assert row.endswith("| picked on this output, Pareto front |") and "not recommended" not in row
