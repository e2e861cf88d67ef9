"""The batch summary never quotes a saturated K's head-share ratio (QA measures N3): a K a
row's report marks ``retrieval.saturated`` measures no harm (docs/measures.md, "A K that
holds every candidate"), so the summary prefers an unsaturated K, and where a row has none
its cell says "not measured" and the figure is in no change or trend."""

from __future__ import annotations

import json

import pyarrow as pa

from auditor.batch.summary import summarise
from auditor.report.batch_summary import SATURATED_CELL, batch_document


def _rows(*rows: dict[str, object]) -> pa.Table:
    """A results table of ok rows (missing cells null)."""
    names = sorted({name for r in rows for name in r} - {"model"})
    columns: dict[str, object] = {"row": list(range(len(rows))), "model": [r["model"] for r in rows],
                                  "status": ["ok"] * len(rows), "label": pa.array([None] * len(rows), pa.string())}
    for name in names:
        kind = pa.string() if name in ("verdict_severity", "report_json") else pa.float64()
        columns[name] = pa.array([r.get(name) for r in rows], kind)
    return pa.table(columns)


def _report(saturated: dict[str, bool]) -> str:
    return json.dumps({"verdict": {"quoted_k": None}, "retrieval": {"saturated": saturated}})


def test_every_k_saturated_is_not_measured_and_in_no_trend() -> None:
    # The QA's manifest: two 5-item models, default K clamped to 5, each ratio 1.00× beside
    # severities moderate and none, and a trend "change 0.000".
    summary = summarise(_rows(
        {"model": "tiny5.pt", "spearman": 1.0, "verdict_severity": "moderate", "head_share_1pct_ratio@5": 1.0,
         "report_json": _report({"5": True})},
        {"model": "kc_five.pt", "spearman": 0.821, "verdict_severity": "none", "head_share_1pct_ratio@5": 1.0,
         "report_json": _report({"5": True})},
    ))
    assert summary.head_share_metric is None
    assert [(s.k, s.head_share, s.head_share_saturated, s.delta_head_share) for s in summary.order] == [
        (5, None, True, None), (5, None, True, None)]
    assert [t.metric for t in summary.trends] == ["spearman"]  # was also head_share_1pct_ratio@5, change 0.000
    cells = [cell for section in batch_document(summary).sections for block in section.blocks
             for row in getattr(block, "rows", ()) for cell in row]
    assert cells.count(SATURATED_CELL) == 4 and "1.00×" not in cells  # ranking and row-by-row tables


def test_an_unsaturated_k_is_preferred() -> None:
    # Row 0's K=20 is saturated (a 25-item catalogue), row 1's is not: both were read at 20.
    summary = summarise(_rows(
        {"model": "small.pt", "spearman": 0.9, "head_share_1pct_ratio@5": 2.5, "head_share_1pct_ratio@20": 1.0,
         "report_json": _report({"5": False, "20": True})},
        {"model": "large.pt", "spearman": 0.8, "head_share_1pct_ratio@5": 1.5, "head_share_1pct_ratio@20": 1.4,
         "report_json": _report({"5": False, "20": False})},
    ))
    assert summary.head_share_metric == "head_share_1pct_ratio@5"
    assert [(s.k, s.head_share, s.head_share_saturated) for s in summary.order] == [(5, 2.5, False), (5, 1.5, False)]
    assert summary.order[1].delta_head_share == 1.5 - 2.5
