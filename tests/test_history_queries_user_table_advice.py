"""`check --queries history` of a model WITH a user table (QA accuracy F2): `popaudit
mitigate` has no --queries and judges with the user table, so the advice must not call the
model table-less, nor quote an `--alpha auto` that answers another trade-off; it quotes the
α this audit chose as a number (or the command's form with A to choose, where it keeps dot)
and `check OUT --queries history` to measure the output as history queries serve it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from auditor.cli import cli
from qa_norm_model import write_norm_model


@pytest.mark.parametrize("tolerance", [None, 0.8])
def test_history_queries_beside_a_user_table_quote_what_mitigate_measures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tolerance: float | None
) -> None:
    write_norm_model(tmp_path)
    monkeypatch.chdir(tmp_path)
    args = ["check", "model.pt", "--interactions", "train.parquet", "--holdout", "hold.parquet", "--queries",
            "history", "--json", "r.json", "-q", *([] if tolerance is None else ["--accuracy-tolerance", str(tolerance)])]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(Path("r.json").read_text())
    accuracy = report["accuracy"]
    ratio = accuracy["at"]["10"]["alpha_0.75"]["ndcg"] / accuracy["at"]["10"]["dot"]["ndcg"]
    assert ratio == pytest.approx(0.824, abs=5e-4)  # below the default 0.98, above 0.8
    assert accuracy["recommended"] == ("dot" if tolerance is None else "alpha_0.75")
    advice = next(r for r in report["verdict"]["recommendations"] if r.startswith("Held-out accuracy beside"))
    assert "no user table" not in advice and "--alpha auto" not in advice.replace("--alpha auto answers", "")
    assert "has no --queries option and judges any α with the user table's queries" in advice
    commands = re.findall(r"`(popaudit [^`]*)`", advice)
    if tolerance is None:  # dot kept: the command's form, A to choose
        assert commands == ["popaudit mitigate model.pt --alpha A -o OUT", "popaudit check"]
    else:  # the α this trade-off chose, as a number (mitigate's auto would judge by the user table)
        assert commands[0] == "popaudit mitigate model.pt --alpha 0.75 -o model.mitigated.pt --interactions train.parquet"
    assert "of the output with --queries history" in advice
