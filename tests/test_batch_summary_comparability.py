"""The batch summary compares two rows' figures exactly where ``popaudit diff`` compares
them between the rows' reports (QA8 scale F1): another retrieval index (exact vs IVF),
another popularity definition, or a catalogue whose top-1% head holds another number of
items make a change or trend "not comparable", with diff's reason, and the results table
carries the ``index`` and ``popularity`` columns that say why."""

from __future__ import annotations

import copy
import io
import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from rich.console import Console

from auditor.cli import cli

ROOT = Path(__file__).resolve().parents[1]
HEAD = "head_share_1pct_ratio@10"


@pytest.fixture(scope="module")
def one_row(tmp_path_factory: pytest.TempPathFactory) -> pa.Table:
    """A real one-row results table (sample model and log, exact search, K = 10)."""
    d = tmp_path_factory.mktemp("batch_comparability")
    for name in ("biased.pt", "interactions.parquet"):
        shutil.copy(ROOT / "sample_data" / name, d / name)
    (d / "man.csv").write_text("model,label\nbiased.pt,a\n")
    result = CliRunner().invoke(cli, ["batch", str(d / "man.csv"), "-o", str(d / "r.parquet"), "--interactions",
                                      str(d / "interactions.parquet"), "-k", "10", "--bootstrap", "0", "--no-probes",
                                      "-q"])  # fmt: skip
    assert result.exit_code == 0, result.output
    return pq.read_table(d / "r.parquet")


def test_results_say_index_and_popularity(one_row: pa.Table) -> None:
    """The columns a reader needs to see why two rows do not compare (before: neither existed)."""
    names = one_row.column_names
    assert names.index("seen_items") < names.index("index") < names.index("popularity") < names.index("seconds")
    assert (one_row.column("index")[0].as_py(), one_row.column("popularity")[0].as_py()) == ("exact", "interactions")


def _variant(record: dict[str, Any], row: int, ratio: float, **changes: Any) -> dict[str, Any]:
    """The row's record with its report's settings changed (``retrieval_index`` etc.) and a
    head-share ratio of ``ratio``."""
    report = copy.deepcopy(json.loads(record["report_json"]))
    if "index" in changes:
        report["retrieval"]["index"] = changes["index"]
        report["retrieval"]["recall"] = {"10": 0.53}
    if "popularity" in changes:
        report["retrieval"]["popularity"] = changes["popularity"]
    if "n_items" in changes:
        report["inputs"]["n_items"] = changes["n_items"]
    return {**record, "row": row, "label": f"r{row}", HEAD: ratio, "n_items": report["inputs"]["n_items"],
            "index": report["retrieval"]["index"], "popularity": report["retrieval"]["popularity"],
            "report_json": json.dumps(report)}


def test_summary_follows_diff_on_index_popularity_and_head_size(one_row: pa.Table) -> None:
    from auditor.batch.summary import summarise
    from auditor.diff import diff_reports
    from auditor.metrics.popularity_sets import head_count
    from auditor.report.batch_summary import summary_console, summary_html

    record = one_row.to_pylist()[0]
    n = json.loads(record["report_json"])["inputs"]["n_items"]
    bigger = 3 * n + 100
    assert head_count(1.0, n) != head_count(1.0, bigger)  # the top-1% head holds another number of items
    records = [
        _variant(record, 0, 33.80),
        _variant(record, 1, 22.39, index="ivf"),  # the index's 0.53 recall, not the model: -11.41 before
        _variant(record, 2, 33.85, popularity="users"),  # +11.46 before
        _variant(record, 3, 23.72, n_items=bigger),  # another head size
        _variant(record, 4, 30.00, n_items=bigger),  # the same settings as row 3: compared, +6.28
        _variant(record, 5, 31.50, n_items=bigger),  # +1.50
    ]
    table = pa.Table.from_pylist(records, schema=one_row.schema)
    summary = summarise(table, rank_by="spearman")
    assert summary.head_share_metric == HEAD
    reports = [json.loads(r["report_json"]) for r in records]
    by_diff = [None] + [diff_reports(a, b).metric(HEAD).reason for a, b in zip(reports, reports[1:])]
    assert [s.head_share_apart for s in summary.order] == by_diff  # one rule, one wording
    assert by_diff[1] == 'retrieval.index differs ("exact" vs "ivf")'
    assert by_diff[2] is not None and 'retrieval.popularity differs ("interactions" vs "users")' in by_diff[2]
    assert by_diff[3] is not None and f"inputs.n_items differs ({n} vs {bigger})" in by_diff[3]
    deltas = [s.delta_head_share for s in summary.order]
    assert deltas[:4] == [None, None, None, None]  # before: None, -11.41, +11.46, -10.13
    assert deltas[4] == pytest.approx(30.00 - 23.72) and deltas[5] == pytest.approx(31.50 - 30.00)
    trend = {t.metric: t for t in summary.trends}[HEAD]
    assert (trend.direction, trend.change, trend.kendall_tau) == ("not comparable", None, None)
    assert trend.apart is not None and 'retrieval.index differs ("exact" vs "ivf")' in trend.apart
    assert 'retrieval.index "exact": rows 0, 2, 3, 4, 5; "ivf": row 1' in (summary.protocols or "")
    # The ranking marks the approximate row; the terminal and the HTML say "not comparable" and why.
    assert [s.row for s in summary.ranking if s.approximate] == [1]
    console = Console(file=io.StringIO(), width=300)
    for renderable in summary_console(summary, n_resumed=0, output=Path("r.parquet")):
        console.print(renderable)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "ivf (approximate, recall 0.530)" in text and "-11.41" not in text and "not comparable" in text
    page = summary_html(summary)
    assert page.count("not comparable") >= 3 and "approximate" in page


def test_rows_measured_alike_still_compare(one_row: pa.Table) -> None:
    """Two IVF rows of one catalogue and popularity compare (diff compares them too): 22.39× → 25.00×."""
    from auditor.batch.summary import summarise

    record = one_row.to_pylist()[0]
    records = [_variant(record, 0, 22.39, index="ivf"), _variant(record, 1, 25.00, index="ivf")]
    summary = summarise(pa.Table.from_pylist(records, schema=one_row.schema), rank_by="spearman")
    assert summary.order[1].head_share_apart is None and summary.protocols is None
    assert summary.order[1].delta_head_share == pytest.approx(25.00 - 22.39)


def _six_rows(one_row: pa.Table) -> tuple[Any, list[str | None]]:
    """The summary of six rows (exact, IVF, users popularity, a bigger catalogue twice more)
    and diff's reason for each row against the one before (None: compared)."""
    from auditor.batch.summary import summarise
    from auditor.diff import diff_reports

    record = one_row.to_pylist()[0]
    bigger = 3 * json.loads(record["report_json"])["inputs"]["n_items"] + 100
    records = [_variant(record, 0, 33.80), _variant(record, 1, 22.39, index="ivf"),
               _variant(record, 2, 33.85, popularity="users"), _variant(record, 3, 23.72, n_items=bigger),
               _variant(record, 4, 30.00, n_items=bigger), _variant(record, 5, 31.50, n_items=bigger)]
    reports = [json.loads(r["report_json"]) for r in records]
    by_diff = [None] + [diff_reports(a, b).metric(HEAD).reason for a, b in zip(reports, reports[1:])]
    return summarise(pa.Table.from_pylist(records, schema=one_row.schema), rank_by="spearman"), by_diff


def test_row_by_row_caption_keys_each_reason_to_its_row_pair(one_row: pa.Table) -> None:
    """QA8 scale N1: one merged caption ('index differs (exact vs ivf); popularity differs ...;
    index differs (ivf vs exact)') named no row; each reason now says which pair it is of,
    in the terminal, Markdown and HTML alike."""
    import html as html_text
    import re

    from auditor.cli._reports import rendered
    from auditor.plugin_api import RenderContext
    from auditor.report.batch_summary import batch_document

    summary, by_diff = _six_rows(one_row)
    assert by_diff[1] == 'retrieval.index differs ("exact" vs "ivf")' and by_diff[4] is None and by_diff[5] is None
    keyed = [f"row {i - 1} vs row {i}: {by_diff[i]}." for i in (1, 2, 3)]
    assert by_diff[2] is not None and "; " in by_diff[2]  # popularity and index both differ from row 1
    document = batch_document(summary)
    for fmt in ("console", "markdown", "html"):
        text = rendered(document, fmt, RenderContext(width=0))
        text = text if isinstance(text, str) else text.decode()
        text = html_text.unescape(text) if fmt == "html" else re.sub(r"\\(.)", r"\1", text)
        flat = " ".join(text.split())
        caption = flat[flat.index("not comparable (as in popaudit diff): row 0 vs row 1"):]
        assert caption.startswith("not comparable (as in popaudit diff): " + " ".join(keyed)), (fmt, caption[:400])
        assert "row 3 vs row 4" not in caption and "row 4 vs row 5" not in caption, fmt  # compared: +6.28, +1.50


def test_the_order_chart_breaks_its_line_between_rows_diff_does_not_compare(one_row: pa.Table) -> None:
    """QA8 scale F1 (residual): the head-share line joined 33.80× (exact), 22.39× (IVF) and
    33.85× (users popularity) as one trend; it now joins only rows 3-4-5 (compared, as the
    table's +6.28 and +1.50), breaks before rows 1, 2 and 3 (dotted separators at 0.5, 1.5,
    2.5, ringed points) and draws the IVF point hollow; the caption says so."""
    from auditor.report.batch_summary import batch_document, summary_figure

    summary, _ = _six_rows(one_row)
    fig = summary_figure(summary)
    twin = fig.axes[1]
    joined = [list(line.get_xdata()) for line in twin.get_lines() if line.get_linestyle() == "--"]
    assert joined == [[0], [1], [2], [3, 4, 5]]  # before: [[0, 1, 2, 3, 4, 5]]
    separators = sorted(line.get_xdata()[0] for line in twin.get_lines() if line.get_linestyle() == ":")
    assert separators == [0.5, 1.5, 2.5]
    rings = [list(c.get_offsets()[:, 0]) for c in twin.collections]
    assert rings == [[1.0, 2.0, 3.0]]
    hollow = [line for line in twin.get_lines() if line.get_linestyle() == "None"]
    assert len(hollow) == 1 and list(hollow[0].get_xdata()) == [1] and hollow[0].get_markerfacecolor() == "white"
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "not comparable with the row before (as in popaudit diff): line broken" in legend
    assert "approximate index (the index's figure)" in legend
    figure = batch_document(summary).sections[1].blocks[0]
    assert "line is broken (dotted separator, ringed point) between rows popaudit diff would not compare (row 0 vs " \
           "row 1, row 1 vs row 2, row 2 vs row 3)" in figure.alt  # type: ignore[union-attr]
    assert "hollow squares: approximate index (row 1)" in figure.alt  # type: ignore[union-attr]


@pytest.mark.parametrize(("values", "apart", "runs"), [
    ([1.0, 2.0, 3.0], [False, False, False], [[0, 1, 2]]),
    ([1.0, 2.0, 3.0], [False, True, False], [[0], [1, 2]]),
    ([1.0, None, 3.0, 4.0], [False, False, False, False], [[0], [2, 3]]),  # a row without a figure: no line across
    ([1.0, float("inf"), 3.0], [False, False, False], [[0], [2]]),  # +inf is drawn nowhere
    ([None, 2.0], [False, False], [[1]]),
])  # fmt: skip
def test_comparable_runs(values: list[float | None], apart: list[bool], runs: list[list[int]]) -> None:
    from auditor.report.batch_figure import comparable_runs

    assert comparable_runs(values, apart) == runs


def test_a_quoted_definition_holding_semicolons_stays_one_reason(one_row: pa.Table) -> None:
    """QA "harms F3": the popularity-groups definition diff quotes holds "; ", and the
    summary re-split diff's joined reasons on it: the run's reason lost its setting name
    (a bare "users by the share ... (ties on one side)" fragment) and said another setting
    twice. Diff's reasons now come as items: each setting once, with every value in order."""
    from auditor.batch.summary import summarise
    from auditor.diff import diff_reports

    record = one_row.to_pylist()[0]
    metric = "gap_delta_niche_dot@10"
    assert record[metric] is not None
    base = json.loads(record["report_json"])["retrieval"]["definitions"]["popularity_groups"]
    assert "; " in base and "top 20%" in base and "lowest 20% niche" in base
    defined = [base, base.replace("lowest 20% niche", "lowest 30% niche"), base.replace("top 20%", "top 10%")]
    records = []
    for row, (definition, popularity) in enumerate(zip(defined, ("interactions", "users", "users"))):
        report = copy.deepcopy(json.loads(record["report_json"]))
        report["retrieval"]["definitions"]["popularity_groups"] = definition
        report["retrieval"]["popularity"] = popularity
        records.append({**record, "row": row, "label": f"r{row}", metric: -0.1 * (row + 1),
                        "popularity": popularity, "report_json": json.dumps(report)})
    summary = summarise(pa.Table.from_pylist(records, schema=one_row.schema), rank_by=metric)
    reports = [json.loads(r["report_json"]) for r in records]
    said = [diff_reports(a, b).metric(metric).reason for a, b in zip(reports, reports[1:])]
    quoted = [json.dumps(d, ensure_ascii=False) for d in defined]
    groups = f"retrieval.definitions.popularity_groups differs ({quoted[0]} vs {quoted[1]} vs {quoted[2]})"
    popularity = 'retrieval.popularity differs ("interactions" vs "users")'
    assert said[0] is not None and groups.replace(f" vs {quoted[2]}", "") in said[0] and popularity in said[0]
    trend = {t.metric: t for t in summary.trends}[metric]
    assert trend.direction == "not comparable"
    # Before: popularity, groups (first pair), popularity again, then a bare fragment of row 2's definition.
    assert trend.apart == f"{popularity}; {groups}" or trend.apart == f"{groups}; {popularity}", trend.apart
    # Harms F3 (verification): the trends table's caption joined each trend's reasons and said
    # "retrieval.popularity differs" twice (once from the head-share trend, once from this one).
    from auditor.cli._reports import rendered
    from auditor.plugin_api import RenderContext
    from auditor.report.batch_summary import batch_document

    parted = [t for t in summary.trends if t.apart]
    assert len(parted) == 2 and {t.apart for t in parted} == {popularity, trend.apart}, [t.apart for t in parted]
    text = " ".join(str(rendered(batch_document(summary), "markdown", RenderContext(width=0))).split())
    text = text.replace("\\", "")
    caption = text[text.index("not comparable (as in popaudit diff): "):]
    caption = caption[:caption.index("not comparable (as in popaudit diff): ", 1)]  # up to the row-by-row caption
    assert caption.count("retrieval.popularity differs") == 1 and caption.count("popularity_groups differs") == 1, caption
    assert summary.trends_apart in (f"{popularity}; {groups}", f"{groups}; {popularity}"), summary.trends_apart
