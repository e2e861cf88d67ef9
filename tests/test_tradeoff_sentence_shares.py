"""QA N3: the trade-off's recommendation sentence quoted head shares with its own rounding
("goes from 4.1% to 3.4%") beside tables that print 3.37%, and its -0.77 points did not
follow from 4.1 - 3.4. The sentence now quotes each share as the K's tables print it
(wording.share_row, the rule of measure_rows.scoring_cells), both to the finer cell's
decimals."""

from __future__ import annotations

from auditor.report.measure_rows import measure_cells
from auditor.result import Accuracy, CutoffMeasures, ListMeasures, RankingAccuracy
from auditor.tradeoff import judge_tradeoff
from report_samples import builtin_measures

# The QA's report: dot 12.4/300 slots, cosine 0.47%, alpha_0.75 10.1/300, popular 23.13%.
DOT, COSINE, ALPHA, POPULAR = 0.0413333, 0.0047, 0.0336667, 0.2313333


def _cut() -> CutoffMeasures:
    def lm(head: float) -> ListMeasures:
        return builtin_measures(head, 0.5, 0.6, 10.0, 0.2, 0.8, 0.3, None)

    return CutoffMeasures(lm(DOT), lm(COSINE), lm(POPULAR), 0.5, norm_aware={"alpha_0.75": lm(ALPHA)})


def test_the_sentence_quotes_the_head_shares_the_tables_print() -> None:
    # The retrieval row (and the trade-off table, which takes its cells from it).
    row = measure_cells("head_share_1pct", "pct", [DOT, COSINE, POPULAR, ALPHA])
    assert row == ["4.1%", "0.47%", "23.13%", "3.37%"]
    at = {10: {"dot": RankingAccuracy(0.2, 0.0827, 0.5, 0.2), "cosine": RankingAccuracy(0.1, 0.05, 0.3, 0.1),
               "popular": RankingAccuracy(0.0, 0.01, 0.1, 0.05), "alpha_0.75": RankingAccuracy(0.2, 0.068, 0.5, 0.2)}}
    judged = judge_tradeoff(Accuracy("p", 10, 0, at), _cut(), 10)
    assert judged.recommended == "dot" and judged.best_alternative == "alpha_0.75"
    # 3.37% as in the tables; dot's 4.1% cell to the same two decimals (4.13%), so the
    # shares subtract to the quoted change up to its last digit: 4.13 - 3.37 = 0.76 ~ 0.77.
    assert "the top-1% head share goes from 4.13% to 3.37% (-0.77 points)" in judged.recommendation
    assert "3.4%" not in judged.recommendation and "4.1%" not in judged.recommendation
    assert f"{100 * (ALPHA - DOT):+.2f}" == "-0.77"


def test_shares_that_print_alike_in_the_tables_get_the_decimals_that_tell_them_apart() -> None:
    # alpha's share 4.1301% prints "4.13%" as dot's 4.1333% would: more decimals, never "from 4.13% to 4.13%".
    close = 0.041301
    cut = CutoffMeasures(*(builtin_measures(h, 0.5, 0.6, 10.0, 0.2, 0.8, 0.3, None) for h in (DOT, COSINE, POPULAR)),
                         0.5, norm_aware={"alpha_0.75": builtin_measures(close, 0.5, 0.6, 10.0, 0.2, 0.8, 0.3, None)})
    at = {10: {"dot": RankingAccuracy(0.2, 0.0827, 0.5, 0.2), "alpha_0.75": RankingAccuracy(0.2, 0.082, 0.5, 0.2)}}
    text = judge_tradeoff(Accuracy("p", 10, 0, at), cut, 10).recommendation
    assert "goes from 4.133% to 4.130%" in text
