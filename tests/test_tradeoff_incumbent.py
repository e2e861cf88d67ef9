"""The trade-off judges a change of serving against the model's own scoring: cosine for a
model that scores by cosine (SimpleX, Keras Dot(normalize=True), an L2-normalising ONNX
graph), where dot is the change (issue "Served F7"); the JSON's changes stay against dot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from auditor.cli import cli
from auditor.result import ScoringChange
from auditor.tradeoff import Point, choose_scoring

DATA = Path(__file__).parent / "data" / "recbole"


def test_a_cosine_model_keeps_cosine_when_nothing_is_clearly_better() -> None:
    """The Keras two-tower of the finding: cosine 0.2402, dot 0.2222, every head share 0.2%."""
    points = [Point("dot", 0.2222, 0.002, 0.809), Point("cosine", 0.2402, 0.002, 0.804),
              Point("alpha_0.5", 0.2232, 0.002, 0.806)]
    chosen, sentence, alternative = choose_scoring(points, 0.98, None, "cosine")
    assert chosen == "cosine" and alternative == "alpha_0.5"  # none within the tolerance: the most accurate other
    assert sentence.startswith("no serving change is clearly better than cosine (the model's own scoring")
    assert "keeps 92.9% of cosine's NDCG (0.2232 vs 0.2402; -0.0170)" in sentence  # 0.2232 / 0.2402 = 0.92923
    assert "below the 98% accuracy tolerance" in sentence


def test_dot_is_recommended_against_cosine_only_when_clearly_better() -> None:
    """dot keeps 99% of cosine's NDCG and clearly lowers the head share (interval below 0)."""
    points = [Point("dot", 0.198, 0.010, 0.7), Point("cosine", 0.200, 0.030, 0.8)]
    changes = {"dot": ScoringChange(-0.002, -0.020, (-0.004, 0.0), (-0.03, -0.01))}
    chosen, sentence, _ = choose_scoring(points, 0.98, changes, "cosine")
    assert chosen == "dot"
    assert sentence.startswith("serve with dot: it keeps 99.0% of cosine's NDCG (0.1980 vs 0.2000")


def test_simplex_keeps_its_own_cosine_and_quotes_its_own_accuracy(tmp_path: Path) -> None:
    """SimpleX's lists are the cosine lists: its held-out NDCG@10 is RecBole's own test
    metric 0.1986 (eval.json), not dot's 0.2131; the trade-off keeps cosine."""
    out = tmp_path / "r.json"
    result = CliRunner().invoke(cli, ["check", str(DATA / "SimpleX-eval.pth"), "--interactions", str(DATA / "eval.inter"),
                                      "-k", "10", "--json", str(out), "--bootstrap", "0", "--no-probes", "-q"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    accuracy = report["accuracy"]
    recorded = json.loads((DATA / "eval.json").read_text())["runs"]["SimpleX"]["test"]["ndcg@10"]
    assert accuracy["at"]["10"]["cosine"]["ndcg"] == pytest.approx(recorded, abs=5e-5)
    assert accuracy["incumbent"] == "cosine" and accuracy["recommended"] == "cosine"
    assert "cosine serving reaches a held-out NDCG@10 of 0.1986" in report["verdict"]["summary"]
    assert "dot-product serving reaches" not in report["verdict"]["summary"]
    assert accuracy["changes"]["cosine"]["ndcg_delta"] == pytest.approx(
        accuracy["at"]["10"]["cosine"]["ndcg"] - accuracy["at"]["10"]["dot"]["ndcg"])  # still against dot
