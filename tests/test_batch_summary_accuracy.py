"""The batch summary's accuracy columns (dot's NDCG and recall at the summary's K, the
trade-off's recommended scoring from each row's report), the K its columns are at (one
every row measured, else each row's own, said in the headers and cells) and its ranking
rule (rank_by descending, ties by severity, then the head-share ratio, then manifest row;
missing values last)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from auditor.batch.summary import summarise
from auditor.report.batch_summary import batch_document


def table() -> pa.Table:
    def report(recommended: str | None) -> str | None:
        return json.dumps({"schema_version": 1, "accuracy": {"recommended": recommended}})

    rows = [  # row, model, spearman, head ratio @10, ndcg_dot@10, recall_dot@10, report_json
        (0, "a.pt", 0.5, 2.0, 0.30, 0.40, report("alpha_0.5")),
        (1, "b.pt", 0.5, 3.0, 0.20, 0.25, report(None)),
        (2, "c.pt", 0.9, None, None, None, None),
        (3, "d.pt", None, 9.0, 0.10, 0.15, "not json {"),
        (4, "e.pt", 0.5, 3.0, None, None, json.dumps({"accuracy": None})),
    ]
    names = ("row", "model", "spearman", "head_share_1pct_ratio@10", "ndcg_dot@10", "recall_dot@10", "report_json")
    columns = {name: [r[i] for r in rows] for i, name in enumerate(names)}
    columns["status"] = ["ok"] * len(rows)
    columns["label"] = pa.array([None] * len(rows), pa.string())
    return pa.table(columns)


def test_ranking_rule_and_accuracy_columns() -> None:
    summary = summarise(table())
    # spearman descending; the tie at 0.5 by head-share ratio (3.0 before 2.0), the tie of
    # b and e (0.5, 3.0) by row; d has no spearman: last.
    assert [s.model for s in summary.ranking] == ["c.pt", "b.pt", "e.pt", "a.pt", "d.pt"]
    by_model = {s.model: s for s in summary.ranking}
    assert (by_model["a.pt"].ndcg, by_model["a.pt"].recall, by_model["a.pt"].recommended) == (0.30, 0.40, "alpha_0.5")
    assert by_model["b.pt"].recommended is None and by_model["d.pt"].recommended is None  # a broken report: none
    ranking = batch_document(summary).sections[0].blocks[0]
    assert ranking.headers[-3:] == ("NDCG@10 dot", "recall@10 dot", "recommended")  # type: ignore[union-attr]
    assert ranking.rows[3][-3:] == ("0.300", "0.400", "alpha_0.5")  # type: ignore[union-attr]


def _rows(*rows: dict[str, object]) -> pa.Table:
    """A results table of ok rows (``row``, ``model`` and the given columns; missing cells null)."""
    names = sorted({name for r in rows for name in r} - {"row", "model"})
    columns: dict[str, object] = {"row": list(range(len(rows))), "model": [r["model"] for r in rows],
                                  "status": ["ok"] * len(rows), "label": pa.array([None] * len(rows), pa.string())}
    for name in names:
        values = [r.get(name) for r in rows]
        kind = pa.string() if name in ("verdict_severity", "report_json") else pa.int64() if name == "n_items" \
            else pa.float64()
        columns[name] = pa.array(values, kind)
    return pa.table(columns)


def _report(verdict_k: int | None = None, recommended: str | None = None, at: int | None = None) -> str:
    return json.dumps({"verdict": {"quoted_k": verdict_k}, "accuracy": {"recommended": recommended, "quoted_k": at}})


def test_figures_at_a_k_every_row_measured_and_ties_by_severity() -> None:
    """The QA batch: biased.pt audited at K=10 only, fixed.pt (its rescaled copy, the same
    Spearman's rho) at 10 and 100. The head-share ratio is read at 10, which both rows
    measured (the largest K would leave biased.pt n/a), and the tie in rho goes to the
    more harmful model: moderate before low, whatever the manifest order."""
    summary = summarise(_rows(
        {"model": "fixed.pt", "spearman": 0.978, "verdict_severity": "low", "head_share_1pct_ratio@10": 13.0,
         "head_share_1pct_ratio@100": 5.1, "ndcg_dot@10": 0.2, "ndcg_dot@100": 0.4},
        {"model": "biased.pt", "spearman": 0.978, "verdict_severity": "moderate", "head_share_1pct_ratio@10": 82.67,
         "ndcg_dot@10": 0.1},
    ))
    assert summary.head_share_metric == "head_share_1pct_ratio@10" and not summary.per_row_k
    assert [(s.model, s.k, s.head_share, s.ndcg) for s in summary.ranking] == [
        ("biased.pt", 10, 82.67, 0.1), ("fixed.pt", 10, 13.0, 0.2)]
    assert summary.order[1].delta_head_share == 82.67 - 13.0
    brief = batch_document(summary).brief[1]
    assert brief.headers[6:8] == ("head_share_1pct_ratio@10", "NDCG@10 dot")  # type: ignore[union-attr]
    assert [row[2] for row in brief.rows] == ["biased.pt", "fixed.pt"]  # type: ignore[union-attr]
    # Severity breaks the tie before the ratio: a high-severity row with the smaller ratio first.
    tied = summarise(_rows({"model": "a", "spearman": 0.5, "verdict_severity": "low", "head_share_1pct_ratio@10": 9.0},
                           {"model": "b", "spearman": 0.5, "verdict_severity": "high", "head_share_1pct_ratio@10": 2.0},
                           {"model": "c", "spearman": 0.5, "head_share_1pct_ratio@10": 99.0}))
    assert [s.model for s in tied.ranking] == ["b", "a", "c"]  # no severity: after every row with one


def test_figures_at_a_k_the_verdict_would_quote() -> None:
    """The QA batch: 300-item models audited at K=10 and 100. K=100 is a third of the
    catalogue, where the verdict never looks (a moderate model read 1.33× beside a clean
    one's 1.01×): the columns are at the largest shared K within 10% of every row's
    catalogue, 10 (13.50× vs 1.01×)."""
    qa = summarise(_rows(
        {"model": "base.pt", "spearman": 0.888, "verdict_severity": "moderate", "n_items": 300,
         "head_share_1pct_ratio@10": 13.5, "head_share_1pct_ratio@100": 1.328},
        {"model": "adam.pt", "spearman": 0.507, "verdict_severity": "none", "n_items": 300,
         "head_share_1pct_ratio@10": 1.0, "head_share_1pct_ratio@100": 1.014},
    ))
    assert qa.head_share_metric == "head_share_1pct_ratio@10"
    assert [(s.model, s.k, s.head_share) for s in qa.ranking] == [("base.pt", 10, 13.5), ("adam.pt", 10, 1.0)]
    # 100 is 10% of 1,000 items but not of 300: the largest K within both is 20.
    mixed = summarise(_rows(
        {"model": "big", "spearman": 0.5, "n_items": 1000, "head_share_1pct_ratio@10": 2.0,
         "head_share_1pct_ratio@20": 2.1, "head_share_1pct_ratio@100": 1.5},
        {"model": "small", "spearman": 0.4, "n_items": 300, "head_share_1pct_ratio@10": 3.0,
         "head_share_1pct_ratio@20": 2.9, "head_share_1pct_ratio@100": 1.2}))
    assert mixed.head_share_metric == "head_share_1pct_ratio@20"
    # No shared K within 10%: the smallest shared one, as the verdict quotes its smallest K.
    tiny = summarise(_rows({"model": "t", "spearman": 0.5, "n_items": 50, "head_share_1pct_ratio@10": 2.0,
                            "head_share_1pct_ratio@20": 1.1}))
    assert tiny.head_share_metric == "head_share_1pct_ratio@10"
    # Rows sharing no K: a row's own K is its largest within 10% of its catalogue.
    own = summarise(_rows({"model": "a", "spearman": 0.1, "n_items": 150, "head_share_1pct_ratio@10": 4.0,
                           "head_share_1pct_ratio@20": 1.5},
                          {"model": "b", "spearman": 0.1, "n_items": 1000, "head_share_1pct_ratio@50": 2.5}))
    assert own.per_row_k and [s.k for s in own.order] == [10, 50]


def test_rows_sharing_no_k_show_each_row_s_own_k() -> None:
    """One row measured K=10 only, the other 100 only: no K is shared, so each row's
    figures are at its own K (the verdict's quoted K where it has a ratio there), with
    the K in every cell, no head-share trend, and no change between rows at other Ks."""
    summary = summarise(_rows(
        {"model": "a.pt", "spearman": 0.4, "head_share_1pct_ratio@10": 4.0, "ndcg_dot@10": 0.25,
         "report_json": _report(10, "alpha_0.5", 10)},
        {"model": "b.pt", "spearman": 0.6, "head_share_1pct_ratio@100": 1.5, "head_share_1pct_ratio@20": 2.5,
         "ndcg_dot@100": 0.5, "report_json": _report(100, "cosine", 100)},
    ))
    assert summary.per_row_k and summary.head_share_metric is None
    assert [(s.model, s.k, s.head_share, s.ndcg) for s in summary.ranking] == [("b.pt", 100, 1.5, 0.5),
                                                                             ("a.pt", 10, 4.0, 0.25)]
    assert summary.order[1].delta_head_share is None  # 1.5 @100 vs 4.0 @10: no change to quote
    assert [t.metric for t in summary.trends] == ["spearman"]
    document = batch_document(summary)
    ranking = document.sections[0].blocks[0]
    assert ranking.headers[6:] == ("head_share_1pct_ratio (row's K)", "NDCG dot (row's K)",  # type: ignore[union-attr]
                                   "recall dot (row's K)", "recommended")
    assert ranking.rows[0][6:] == ("1.50× @100", "0.500 @100", "n/a", "cosine @100")  # type: ignore[union-attr]
    assert ranking.rows[1][6:] == ("4.00× @10", "0.250 @10", "n/a", "alpha_0.5 @10")  # type: ignore[union-attr]
    # Without the verdict's K, a row's largest K with a ratio: b.pt at 100 again.
    plain = summarise(_rows({"model": "a.pt", "spearman": 0.1, "head_share_1pct_ratio@10": 4.0},
                            {"model": "b.pt", "spearman": 0.1, "head_share_1pct_ratio@20": 2.5,
                             "head_share_1pct_ratio@100": 1.5}))
    assert [s.k for s in plain.order] == [10, 100]


def test_recommended_column_says_its_k() -> None:
    """Every recommendation at one K: the header says it (the head-share ratio's K may differ)."""
    summary = summarise(_rows(
        {"model": "a.pt", "spearman": 0.4, "head_share_1pct_ratio@100": 4.0, "report_json": _report(10, "alpha_0.5", 10)},
        {"model": "b.pt", "spearman": 0.6, "head_share_1pct_ratio@100": 2.0, "report_json": _report(10)},
    ))
    ranking = batch_document(summary).sections[0].blocks[0]
    assert ranking.headers[6:] == ("head_share_1pct_ratio@100", "NDCG@100 dot",  # type: ignore[union-attr]
                                   "recall@100 dot", "recommended @10")
    assert [row[-1] for row in ranking.rows] == ["—", "alpha_0.5"]  # type: ignore[union-attr]


def test_an_infinite_ratio_reads_as_infinite_in_every_view(recwarn: pytest.WarningsRecorder) -> None:
    """Cosine serves none of the head in two rows (ratio +inf): the console ranking and the
    trend table print ∞× as the HTML does (they printed n/a, which reads as not measured),
    the change from ∞ to ∞ has no value, and numpy warns of no NaN arithmetic."""
    summary = summarise(_rows(
        {"model": "a.pt", "spearman": 0.9, "head_share_1pct_ratio@10": float("inf")},
        {"model": "b.pt", "spearman": 0.8, "head_share_1pct_ratio@10": 4.0},
        {"model": "c.pt", "spearman": 0.7, "head_share_1pct_ratio@10": float("inf")},
    ))
    document = batch_document(summary)
    ranking = document.brief[1]
    assert [row[6] for row in ranking.rows] == ["∞×", "4.00×", "∞×"]  # type: ignore[union-attr]
    trend = next(t for t in summary.trends if t.metric == "head_share_1pct_ratio@10")
    assert (trend.first, trend.last, trend.change) == (float("inf"), float("inf"), None)
    trends = document.brief[2]
    row = next(r for r in trends.rows if r[0] == "head_share_1pct_ratio@10")  # type: ignore[union-attr]
    assert row[1:4] == ("∞×", "∞×", "n/a")
    assert summary.order[1].delta_head_share is None  # 4.0 - inf: no change to state
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


@pytest.mark.parametrize(
    ("rank_by", "values", "expected", "words"),
    [  # (a, b, c)'s values -> the ranking; the direction each measure means more bias (diff's table)
        ("spearman", (0.1, 0.9, -0.2), ["b", "a", "c"], "most biased first"),
        ("aplt_dot@10", (0.6, 0.1, 0.3), ["b", "c", "a"],  # less long tail is more bias: lowest first
         "most biased first: lowest first, since a higher value is less bias"),
        ("coverage_ratio@10", (1.0, 0.4, 0.8), ["b", "c", "a"],
         "most biased first: lowest first, since a higher value is less bias"),
        # ΔGAP: the highest popularity lift first (QA harms F5: its distance from 0 is no bias)
        ("gap_delta_niche_dot@10", (-0.9, 0.2, 0.5), ["c", "b", "a"], "most biased first"),
        ("ndcg_dot@10", (0.2, 0.4, 0.3), ["b", "c", "a"], "highest first; ndcg_dot@10 is no bias measure"),
        ("seconds", (3.0, 1.0, 2.0), ["a", "c", "b"], "highest first; seconds is no bias measure"),
    ],
)
def test_the_ranking_reads_each_measure_in_its_bias_direction(
    rank_by: str, values: tuple[float, float, float], expected: list[str], words: str
) -> None:
    """`--rank-by aplt_dot@10` ranked the unbiased control (the most long-tail lists) first
    under "most biased first", without showing the values; now each measure ranks the way
    it means more bias, the title says how, and the ranked column is shown."""
    summary = summarise(_rows(*({"model": m, rank_by: v} for m, v in zip("abc", values))), rank_by=rank_by)
    assert [s.model for s in summary.ranking] == expected
    assert summary.rank_order == words
    ranking = batch_document(summary).sections[0].blocks[0]
    assert ranking.headers.count(rank_by) == 1  # type: ignore[union-attr]  # spearman in its own column
    assert f"Ranked by {rank_by}, {words} (ties:" in ranking.caption  # type: ignore[union-attr]


def test_the_recommended_column_and_its_caption_agree() -> None:
    """QA F10: a trade-off that keeps dot shows ``dot`` (its own recommendation), and the
    caption says so; ``—`` is a row with no recommendation (no holdout)."""
    summary = summarise(_rows(
        {"model": "a.pt", "spearman": 0.4, "report_json": _report(10, "dot", 10)},
        {"model": "b.pt", "spearman": 0.6, "report_json": _report(10)},
    ))
    ranking = batch_document(summary).sections[0].blocks[0]
    assert [row[-1] for row in ranking.rows] == ["—", "dot"]  # type: ignore[union-attr]
    caption = " ".join(ranking.caption.split())  # type: ignore[union-attr]
    assert "'dot': none clearly better than dot, keep it; '—': no holdout, or no scoring found a held-out item, or a popaudit mitigate output" in caption
    assert "none clearly better than dot)" not in caption  # the old caption called this case '—'


def test_accuracy_shows_where_the_head_share_ratio_is_undefined() -> None:
    """QA harms F3: dot's and cosine's top-1% head shares both 0 at every K leave the ratio
    undefined; the row's held-out NDCG and recall were measured all the same, so they show
    at the trade-off's K (the verdict quotes none), and the headers name it (was n/a @K)."""
    summary = summarise(_rows(
        {"model": "m1.pt", "spearman": 0.431, "verdict_severity": "moderate", "head_share_1pct_ratio@10": None,
         "ndcg_dot@10": 0.1698, "recall_dot@10": 0.25, "ndcg_dot@5": 0.07, "report_json": _report(None, "dot", 10)}))
    assert [(s.k, s.head_share, s.ndcg, s.recall) for s in summary.order] == [(10, None, 0.1698, 0.25)]
    assert not summary.per_row_k and summary.head_share_metric is None
    ranking = batch_document(summary).sections[0].blocks[0]
    assert ranking.headers[6:] == ("head_share_1pct_ratio@10", "NDCG@10 dot",  # type: ignore[union-attr]
                                   "recall@10 dot", "recommended @10")
    assert ranking.rows[0][7:9] == ("0.170", "0.250")  # type: ignore[union-attr]
    # No report K: the smallest K it measured NDCG at; rows at different Ks each say theirs.
    two = summarise(_rows({"model": "a", "spearman": 0.2, "ndcg_dot@5": 0.1, "ndcg_dot@20": 0.3},
                          {"model": "b", "spearman": 0.1, "ndcg_dot@20": 0.4}))
    assert [s.k for s in two.order] == [5, 20] and two.per_row_k
    # Without a holdout there is nothing to show: no K.
    assert summarise(_rows({"model": "c", "spearman": 0.2, "head_share_1pct_ratio@10": None})).order[0].k is None
