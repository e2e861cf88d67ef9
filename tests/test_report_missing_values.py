"""A value that is missing reads as ``n/a`` in every report for people, never as
``None`` (nor ``nan``): console, Markdown and HTML audit reports, the batch summary
and the experiment summaries, each rendered from results full of gaps (a JSON report
re-read with nulls, a plugin measure that measured nothing, a seed that failed)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from rich.console import Console

from auditor.report import RenderContext
from auditor.report.console import ConsoleRenderer
from auditor.report.html import HtmlRenderer
from auditor.report.markdown import render_audit_markdown
from auditor.result import Accuracy, AuditResult, Condition, CutoffMeasures, RankingAccuracy
from report_samples import bare_result, builtin_measures, full_result

NONE = re.compile(r"\b(None|nan|NaN)\b")


def _gappy() -> AuditResult:
    """The full sample with a gap in every kind of field the reports show."""
    result = full_result()
    gap = builtin_measures(None, None, None, None, None, None, None, None)
    cut = CutoffMeasures(gap, builtin_measures(0.1, 0.2, 0.3, 4.0, 0.5, 0.6, 0.7, None), gap, float("nan"),
                         {"alpha_0.5": gap})
    retrieval = dataclasses.replace(result.retrieval, at={10: cut}, queries="", recall={10: float("nan")})
    fn = dataclasses.replace(result.frequency_norm, spearman=float("nan"), spearman_ci=(None, None),
                             spearman_p=None, pearson_log=None, kendall=float("nan"), loglog_slope=None,
                             cold_norm_median=None, warm_norm_median=float("nan"))
    missing = RankingAccuracy(float("nan"), float("nan"), float("nan"), float("nan"))
    accuracy = Accuracy("held out", 3, 0, {10: {"dot": missing, "cosine": missing, "alpha_0.5": missing}},
                        quoted_k=10, recommended=None, recommendation="")
    inputs = dataclasses.replace(result.inputs, format="", n_interactions=None, item_ids=None, n_users=None,
                                 user_id_mapping=None)
    conditions = {**result.conditions, "C3": Condition("non-shared parameters", "unknown", "")}
    return dataclasses.replace(
        result, inputs=inputs, frequency_norm=fn, retrieval=retrieval, accuracy=accuracy, conditions=conditions,
        measures={"item_bias_spearman": None, "plugin_score": float("nan"), "plugin_block": {"x": None}},
        settings={**result.settings, "max_queries": None},
    )


def _reports(result: AuditResult) -> dict[str, str]:
    return {
        "console": ConsoleRenderer().render(result, RenderContext(width=120)),
        "markdown": render_audit_markdown(result, [], None),
        "html": HtmlRenderer().render(result, RenderContext()),
    }


def test_audit_reports_say_n_a_where_a_value_is_missing() -> None:
    for result in (_gappy(), bare_result()):
        for fmt, text in _reports(result).items():
            found = NONE.findall(text)
            assert not found, (fmt, found, [line for line in text.splitlines() if NONE.search(line)][:5])
    console = _reports(_gappy())["console"]
    assert re.search(r"item_bias_spearman\s*│\s*n/a", console)
    assert re.search(r"head_share_1pct\s*│\s*n/a\s*│\s*10\.0%\s*│\s*n/a", console)  # dot, cosine, ratio
    assert "(n/a):" in console and "n/a interactions" not in console.split("Model")[0]


def test_batch_summary_says_n_a_where_a_value_is_missing() -> None:
    from auditor.batch.results import ResultsWriter
    from auditor.batch.summary import summarise
    from auditor.report.batch_summary import summary_console, summary_html

    writer = ResultsWriter(Path("unused.parquet"), (100,))
    writer.add({"row": i, "model": m, "status": s, "error": None if s == "ok" else "ValueError: x",
                "spearman": rho, "head_share_1pct_ratio@100": share}
               for i, (m, rho, share, s) in enumerate([("a", None, 1.5, "ok"), ("b", 0.3, None, "ok"),
                                                       ("c", None, None, "ok"), ("d", None, None, "error")]))
    summary = summarise(writer.table())
    console = Console(width=200, record=True, color_system=None)
    for part in summary_console(summary, n_resumed=0, output=Path("r.parquet")):
        console.print(part)
    shown = console.export_text()
    for text in (shown, summary_html(summary)):
        assert not NONE.findall(text), NONE.findall(text)
    assert re.search(r"│\s+2 │ c\s+│\s+│ n/a\s+│\s+n/a │\s+n/a │", shown), shown


def test_experiment_summaries_say_n_a_where_a_value_is_missing() -> None:
    from auditor.report.experiment_summary import to_console, to_markdown
    from auditor.train.experiments import ExperimentResult, ExperimentSizes

    nan = {"mean": float("nan"), "std": float("nan")}
    config = {"optimizer": "sgd", "lr": 10.0, "user_lr": 10.0, "user_optimizer": "sgd", "momentum": 0.0,
              "weight_decay": 0.0, "item_encoder": "embedding", "user_encoder": "embedding", "loss": "infonce-cos"}
    row = {"name": "reference", "label": "reference", "violates": "none", "config": config,
           "runs": [{"seed": 0, "spearman_ci": [float("nan"), float("nan")]}],
           "summary": {"spearman": nan, "share_90pm1": {"mean": 0.5, "std": None}}, "angle_histogram": [0] * 180}
    result = ExperimentResult("lr-sweep", ExperimentSizes(epochs=1), [0, 1], [row],
                              {"kind": "file", "path": None, "format": None, "n_users": None, "n_items": 5})
    console = Console(width=300, record=True, color_system=None)
    for part in to_console(result):
        console.print(part)
    for text in (console.export_text(), to_markdown(result)):
        assert not NONE.findall(text), NONE.findall(text)
        assert "0.500" in text and "n/a" in text and "1 epoch per run" in text
