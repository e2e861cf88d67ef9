"""`popaudit mitigate --alpha auto` and the advice around it: the remedies a refusal names,
the trade-off of history-query models, the stored split of a retrain checkpoint, the
command `check` suggests, and a table that is already a mitigation output."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from auditor.cli import cli
from auditor.errors import NoClearGainError
from auditor.mitigation.auto import recommended_alpha
from auditor.result import Accuracy, RankingAccuracy, ScoringChange


def _kept_dot(ndcg: dict[str, float], changes: dict[str, ScoringChange], best: str, tolerance: float) -> Accuracy:
    """An accuracy section whose trade-off kept dot at K=10, ``best`` its best alternative."""
    at = {10: {name: RankingAccuracy(recall=v, ndcg=v, hit_rate=v, mrr=v) for name, v in ndcg.items()}}
    return Accuracy(protocol="", n_users_evaluated=100, n_dropped=0, at=at, tolerance=tolerance, quoted_k=10,
                    recommended="dot", recommendation="At K=10, no serving change is clearly better than dot.",
                    changes=changes, best_alternative=best)


def _refusal(accuracy: Accuracy) -> str:
    with pytest.raises(NoClearGainError) as caught:
        recommended_alpha(SimpleNamespace(accuracy=accuracy, not_measured={}))  # type: ignore[arg-type]
    return str(caught.value)


def test_a_refusal_blocked_by_the_interval_does_not_offer_a_looser_tolerance() -> None:
    """The best alternative keeps far more than the tolerance; its head-share interval
    includes 0: loosening the tolerance admits nothing, so it is not offered."""
    accuracy = _kept_dot(
        {"dot": 0.0088, "cosine": 0.0127, "alpha_0.5": 0.0100},
        {"cosine": ScoringChange(0.0039, -0.0002, (0.0013, 0.0072), (-0.0005, 0.00001)),
         "alpha_0.5": ScoringChange(0.0012, -0.0001, (0.0001, 0.002), (-0.0003, 0.0001))},
        "cosine", tolerance=0.01)
    said = _refusal(accuracy)
    assert said.endswith("the best available is alpha 0 (cosine): pass it to write that table anyway")
    assert "accuracy_tolerance" not in said


def test_a_refusal_blocked_by_the_tolerance_names_the_tolerance_that_admits_a_scoring() -> None:
    """Cosine clearly lowers the head share but keeps 70% of dot's NDCG (below 0.98);
    alpha_0.5 keeps 95% (below 0.98 too) and its interval includes 0. The refusal offers
    alpha_0.5 anyway, and a tolerance of 0.7 (0.14 / 0.2), which admits cosine."""
    accuracy = _kept_dot(
        {"dot": 0.20, "cosine": 0.14, "alpha_0.5": 0.19},
        {"cosine": ScoringChange(-0.06, -0.2, (-0.07, -0.05), (-0.25, -0.15)),
         "alpha_0.5": ScoringChange(-0.01, -0.01, (-0.02, 0.0), (-0.03, 0.01))},
        "alpha_0.5", tolerance=0.98)
    said = _refusal(accuracy)
    assert said.endswith("the best available is alpha 0.5 (alpha_0.5): pass it to write that table anyway, or "
                         "accuracy_tolerance 0.7 admits cosine, which clearly lowers the head share and keeps 70.0% "
                         "of dot's NDCG")
    assert 0.7 * 0.20 <= 0.14  # the tolerance quoted does admit it


def test_an_alternative_that_does_not_lower_the_head_share_is_not_offered() -> None:
    accuracy = _kept_dot({"dot": 0.20, "cosine": 0.21},
                         {"cosine": ScoringChange(0.01, 0.02, (0.0, 0.02), (0.01, 0.03))}, "cosine", tolerance=0.98)
    assert _refusal(accuracy).endswith("the trade-off keeps dot-product serving. At K=10, no serving change is "
                                       "clearly better than dot")


# ------------------------------------------------------------------ a table mitigate already wrote


def _mitigate(*args: Any, code: int = 0) -> Any:
    result = CliRunner().invoke(cli, ["mitigate", *(str(a) for a in args)])
    assert result.exit_code == code, result.output
    return result


def test_rescaling_a_mitigate_output_again_warns_with_the_combined_exponent(tmp_path: Path) -> None:
    """Norms 1..16 (rows along the axes): alpha 0.5 then 0.5 again leaves |k|^0.25 in all
    (norms 1, 2^(0.25*k)...); the warning and the sidecar say so; a third round carries
    0.125; a file that is not the one the sidecar describes gets no warning."""
    norms = np.array([1.0, 2.0, 4.0, 16.0])
    np.save(tmp_path / "items.npy", (np.eye(4) * norms[:, None]).astype(np.float32))
    first = _mitigate(tmp_path / "items.npy", "--alpha", "0.5", "-o", tmp_path / "h.npy")
    assert "already rescaled" not in first.output
    second = _mitigate(tmp_path / "h.npy", "--alpha", "0.5", "-o", tmp_path / "q.npy")
    said = (f"{tmp_path / 'h.npy'} is already rescaled by alpha 0.5 (its sidecar {tmp_path / 'h.npy'}.popaudit.json "
            "says so): rescaling it again by alpha 0.5 leaves the original's norms raised to 0.25 in all, and each "
            "round may give up accuracy again; to serve another alpha, rescale the original table once")
    assert "".join(f"note: {said}".split()) in "".join(second.output.split())  # the console wraps long paths
    np.testing.assert_allclose(np.linalg.norm(np.load(tmp_path / "q.npy"), axis=1), norms**0.25, rtol=1e-6)
    side = json.loads((tmp_path / "q.npy.popaudit.json").read_text())
    assert side["input_rescaled"] == {"alpha": 0.5, "sidecar": str(tmp_path / "h.npy.popaudit.json"),
                                      "combined_alpha": 0.25}
    assert said in side["warnings"]
    _mitigate(tmp_path / "q.npy", "--alpha", "0.5", "-o", tmp_path / "e.npy", "-q")
    assert json.loads((tmp_path / "e.npy.popaudit.json").read_text())["input_rescaled"]["combined_alpha"] == 0.125
    np.save(tmp_path / "h.npy", np.eye(4, dtype=np.float32))  # no longer the file its sidecar describes
    third = _mitigate(tmp_path / "h.npy", "--alpha", "0.5", "-o", tmp_path / "x.npy")
    assert "already rescaled" not in third.output
    assert json.loads((tmp_path / "x.npy.popaudit.json").read_text())["input_rescaled"] is None
