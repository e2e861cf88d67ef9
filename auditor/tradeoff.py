"""What the cure costs: the accuracy/exposure trade-off of the serving scorings, and the
one policy that picks a scoring from it (docs/report.md, "Trade-off").

Each scoring (dot, cosine, popular, alpha_<a>) is a point: held-out NDCG@K against the
top-1% head share of its lists at the same K. The recommended scoring is, among the
personalised scorings that keep at least ``tolerance`` of dot's NDCG@K, the one with the
lowest head share (ties: higher NDCG, then the scoring listed first). ``popular`` is a
reference point, never recommended.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from auditor.result import Accuracy, CutoffMeasures, RankingAccuracy

REFERENCE_SCORINGS = ("popular",)
"""Scorings shown on the trade-off but never recommended (not a way to serve a model)."""


@dataclass(frozen=True)
class Point:
    """One scoring on the trade-off at one K."""

    scoring: str
    ndcg: float
    head_share: float
    gini: float


def points(accuracy: dict[str, RankingAccuracy], cut: CutoffMeasures) -> list[Point]:
    """The scorings measured both ways (accuracy and exposure), in report order."""
    exposure = cut.scorings()
    return [
        Point(name, acc.ndcg, exposure[name].number("head_share_1pct"), exposure[name].number("gini"))
        for name, acc in accuracy.items()
        if name in exposure and math.isfinite(acc.ndcg) and math.isfinite(exposure[name].number("head_share_1pct"))
    ]


def pareto_front(candidates: list[Point]) -> list[str]:
    """Scorings no other scoring beats on both axes (higher NDCG, lower head share)."""

    def dominated(p: Point) -> bool:
        return any(
            q.ndcg >= p.ndcg and q.head_share <= p.head_share and (q.ndcg > p.ndcg or q.head_share < p.head_share)
            for q in candidates
        )

    return [p.scoring for p in candidates if not dominated(p)]


def choose_scoring(candidates: list[Point], tolerance: float) -> tuple[str | None, str]:
    """The recommended scoring and the sentence that says why, quoting both numbers."""
    by_name = {p.scoring: p for p in candidates}
    dot = by_name.get("dot")
    if dot is None:
        return None, "dot-product accuracy was not measured, so no scoring can be compared with it"
    served = [p for p in candidates if p.scoring not in REFERENCE_SCORINGS]
    if dot.ndcg <= 0:
        return None, (
            "dot-product serving finds no held-out item (NDCG 0), so the trade-off cannot be judged; "
            "check that the held-out log matches the model's ids and users"
        )
    keeps = [p for p in served if p.ndcg >= tolerance * dot.ndcg]
    best = min(keeps, key=lambda p: (p.head_share, -p.ndcg, served.index(p)))
    if best.scoring == "dot":
        mildest = max((p for p in served if p.scoring != "dot"), key=lambda p: p.ndcg, default=None)
        text = (
            f"every change costs accuracy: no scoring keeps {tolerance:.0%} of dot's NDCG "
            f"({dot.ndcg:.4f}) with a lower head share"
        )
        if mildest is not None:
            text += (
                f"; the mildest, {mildest.scoring}, keeps {mildest.ndcg / dot.ndcg:.1%} of it "
                f"({mildest.ndcg:.4f}) and moves the top-1% head share from {dot.head_share:.1%} "
                f"to {mildest.head_share:.1%}"
            )
        return "dot", text
    if best.ndcg >= dot.ndcg:
        return best.scoring, (
            f"{best.scoring} costs nothing: its NDCG ({best.ndcg:.4f}) is at least dot's "
            f"({dot.ndcg:.4f}), and the top-1% head share falls from {dot.head_share:.1%} to "
            f"{best.head_share:.1%}"
        )
    text = (
        f"serve with {best.scoring}: it keeps {best.ndcg / dot.ndcg:.1%} of dot's NDCG "
        f"({best.ndcg:.4f} vs {dot.ndcg:.4f}) and cuts the top-1% head share from "
        f"{dot.head_share:.1%} to {best.head_share:.1%}"
    )
    cosine = by_name.get("cosine")
    if cosine is not None and cosine.ndcg >= dot.ndcg:
        text += f" (cosine costs nothing either: NDCG {cosine.ndcg:.4f}, head share {cosine.head_share:.1%})"
    return best.scoring, text


def judge_tradeoff(accuracy: Accuracy, cut: CutoffMeasures, k: int) -> Accuracy:
    """``accuracy`` with the trade-off at cut-off ``k`` decided (front, choice, sentence)."""
    if k not in accuracy.at:
        return accuracy
    candidates = points(accuracy.at[k], cut)
    recommended, sentence = choose_scoring(candidates, accuracy.tolerance)
    return replace(
        accuracy,
        quoted_k=k,
        recommended=recommended,
        recommendation=f"At K={k}, {sentence}.",
        pareto=pareto_front(candidates),
    )


def scoring_alpha(scoring: str) -> float | None:
    """The exponent a scoring serves with: dot 1, cosine 0, alpha_<a> a; None otherwise."""
    if scoring == "dot":
        return 1.0
    if scoring == "cosine":
        return 0.0
    if scoring.startswith("alpha_"):
        try:
            return float(scoring[len("alpha_") :])
        except ValueError:
            return None
    return None
