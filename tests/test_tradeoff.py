"""The trade-off policy: Pareto front and the recommended scoring, on hand-made points."""

from __future__ import annotations

import pytest

from auditor.result import Accuracy, CutoffMeasures, ListMeasures, RankingAccuracy
from report_samples import builtin_measures
from auditor.tradeoff import Point, choose_scoring, judge_tradeoff, pareto_front, scoring_alpha


def _points(**values: tuple[float, float]) -> list[Point]:
    return [Point(name, ndcg, head, 0.5) for name, (ndcg, head) in values.items()]


def test_pareto_front_drops_dominated_points() -> None:
    points = _points(dot=(0.30, 0.40), cosine=(0.25, 0.10), popular=(0.10, 0.90),
                     alpha_0_5=(0.29, 0.20), alpha_0_25=(0.24, 0.15))
    # popular: beaten by dot on both axes; alpha_0_25: beaten by cosine on both axes.
    assert pareto_front(points) == ["dot", "cosine", "alpha_0_5"]


def test_recommends_lowest_head_share_within_tolerance() -> None:
    points = _points(dot=(0.300, 0.40), cosine=(0.250, 0.10), alpha_0_75=(0.299, 0.30),
                     alpha_0_5=(0.295, 0.20), popular=(0.1, 0.9))
    # 0.98 x 0.300 = 0.294: alpha_0_5 (0.295) keeps enough, cosine (0.250) does not.
    name, text = choose_scoring(points, 0.98)
    assert name == "alpha_0_5"
    assert "98.3% of dot's NDCG (0.2950 vs 0.3000)" in text and "40.0% to 20.0%" in text


def test_cosine_that_costs_nothing_is_said_so() -> None:
    points = _points(dot=(0.20, 0.40), cosine=(0.21, 0.10), alpha_0_5=(0.205, 0.2))
    name, text = choose_scoring(points, 0.98)
    assert name == "cosine" and text.startswith("cosine costs nothing") and "0.2100" in text


def test_every_change_costs_accuracy() -> None:
    points = _points(dot=(0.30, 0.40), cosine=(0.20, 0.10), alpha_0_5=(0.27, 0.2))
    name, text = choose_scoring(points, 0.98)
    assert name == "dot" and text.startswith("every change costs accuracy")
    assert "alpha_0_5, keeps 90.0%" in text


def test_popular_is_never_recommended_and_zero_dot_ndcg_is_undecided() -> None:
    points = _points(dot=(0.30, 0.40), popular=(0.35, 0.05))
    assert choose_scoring(points, 0.98)[0] == "dot"
    assert choose_scoring(_points(dot=(0.0, 0.4), cosine=(0.0, 0.1)), 0.98)[0] is None


def test_judge_tradeoff_fills_the_section() -> None:
    def lm(head: float) -> ListMeasures:
        return builtin_measures(head, 0.5, 0.6, 10.0, 0.2, 0.8, 0.3, None)

    cut = CutoffMeasures(lm(0.4), lm(0.1), lm(0.9), 0.5, norm_aware={"alpha_0.5": lm(0.2)})
    at = {10: {"dot": RankingAccuracy(0.2, 0.30, 0.5, 0.2), "cosine": RankingAccuracy(0.1, 0.2, 0.3, 0.1),
               "popular": RankingAccuracy(0.0, 0.1, 0.1, 0.05), "alpha_0.5": RankingAccuracy(0.2, 0.297, 0.5, 0.2)}}
    judged = judge_tradeoff(Accuracy("p", 10, 0, at), cut, 10)
    assert judged.recommended == "alpha_0.5" and judged.quoted_k == 10
    assert judged.recommendation.startswith("At K=10, serve with alpha_0.5")
    assert judged.pareto == ["dot", "cosine", "alpha_0.5"]


@pytest.mark.parametrize(("name", "alpha"), [("dot", 1.0), ("cosine", 0.0), ("alpha_0.25", 0.25), ("popular", None)])
def test_scoring_alpha(name: str, alpha: float | None) -> None:
    assert scoring_alpha(name) == alpha
