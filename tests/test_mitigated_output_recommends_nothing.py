"""Accuracy QA9 F1: the audit of a `popaudit mitigate` output recommends no scoring. Its
trade-off is measured against its own, already rescaled dot, so the scoring it picks is
named (`accuracy.picked_on_output`), never recommended: `accuracy.recommended` is null, and
every reader of that field (the sentence, the trade-off table's tag, batch's "recommended"
column, `mitigate --alpha auto`, the advice) follows the one rule in `judge_tradeoff`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from auditor.cli import cli
from report_samples import builtin_measures
from auditor.result import Accuracy, CutoffMeasures, ListMeasures, RankingAccuracy
from auditor.tradeoff import judge_tradeoff
from qa_norm_model import write_norm_model


def _lm(head: float) -> ListMeasures:
    return builtin_measures(head, 0.5, 0.6, 10.0, 0.2, 0.8, 0.3, None)


def _judged(carried: float | None) -> Accuracy:
    """alpha_0.5 keeps 99% of dot's NDCG (0.297 vs 0.30) with half dot's head share: the pick."""
    cut = CutoffMeasures(_lm(0.4), _lm(0.1), _lm(0.9), 0.5, norm_aware={"alpha_0.5": _lm(0.2)})
    at = {10: {"dot": RankingAccuracy(0.2, 0.30, 0.5, 0.2), "cosine": RankingAccuracy(0.1, 0.2, 0.3, 0.1),
               "popular": RankingAccuracy(0.0, 0.1, 0.1, 0.05), "alpha_0.5": RankingAccuracy(0.2, 0.297, 0.5, 0.2)}}
    return judge_tradeoff(Accuracy("p", 10, 0, at), cut, 10, carried=carried)


def test_a_mitigate_outputs_pick_is_named_not_recommended() -> None:
    plain, output = _judged(None), _judged(0.9)
    assert plain.recommended == "alpha_0.5" and plain.picked_on_output is None
    assert output.recommended is None and output.picked_on_output == "alpha_0.5"
    assert "serve with" not in output.recommendation
    assert output.recommendation.startswith(
        "At K=10, against this output's own dot serving the trade-off picks alpha_0.5, which is no recommendation "
        "(the output already carries alpha 0.9")
    # the figures quoted are the same measurement: 99.0% of dot's NDCG, 0.2970 vs 0.3000
    assert "keeps 99.0% of dot's NDCG (0.2970 vs 0.3000" in output.recommendation
    assert output.pareto == plain.pareto and output.changes == plain.changes


def _run(*args: Any) -> Any:
    result = CliRunner().invoke(cli, [str(a) for a in args])
    return result


@pytest.mark.filterwarnings("ignore")
def test_check_of_a_mitigate_output_recommends_nothing_in_any_format(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """QA9's case: the output at alpha 0.9 checked with tolerance 0.97 picks alpha_0.75 against
    its own dot (old code: `recommended` "alpha_0.75", "serve with alpha_0.75", tagged
    "recommended", batch "alpha_0.75"); now null, named as the output's pick, batch "—"."""
    monkeypatch.chdir(tmp_path)
    write_norm_model(tmp_path)
    assert _run("mitigate", "model.pt", "--alpha", "0.9", "-o", "a09.pt", "--interactions", "train.parquet",
                "-q").exit_code == 0
    checked = _run("check", "a09.pt", "--interactions", "train.parquet", "--holdout", "hold.parquet", "--no-probes",
                   "--accuracy-tolerance", "0.97", "-q", "--json", "a.json", "--markdown", "a.md")
    assert checked.exit_code == 0, checked.output
    accuracy = json.loads(Path("a.json").read_text())["accuracy"]
    assert accuracy["recommended"] is None and accuracy["picked_on_output"] == "alpha_0.75"
    assert "serve with" not in accuracy["recommendation"]
    markdown = Path("a.md").read_text()
    assert "serve with alpha_0.75" not in markdown
    row = next(line for line in markdown.splitlines() if line.startswith("| norm-aware α=0.75 | 0."))
    assert "picked on this output, not recommended" in row and "| recommended" not in row
    Path("man.csv").write_text("model,accuracy_tolerance\na09.pt,0.97\n")
    batch = _run("batch", "man.csv", "-o", "b.parquet", "--interactions", "train.parquet", "--holdout",
                 "hold.parquet", "--no-probes", "-q")
    assert batch.exit_code == 0, batch.output
    from auditor.batch.summary import summarise

    (summary_row,) = summarise(pq.read_table("b.parquet")).ranking
    assert summary_row.recommended is None
    again = _run("mitigate", "a09.pt", "--alpha", "auto", "-o", "again.pt", "--interactions", "train.parquet",
                 "--holdout", "hold.parquet", "--accuracy-tolerance", "0.97", "-q")
    said = " ".join(again.output.split())
    assert again.exit_code == 1 and "a09.pt is already a popaudit mitigate output carrying alpha 0.9" in said
    assert "original table (model.pt)" in said
    assert not Path("again.pt").exists()


def test_a_history_query_output_whose_pick_is_dot_quotes_no_auto_command(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A mitigate output without a user table, whose trade-off keeps dot (tolerance 1: no alpha
    keeps all of dot's NDCG): its advice quoted `popaudit mitigate OUT --alpha auto` for history
    queries, a command that now refuses a mitigate output."""
    monkeypatch.chdir(tmp_path)
    write_norm_model(tmp_path)
    assert _run("mitigate", "items.npy", "--alpha", "0.5", "-o", "out.npy", "-q").exit_code == 0
    checked = _run("check", "out.npy", "--interactions", "train.parquet", "--holdout", "hold.parquet", "--no-probes",
                   "--accuracy-tolerance", "1", "-q", "--json", "o.json")
    assert checked.exit_code == 0, checked.output
    report = json.loads(Path("o.json").read_text())
    assert report["accuracy"]["recommended"] is None and report["accuracy"]["picked_on_output"] == "dot"
    advice = " ".join(report["verdict"]["recommendations"])
    assert "--alpha auto" not in advice and "popaudit mitigate" not in advice, advice
