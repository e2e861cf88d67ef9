"""The severity rule is explained once, in docs/report.md ("Severity"), with the thresholds
auditor/verdict.py applies; reports for people point there instead of repeating it, and
the JSON report keeps the rule as ``verdict.rule``."""

from __future__ import annotations

import json
import re
from pathlib import Path

from auditor.report import RenderContext
from auditor.report.console import ConsoleRenderer
from auditor.report.content import SEVERITY_DOC, SEVERITY_POINTER
from auditor.report.html import HtmlRenderer
from auditor.report.json import JsonRenderer
from auditor.report.markdown import render_audit_markdown
from auditor.harm import HARM_BANDS, SERVED_SHARE, Skew
from auditor.verdict import RHO_MODERATE, RHO_STRONG, RHO_WEAK, SEVERITY_RULE
from report_samples import full_result

ROOT = Path(__file__).resolve().parents[1]


def _section(doc: str, title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", doc, re.S | re.M)
    assert match, f"no section {title!r}"
    return match.group(1)


def test_the_doc_states_the_thresholds_the_verdict_applies() -> None:
    severity = _section((ROOT / SEVERITY_DOC).read_text(encoding="utf-8"), "Severity")
    bands = {
        name: (float(ratio), float(points))
        for name, ratio, points in re.findall(r"^\| (\w+) \| ratio ≥ ([\d.]+) and excess ≥ ([\d.]+) points \|$",
                                              severity, re.M)
    }
    assert bands == {name: (ratio, 100 * excess) for name, ratio, excess in HARM_BANDS}
    assert f"weak from {RHO_WEAK:g}, moderate from {RHO_MODERATE:g}, strong from {RHO_STRONG:g}" in severity
    assert f"*moderate* from ρ ≥ {RHO_MODERATE:g}, *low* from\n  ρ ≥ {RHO_WEAK:g}" in severity
    assert f"K at most {100 * SERVED_SHARE:g}% of the catalogue" in " ".join(severity.split())
    # The worked examples, against the verdict's own Skew.
    text = " ".join(severity.split())
    for said, dot, cos, severity_name in (
        ("8.4% of dot-product top-10 slots against 2.1% under cosine is 4.0× and 6.3 points: *high*", 0.084, 0.021, "high"),
        ("3.0% against 2.2% is 1.36× but 0.8 points: *low*", 0.030, 0.022, "low"),
        ("0.04% against 0.01% is 4× but 0.03 points, below every band: *none*, whatever ρ is", 0.0004, 0.0001,
         "none"),
    ):
        assert said in text
        assert Skew(10, dot, cos, None).severity == severity_name


def test_reports_point_to_the_rule_and_json_keeps_it() -> None:
    result = full_result()
    assert 'section "Severity" of' in SEVERITY_POINTER and SEVERITY_DOC in SEVERITY_POINTER
    reports = {
        "console": ConsoleRenderer().render(result, RenderContext(width=400)),
        "markdown": render_audit_markdown(result, [], None),
        "html": HtmlRenderer().render(result, RenderContext()),
    }
    first_words = SEVERITY_RULE.split(":")[0]  # "severity = the harm"
    for fmt, text in reports.items():
        flat = " ".join(text.replace("\\", "").split())
        assert " ".join(SEVERITY_POINTER.split()) in flat.replace("&quot;", '"').replace("&#x27;", "'"), fmt
        assert first_words not in flat and "high from 2x" not in flat, fmt
    doc = json.loads(JsonRenderer().render(result, RenderContext()))
    assert doc["verdict"]["rule"] == result.verdict.rule
