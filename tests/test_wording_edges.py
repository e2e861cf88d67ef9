"""Figures printed beside the harm bands keep to their side of an edge (QA F3): a dot/cosine
ratio of 1249/1000 slots is "1.249×", not "1.25×" beside a moderate band that starts at
1.25, and shares 2 points apart only when they are."""

from __future__ import annotations

import pytest

from auditor.report.formatting import fmt_ratio
from auditor.result import CutoffMeasures
from auditor.sections import HARM_BANDS
from auditor.report.formatting import fmt_interval
from auditor.wording import SKEW_EDGES, correlation_figures, interval, interval_decimals, pct_pair, ratio_figure


@pytest.mark.parametrize(("ratio", "shown"), [
    (1249 / 1000, "1.249"),   # the QA's constructed skew: graded low, 2 decimals would read 1.25
    (1.2496, "1.2496"),       # 3 decimals would still read 1.250
    (1.25, "1.25"),           # on the edge: reaches it
    (1.25 * (1 - 1e-12), "1.25"),  # within the bands' slack: graded on the edge, printed so
    (1.0999, "1.0999"),       # under low's 1.1
    (1.996, "1.996"),         # under high's 2
    (2.004, "2.004"),         # nor onto one it passes (compared_figures: two that differ never print alike)
    (4.163, "4.16"),          # far from every edge: two decimals
    (float("inf"), "∞"),
])  # fmt: skip
def test_a_ratio_never_prints_onto_an_edge_it_does_not_reach(ratio, shown):
    assert ratio_figure(ratio) == shown
    assert fmt_ratio(ratio) == f"{shown}×"
    for _name, edge, _excess in HARM_BANDS:  # the printed figure is on the side the ratio is
        assert (float(shown.replace("∞", "inf")) >= edge) == (ratio >= edge * (1 - 1e-9))


def test_shares_beside_a_band_print_their_difference_on_its_side():
    # +1.99 points, under moderate's 2: one decimal would read "10.0% vs 8.0%" (+2.0)
    assert pct_pair(0.0998, 0.0799, SKEW_EDGES) == ("9.98%", "7.99%")
    assert pct_pair(0.0998, 0.0799) == ("10.0%", "8.0%")  # elsewhere (no band beside) as before
    # the QA's +2.008 points reach the edge: "10.0% vs 8.0%" is right
    assert pct_pair(1249 / 12450, 1000 / 12450, SKEW_EDGES) == ("10.0%", "8.0%")
    assert pct_pair(0.06, 0.01, SKEW_EDGES) == ("6.0%", "1.0%")  # exactly on high's 5 points
    # +0.499 points under low's 0.5: 2.00% vs 1.50% would read +0.50
    assert pct_pair(0.019995, 0.014996, SKEW_EDGES) == ("1.999%", "1.500%")


def test_what_keeps_a_skew_out_of_the_low_band_never_rounds_onto_its_edge():
    """The shortfall sentence prints +0.49996 points beside "+0.5 points", not "+0.50"."""
    from auditor.verdict import _band_shortfall
    from auditor.harm import Skew

    skew = Skew(k=10, dot=0.0149996, cosine=0.01, overlap=None)  # ratio 1.49996, excess +0.49996 points
    assert _band_shortfall(skew).endswith("here 1.50x and +0.49996 points")


def test_the_report_headline_pair_keeps_its_difference_on_the_band_side():
    from auditor.report.formatting import MISSING, fmt_skew_pair

    assert fmt_skew_pair(0.0998, 0.0799) == ("9.98%", "7.99%")  # the Markdown/HTML headline's pair
    assert fmt_skew_pair(0.1, None) == ("10.0%", MISSING)


def test_the_retrieval_tables_print_head_shares_as_the_verdict_quotes_them():
    """QA F3 (re-verified): the verdict's "7.99% vs 6.00%" (+1.99 points, graded low) must not
    sit above a table row "8.0% | 6.0%" (+2.0 points, the moderate band's edge), in the
    console's table as in the Markdown and HTML one; the row's other cells follow its precision."""
    import dataclasses

    from report_samples import builtin_measures, full_result

    from auditor.report import content
    from auditor.report.audit_brief import _retrieval
    from auditor.report.document import Table

    def listed(head: float) -> object:
        return builtin_measures(head, head, 0.184, 20.0, 0.5, 0.5, 0.5, 5.0)

    cut = CutoffMeasures(listed(0.0799), listed(0.06), listed(0.08), 0.98, norm_aware={"alpha_0.5": listed(0.06)})
    result = full_result()
    result = dataclasses.replace(result, retrieval=dataclasses.replace(result.retrieval, at={10: cut}, recall=None))
    markdown = content.cutoff_table(10, cut, result.retrieval.list_measures)
    console = next(block for block in _retrieval(result) if isinstance(block, Table))
    for table, head in ((markdown, "head share, top 1% of items"), (console, "head_share_1pct")):
        row = {cells[0]: cells[1:] for cells in table.rows}
        # dot, cosine, dot / cosine, α=0.5, popular: as the verdict, never onto the 2-point edge
        assert row[head] == ("7.99%", "6.00%", "1.33×", "6.00%", "8.00%")
        assert row[head.replace("1", "20")][:2] == ("18.4%", "18.4%")  # far from an edge: as before
    # +2.008 points does reach the edge: "10.0% | 8.0%" is then right
    cut = CutoffMeasures(listed(1249 / 12450), listed(1000 / 12450), listed(0.1), 0.9)
    row = content.cutoff_table(10, cut, result.retrieval.list_measures).rows[0]
    assert row[1:4] == ("10.0%", "8.0%", "1.249×")


@pytest.mark.parametrize(("lo", "hi", "table", "sentence"), [
    (0.99155, 0.99462, "0.992 to 0.995", ["0.992", "0.995"]),  # QA report F3: never "0.99 to 0.99"
    (0.99612, 0.99648, "0.9961 to 0.9965", ["0.9961", "0.9965"]),  # three decimals alike: four
    (0.9999991, 0.9999996, "0.999999 to 1.000000", ["0.999999", "1.000000"]),  # bounded: six at most
    (0.22, 0.62, "0.220 to 0.620", ["0.22", "0.62"]),
    (0.5, 0.5, "0.500 to 0.500", ["0.50", "0.50"]),  # equal bounds print equal
])
def test_an_interval_prints_bounds_that_differ_apart(lo: float, hi: float, table: str, sentence: list[str]) -> None:
    assert fmt_interval(lo, hi) == table
    assert correlation_figures(lo, lo, hi)[1:] == sentence
    # The rule itself: the fewest decimals (from 2, at most 6) at which the bounds print apart.
    places = interval_decimals(lo, hi, 2)
    assert places == next((p for p in range(2, 7) if lo == hi or f"{lo:.{p}f}" != f"{hi:.{p}f}"), 6)
    # The trade-off's intervals (points, signed) follow it too.
    assert interval((lo / 100, hi / 100), 100.0, 2) == f", 95% CI [{lo:+.{places}f}, {hi:+.{places}f}]"


def test_the_headline_and_the_statistics_table_quote_one_interval() -> None:
    import dataclasses

    from report_samples import full_result

    from auditor.report.content import frequency_norm_table, headline_parts

    result = full_result()
    fn = dataclasses.replace(result.frequency_norm, spearman=0.99347, spearman_ci=(0.99155, 0.99462))
    result = dataclasses.replace(result, frequency_norm=fn)
    _phrase, evidence = headline_parts(result)
    assert "Spearman ρ = 0.993, 95% CI 0.992 to 0.995" in evidence
    rows = dict((row[0], row[1]) for row in frequency_norm_table(fn).rows)
    assert "0.992 to 0.995" in rows.values()
