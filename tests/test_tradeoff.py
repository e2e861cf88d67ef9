"""The trade-off policy: Pareto front, paired bootstrap intervals and the recommended
scoring, on hand-made points and per-user values."""

from __future__ import annotations

import numpy as np
import pytest

from auditor.result import Accuracy, CutoffMeasures, ListMeasures, RankingAccuracy, ScoringChange
from report_samples import builtin_measures
from auditor.alpha import scoring_alpha
from auditor.tradeoff import (
    Point,
    UserValues,
    choose_scoring,
    head_slots,
    judge_tradeoff,
    paired_changes,
    pareto_front,
)


def _points(**values: tuple[float, float]) -> list[Point]:
    return [Point(name, ndcg, head, 0.5) for name, (ndcg, head) in values.items()]


def _sure(points: list[Point], **cis: tuple[float, float]) -> dict[str, ScoringChange]:
    """Changes against dot with the given head-share intervals (default: clearly lower)."""
    dot = next(p for p in points if p.scoring == "dot")
    return {
        p.scoring: ScoringChange(p.ndcg - dot.ndcg, p.head_share - dot.head_share, (-0.01, 0.01),
                                 cis.get(p.scoring, (p.head_share - dot.head_share - 0.01,
                                                     p.head_share - dot.head_share + 0.001)))
        for p in points if p.scoring != "dot"
    }


def test_pareto_front_drops_dominated_points() -> None:
    points = _points(dot=(0.30, 0.40), cosine=(0.25, 0.10), popular=(0.10, 0.90),
                     alpha_0_5=(0.29, 0.20), alpha_0_25=(0.24, 0.15))
    # popular: beaten by dot on both axes; alpha_0_25: beaten by cosine on both axes.
    assert pareto_front(points) == ["dot", "cosine", "alpha_0_5"]


def test_recommends_lowest_head_share_within_tolerance_when_clearly_lower() -> None:
    points = _points(dot=(0.300, 0.40), cosine=(0.250, 0.10), alpha_0_75=(0.299, 0.30),
                     alpha_0_5=(0.295, 0.20), popular=(0.1, 0.9))
    # 0.98 x 0.300 = 0.294: alpha_0_5 (0.295) keeps enough, cosine (0.250) does not.
    name, text, best = choose_scoring(points, 0.98, _sure(points))
    assert name == best == "alpha_0_5"
    assert "keeps 98.3% of dot's NDCG (0.2950 vs 0.3000; -0.0050, 95% CI [-0.0100, +0.0100])" in text
    assert "from 40.0% to 20.0% (-20.00 points, 95% CI [-21.00, -19.90])" in text


def test_an_interval_that_includes_zero_keeps_dot() -> None:
    points = _points(dot=(0.300, 0.40), alpha_0_5=(0.299, 0.39), popular=(0.1, 0.9))
    name, text, best = choose_scoring(points, 0.98, _sure(points, alpha_0_5=(-0.03, 0.01)))
    assert (name, best) == ("dot", "alpha_0_5")
    assert text.startswith("no serving change is clearly better than dot: the best alternative, alpha_0_5, ")
    assert text.endswith("but the interval of its head-share change includes 0")


def test_cosine_that_costs_nothing_is_said_so() -> None:
    points = _points(dot=(0.20, 0.40), cosine=(0.21, 0.10), alpha_0_5=(0.205, 0.2))
    name, text, _ = choose_scoring(points, 0.98, _sure(points))
    assert name == "cosine" and text.startswith("serve with cosine: it keeps 105.0% of dot's NDCG")


def test_every_change_costs_accuracy() -> None:
    points = _points(dot=(0.30, 0.40), cosine=(0.20, 0.10), alpha_0_5=(0.27, 0.2))
    name, text, best = choose_scoring(points, 0.98, _sure(points))
    assert (name, best) == ("dot", "alpha_0_5")  # the mildest: it keeps the most NDCG
    assert "alpha_0_5, keeps 90.0%" in text and text.endswith("but it is below the 98% accuracy tolerance")


def test_keeping_dot_quotes_the_tolerance_as_given_and_names_every_reason() -> None:
    """alpha_0_75 keeps 0.2712 / 0.3 = 90.4% of dot's NDCG, under a tolerance of 0.9046
    (90.46%, which a whole percent would print as 90%, 'below' 90.4%), and its head-share
    interval [-0.15, +0.0001] includes 0: both hold it back, and both are named (loosening
    the tolerance alone would still write nothing)."""
    points = _points(dot=(0.3000, 0.0010), alpha_0_75=(0.2712, 0.0005))
    name, text, best = choose_scoring(points, 0.9046, _sure(points, alpha_0_75=(-0.0015, 0.000001)))
    assert (name, best) == ("dot", "alpha_0_75")
    assert "keeps 90.4% of dot's NDCG" in text
    assert text.endswith("but it is below the 90.46% accuracy tolerance and the interval of its head-share change "
                         "includes 0")
    # Within a tolerance of 0.90 only the interval holds it back; above dot's head share it does not lower it.
    assert choose_scoring(points, 0.90, _sure(points, alpha_0_75=(-0.0015, 0.000001)))[1].endswith(
        "but the interval of its head-share change includes 0")
    raised = _points(dot=(0.3000, 0.0010), alpha_0_75=(0.2712, 0.0020))
    assert choose_scoring(raised, 0.98, _sure(raised, alpha_0_75=(0.0005, 0.0015)))[1].endswith(
        "but it is below the 98% accuracy tolerance and it does not lower the head share")


def test_without_intervals_the_point_decides_and_says_so() -> None:
    points = _points(dot=(0.30, 0.40), alpha_0_5=(0.299, 0.20))
    name, text, _ = choose_scoring(points, 0.98)
    assert name == "alpha_0_5" and text.endswith("(no bootstrap ran: the uncertainty was not measured)")


def test_popular_is_never_recommended_and_zero_dot_ndcg_is_undecided() -> None:
    points = _points(dot=(0.30, 0.40), popular=(0.35, 0.05))
    assert choose_scoring(points, 0.98)[0] == "dot"
    assert choose_scoring(_points(dot=(0.0, 0.4), cosine=(0.0, 0.1)), 0.98)[0] is None


def test_a_scoring_that_finds_what_dot_misses_is_judged_against_dot_s_zero() -> None:
    """Dot finds no held-out item, cosine finds them all with a clearly lower head share:
    cosine is recommended (it keeps at least 98% of 0 and lowers the head share), where
    the trade-off said it "cannot be judged" and sent the user to check the ids."""
    points = _points(dot=(0.0, 0.227), cosine=(1.0, 0.017), popular=(0.1, 0.9))
    name, text, best = choose_scoring(points, 0.98, _sure(points))
    assert name == best == "cosine"
    assert text.startswith("serve with cosine: it finds held-out items dot's lists miss (1.0000 vs 0.0000; ")


def test_small_shares_are_worded_so_they_differ() -> None:
    points = _points(dot=(0.30, 0.0066), alpha_0_75=(0.299, 0.0056))
    _, text, _ = choose_scoring(points, 0.98, _sure(points))
    assert "from 0.66% to 0.56%" in text


def test_head_slots_count_head_and_filled_slots() -> None:
    popularity = np.array([100, 1, 2, 3, 4, 5, 6, 7, 8, 9] * 10)  # 100 items: top 1% is one item... tied ten
    lists = {"dot": np.array([[0, 1, 10], [2, 3, -1]]), "cosine": np.array([[1, 2, 3], [4, 5, 6]])}
    slots = head_slots(lists, popularity, 3)
    # The head: items tied with the most popular (rows 0, 10, ..., 90).
    assert slots["dot"][0].tolist() == [2, 0] and slots["dot"][1].tolist() == [3, 2]
    assert slots["cosine"][0].tolist() == [0, 0] and slots["cosine"][1].tolist() == [3, 3]


def test_paired_intervals_known_answers() -> None:
    rng = np.random.default_rng(5)
    n = 2000
    dot_ndcg = rng.random(n)
    shift = rng.normal(-0.02, 0.1, n)  # alpha's NDCG: dot's plus a noisy shift
    dot_head, filled = rng.integers(0, 5, n), np.full(n, 10)
    values = UserValues(
        ndcg={"dot": dot_ndcg, "alpha_0.5": dot_ndcg + shift, "cosine": dot_ndcg},
        head_slots={"dot": (dot_head, filled), "alpha_0.5": (np.maximum(dot_head - 1, 0), filled),
                    "cosine": (dot_head, filled)},
    )
    points = [Point("dot", dot_ndcg.mean(), dot_head.sum() / filled.sum(), 0.5),
              Point("alpha_0.5", (dot_ndcg + shift).mean(), np.maximum(dot_head - 1, 0).sum() / filled.sum(), 0.5),
              Point("cosine", dot_ndcg.mean(), dot_head.sum() / filled.sum(), 0.5)]
    changes = paired_changes(points, values, 1000, seed=1)
    alpha = changes["alpha_0.5"]
    assert alpha.ndcg_delta == pytest.approx(shift.mean())
    lo, hi = alpha.ndcg_delta_ci
    # The percentile interval of a mean of n draws: mean +- 1.96 sd / sqrt(n), within sampling error.
    half = 1.96 * shift.std() / np.sqrt(n)
    assert lo == pytest.approx(shift.mean() - half, abs=0.25 * half)
    assert hi == pytest.approx(shift.mean() + half, abs=0.25 * half)
    assert alpha.head_share_delta_ci[1] < 0 and alpha.clearly_less_head
    # Identical lists: a point interval at 0, never "clearly lower".
    assert changes["cosine"].head_share_delta_ci == (0.0, 0.0) and not changes["cosine"].clearly_less_head
    # Seeded: the same intervals again.
    assert paired_changes(points, values, 1000, seed=1) == changes


def test_judge_tradeoff_fills_the_section() -> None:
    def lm(head: float) -> ListMeasures:
        return builtin_measures(head, 0.5, 0.6, 10.0, 0.2, 0.8, 0.3, None)

    cut = CutoffMeasures(lm(0.4), lm(0.1), lm(0.9), 0.5, norm_aware={"alpha_0.5": lm(0.2)})
    at = {10: {"dot": RankingAccuracy(0.2, 0.30, 0.5, 0.2), "cosine": RankingAccuracy(0.1, 0.2, 0.3, 0.1),
               "popular": RankingAccuracy(0.0, 0.1, 0.1, 0.05), "alpha_0.5": RankingAccuracy(0.2, 0.297, 0.5, 0.2)}}
    judged = judge_tradeoff(Accuracy("p", 10, 0, at), cut, 10)
    assert judged.recommended == "alpha_0.5" and judged.quoted_k == 10 and judged.best_alternative == "alpha_0.5"
    assert judged.recommendation.startswith("At K=10, serve with alpha_0.5")
    assert judged.pareto == ["dot", "cosine", "alpha_0.5"]
    assert judged.changes["alpha_0.5"].head_share_delta == pytest.approx(-0.2) and judged.n_bootstrap == 0


@pytest.mark.parametrize(("name", "alpha"), [("dot", 1.0), ("cosine", 0.0), ("alpha_0.25", 0.25), ("popular", None)])
def test_scoring_alpha(name: str, alpha: float | None) -> None:
    assert scoring_alpha(name) == alpha


def test_with_dot_at_zero_only_a_scoring_that_finds_something_is_recommended() -> None:
    """Dot and cosine find nothing, alpha_0.5 finds some: cosine's lower head share does
    not make it the choice (it "kept" 98% of 0), alpha_0.5 is; nobody is said to find what
    dot misses unless it does."""
    points = _points(dot=(0.0, 0.5), cosine=(0.0, 0.1), alpha_0_5=(0.05, 0.4))
    name, text, best = choose_scoring(points, 0.9, _sure(points))
    assert name == best == "alpha_0_5" and "finds held-out items dot's lists miss (0.0500 vs 0.0000" in text


def test_the_kept_share_agrees_with_the_tolerance_it_is_held_to() -> None:
    """NDCG 0.042638 against dot's 0.044796 keeps 95.1835% of it: under a 0.952 tolerance
    it is below, so it prints 95.18% (one decimal, 95.2%, would equal the tolerance it is
    said to be below); 0.97996 under 0.98 prints 97.996%; a share above keeps one decimal."""
    from auditor.wording import kept_share

    points = _points(dot=(0.044796, 0.023), alpha_0_65=(0.042638, 0.015))
    name, text, best = choose_scoring(points, 0.952, _sure(points, alpha_0_65=(-0.014, -0.003)))
    assert (name, best) == ("dot", "alpha_0_65")
    assert "keeps 95.18% of dot's NDCG" in text and text.endswith("but it is below the 95.2% accuracy tolerance")
    assert kept_share(0.97996, 0.98, True) == "97.996%"
    assert kept_share(0.98004, 0.98, False) == "98.0%"
    assert kept_share(0.9681, 0.98, True) == "96.8%"  # already visibly below: one decimal


def test_keeping_dot_without_intervals_says_the_uncertainty_was_not_measured() -> None:
    """With bootstrap 0 the keep-dot sentence, like the serve-with one, says so (docs/measures.md)."""
    points = _points(dot=(0.0448, 0.023), alpha_0_75=(0.0434, 0.016))
    name, text, best = choose_scoring(points, 0.98)
    assert (name, best) == ("dot", "alpha_0_75")
    assert text.endswith("but it is below the 98% accuracy tolerance (no bootstrap ran: the uncertainty was not "
                         "measured)")
