"""One report document, walked by every format: a new format is one module (a plugin file
with a plain-text walker renders an audit and every summary through the registry), the
built-in walkers render any document kind, and report/ imports only values and results."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import pyarrow as pa
import pytest

from auditor.errors import InputError
from auditor.plugins import get_plugin_manager
from auditor.plugins.renderers import render, render_document
from auditor.report import content as c
from auditor.report.audit_doc import audit_document
from auditor.batch.summary import summarise
from auditor.report.batch_summary import batch_document
from auditor.report.document import Document, Figure, Heading, Paragraph, Section, Table
from auditor.report.experiment_summary import experiment_document
from auditor.report.mitigation_summary import mitigation_document
from auditor.result import AuditResult, CutoffMeasures, FrequencyNorm, Inputs, Retrieval, Verdict, json_safe
from auditor.summaries import ExperimentResult, ExperimentSizes, MitigationResult
from auditor.verdict import decide_verdict
from report_samples import builtin_measures, full_result

WALKER = '''
"""A plain-text report format: one module, registered like any plugin's renderer."""
from auditor.hookspecs import hookimpl
from auditor.report.audit_doc import audit_document
from auditor.report.document import Bullets, Figure, Group, Heading, Headline, KeyValues, Paragraph, Table


def lines(block):
    if isinstance(block, Headline):
        return [f"{block.phrase}: {block.evidence}."]
    if isinstance(block, Paragraph):
        return [block.text]
    if isinstance(block, Heading):
        return [block.text.upper()]
    if isinstance(block, Bullets):
        return [f"* {item}" for item in block.items]
    if isinstance(block, KeyValues):
        return [f"{name} = {value}" for name, value in block.rows]
    if isinstance(block, Table):
        return ["\\t".join(block.headers), *("\\t".join(row) for row in block.rows)]
    if isinstance(block, Figure):
        return [f"[figure: {block.title}]"]
    if isinstance(block, Group):
        return [line for child in block.blocks for line in lines(child)]
    raise TypeError(type(block).__name__)


class PlainText:
    name = "text"
    suffix = ".txt"
    description = "plain text"

    def render(self, result, context):
        return self.render_document(audit_document(result), context)

    def render_document(self, document, context):
        out = [document.title, ""]
        for block in document.lead:
            out += lines(block)
        for section in document.sections:
            out += ["", f"== {section.title} =="]
            for block in section.blocks:
                out += lines(block)
        return "\\n".join(out) + "\\n"


class AuditsOnly:
    name = "audits-only"
    suffix = ".txt"
    description = "renders audits, nothing else"

    def render(self, result, context):
        return result.verdict.severity + "\\n"


@hookimpl
def popaudit_renderers():
    return [PlainText(), AuditsOnly()]
'''


@pytest.fixture(scope="module")
def pm(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    path = tmp_path_factory.mktemp("plugin") / "plain_text.py"
    path.write_text(WALKER)
    return get_plugin_manager([path], entry_points=False)


def _batch_table() -> pa.Table:
    rows = [(0, "a.pt", "ok", 0.2, 1.5, None), (1, "b.pt", "ok", 0.6, 3.0, None), (2, "c.pt", "error", None, None,
            "ValueError: broken"), (3, "d.pt", "ok", 0.4, 2.0, None)]  # fmt: skip
    names = ("row", "model", "status", "spearman", "head_share_1pct_ratio@10", "error")
    table = pa.table({name: [r[i] for r in rows] for i, name in enumerate(names)})
    return table.append_column("label", pa.array([None] * 4, pa.string()))


def _experiment() -> ExperimentResult:
    nan = {"mean": float("nan"), "std": float("nan")}
    config = {"optimizer": "sgd", "lr": 10.0, "user_lr": 10.0, "user_optimizer": "sgd", "momentum": 0.0,
              "weight_decay": 0.0, "item_encoder": "embedding", "user_encoder": "embedding", "loss": "infonce-cos"}
    row = {"name": "reference", "label": "reference", "violates": "none", "config": config,
           "runs": [{"seed": 0, "spearman_ci": [float("nan"), float("nan")]}],
           "summary": {"spearman": nan, "share_90pm1": {"mean": 0.5, "std": None}}, "angle_histogram": [0] * 180}
    return ExperimentResult("lr-sweep", ExperimentSizes(epochs=1), [0, 1], [row],
                            {"kind": "synthetic", "n_users": 4, "n_items": 5, "n_interactions": 9, "zipf": 1.0})


def _mitigations() -> MitigationResult:
    one = {"mean": 0.25, "std": 0.0}
    row = {"name": "reference", "label": "reference", "kind": "reference", "model": "reference", "config": {},
           "runs": [{"seed": 0, "k": 10}], "summary": {m: one for m in ("ndcg", "recall", "head_share_1pct", "gini",
                                                                       "spearman")}}
    return MitigationResult(ExperimentSizes(epochs=1), [0], 0.4, "random", (0.5,), [row],
                            {"kind": "synthetic", "n_users": 4, "n_items": 5, "n_interactions": 9, "zipf": 1.0})


def test_a_new_format_is_one_module_and_renders_an_audit(pm) -> None:  # type: ignore[no-untyped-def]
    result = full_result()
    text = render(result, "text", pm)
    assert isinstance(text, str)
    lines = text.splitlines()
    assert lines[:3] == ["popaudit report: model with spaces.pt", "", c.headline(result)]
    assert [line[3:-3] for line in lines if line.startswith("== ")] == [
        "Verdict and recommendations", "Warnings", "Frequency and norm", "Retrieval skew", "Accuracy and the trade-off",
        "Conditions C1–C5", "Probes", "Additional measures (built-in and plugins)", "Inputs and settings",
    ]  # fmt: skip
    assert "C4\tcosine-based loss\tviolated\tconfig loss = infonce-dot | dot logits" in lines
    assert "Not measured: no reason was recorded by the audit." in lines  # accuracy
    # The sample's lists came from an IVF index: every per-K heading says so.
    assert "[figure: Item norm vs training frequency]" in lines and "TOP-100, APPROXIMATE (IVF, RECALL@100 0.962)" in lines
    assert render(result, "audits-only", pm) == "high\n"


def test_the_new_format_renders_every_summary(pm) -> None:  # type: ignore[no-untyped-def]
    batch = render_document(batch_document(summarise(_batch_table())), "text", pm)
    assert isinstance(batch, str)
    assert batch.startswith("popaudit batch summary\n\n4 rows: 3 audited, 1 failed.\n")
    ranking = batch.split("== Models ranked by bias ==\n")[1].split("\n\n")[0].splitlines()
    assert ranking == [
        "rank\trow\tmodel\tlabel\tseverity\tspearman\thead_share_1pct_ratio@10\tNDCG@10 dot\trecall@10 dot\t"
        "recommended",
        "1\t1\tb.pt\t\tn/a\t0.600\t3.00×\tn/a\tn/a\t—", "2\t3\td.pt\t\tn/a\t0.400\t2.00×\tn/a\tn/a\t—",
        "3\t0\ta.pt\t\tn/a\t0.200\t1.50×\tn/a\tn/a\t—",
    ]  # fmt: skip
    assert "2\tc.pt\tValueError: broken" in batch.split("== Failed rows ==\n")[1]
    assert "[figure: Bias across the manifest order]" in batch

    experiment = render_document(experiment_document(_experiment()), "text", pm)
    assert isinstance(experiment, str)
    lines = experiment.splitlines()
    assert lines[0] == "popaudit experiment lr-sweep"
    assert lines[2].startswith("Data: synthetic (Zipf exponent 1, regenerated for each seed): 4 users, 5 items")
    assert lines[3].split("\t")[-4:] == ["ρ 95% CI", "head@5 dot, seen excluded", "head@5 cos, seen excluded", "ratio"]
    assert lines[4].split("\t") == ["reference", "none", "sgd", "10", "embedding", "embedding", "infonce-cos",
                                    "0.500", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a"]  # fmt: skip

    mitigation = render_document(mitigation_document(_mitigations()), "text", pm)
    assert isinstance(mitigation, str)
    row = mitigation.splitlines()[4].split("\t")
    # The head share as check prints it (a percentage), the other figures to 3 decimals.
    assert row == ["reference", "none (reference)", "reference", "0.250", "0.250", "25.0%", "0.250", "0.250", "100.0%"]


def test_a_format_without_render_document_says_it_renders_audits_only(pm) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InputError, match=r"'audits-only' .*cannot render a batch report.*audits only"):
        render_document(batch_document(summarise(_batch_table())), "audits-only", pm)
    with pytest.raises(InputError, match="unknown report format 'pdf'"):
        render_document(experiment_document(_experiment()), "pdf", pm)


def test_json_walks_a_documents_data() -> None:
    pm = get_plugin_manager(entry_points=False)
    experiment = _experiment()
    text = render_document(experiment_document(experiment), "json", pm)
    assert text == json.dumps(json_safe(experiment.to_dict()), indent=2) + "\n"
    result = full_result()
    assert render_document(audit_document(result), "json", pm) == render(result, "json", pm)
    with pytest.raises(InputError, match="json format cannot render the diff report: it carries no data"):
        render_document(Document("diff", "A vs B"), "json", pm)


def test_the_built_in_formats_render_a_new_document_kind(tmp_path: Path) -> None:
    """A kind no walker knows (the comparison of two audits) needs only its builder."""
    pm = get_plugin_manager(entry_points=False)
    table = Table(("measure", "A", "B"), (("spearman", "0.81", "0.12"),), (False, True, True), "Same K.")
    figure = Figure("bars", "changes", "Spearman of A and B", "Two bars: 0.81 and 0.12.", _bars)
    document = Document("diff", "popaudit diff: a.pt vs b.pt", (
        Section("changes", "What changed", (Paragraph("B is less biased.", "summary"), Heading("At K=10"), table,
                                            figure)),
    ), lead=(Paragraph("Two audits of the same log."),), footer="Generated by a test.")  # fmt: skip
    console = render_document(document, "console", pm)
    assert isinstance(console, str)
    assert "What changed" in console and "B is less biased." in console and "spearman │ 0.81 │ 0.12" in console
    markdown = render_document(document, "markdown", pm)
    assert isinstance(markdown, str)
    assert markdown.startswith("# popaudit diff: a.pt vs b.pt\n\nTwo audits of the same log.\n\n_Plots omitted")
    assert "## What changed\n\nB is less biased.\n\n### At K=10\n\n| measure | A | B |\n|:---|---:|---:|\n" in markdown
    html = render_document(document, "html", pm)
    assert isinstance(html, str)
    assert '<section id="changes">' in html and '<td class="num">0.81</td>' in html
    assert html.count('<img src="data:image/png;base64,') == 1 and "<figcaption>Two bars: 0.81 and 0.12." in html


def _bars():  # type: ignore[no-untyped-def]
    from auditor.report.plots import new_figure

    fig = new_figure(3.0, 2.0)
    fig.add_subplot().bar([0, 1], [0.81, 0.12])
    return fig


def test_a_log_file_gets_tables_at_their_natural_width() -> None:
    """Console width 0 (a log file): the sentence on one line, no table cell folded."""
    from auditor.plugin_api import RenderContext
    from auditor.report.console import ConsoleRenderer

    experiment = _experiment()
    experiment.rows[0]["label"] = "a setting whose label is much longer than a terminal is wide " * 2
    text = ConsoleRenderer().render_document(experiment_document(experiment), RenderContext(width=0))
    lines = text.splitlines()
    assert lines[0].startswith("Data: synthetic") and lines[0].endswith("the lists popaudit check serves with its defaults.")
    assert lines[1] == "popaudit experiment lr-sweep"
    assert any(experiment.rows[0]["label"].strip() in line for line in lines)
    assert len({len(line) for line in lines[2:]}) == 1 and len(lines[2]) > 200  # one width, unwrapped


def test_the_verdict_carries_its_first_seen_k_outside_the_json() -> None:
    def cut(dot: float, cos: float) -> CutoffMeasures:
        return CutoffMeasures(builtin_measures(dot, 0.5, 0.6, 100.0, 0.1, 0.8, 0.2, 3.0),
                              builtin_measures(cos, 0.5, 0.6, 100.0, 0.1, 0.8, 0.2, 3.0),
                              builtin_measures(1.0, 1, 1, 1, 0, 1, 0, 1), 0.3)  # fmt: skip

    fn = FrequencyNorm(0.5, (0.4, 0.6), 1e-9, 0.5, 0.35, 0.2, 2000, 0, [], n_bootstrap=100)
    result = AuditResult(inputs=Inputs("m.pt", "log", "item", "user", 2000, 32, 100_000), frequency_norm=fn,
                         verdict=Verdict(False, "none", ""),
                         retrieval=Retrieval(943, "exact", {10: cut(0.12, 0.10), 100: cut(0.30, 0.10)}))
    verdict = decide_verdict(result)
    assert (verdict.quoted_k, verdict.first_seen_k) == (100, 10)  # K=100 decides, K=10 is seen first
    decided = dataclasses.replace(result, verdict=verdict)
    assert "first_seen_k" not in decided.to_dict()["verdict"]
    assert c.quoted_cutoffs(decided) == (100, 10)
    worst_first = dataclasses.replace(result, retrieval=Retrieval(943, "exact", {10: cut(0.3, 0.1), 100: cut(0.1, 0.1)}))
    assert decide_verdict(worst_first).first_seen_k is None  # the quoted K is the first one seen
    assert c.quoted_cutoffs(dataclasses.replace(worst_first, verdict=decide_verdict(worst_first))) == (10, None)


ROOT = Path(__file__).resolve().parents[1]
ALLOWED = {"auditor", "auditor.errors", "auditor.hookspecs", "auditor.io", "auditor.plugin_api", "auditor.result",
           "auditor.sections", "auditor.served_section", "auditor.summaries", "auditor.trace_schema", "auditor.trace_section", "auditor.wording", "auditor.protocol",
           "auditor.mechanism", "auditor.environment"}
"""What report/ may import (values, results, the plugin-facing types and the hook marker)."""


def test_the_report_imports_only_values_and_results() -> None:
    found = {}
    for path in sorted((ROOT / "auditor" / "report").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):  # function-level imports too
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else (
                [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            for name in names:
                if name.split(".")[0] == "auditor" and not name.startswith("auditor.report") and name not in ALLOWED:
                    found[f"{path.name}: {name}"] = True
    assert not found, sorted(found)
