"""A ``popaudit batch`` results table summarised: models ranked by bias, how the metrics
move across the manifest order (Kendall's τ against the row order), and the failed rows.

:func:`summarise` reads a results table (the schema of :mod:`auditor.batch.results`) into
the report's :class:`~auditor.report.batch_summary.BatchSummary`, which
:func:`~auditor.report.batch_summary.batch_document` renders. The trend test is
:func:`auditor.metrics.correlations.kendall_tau_test` (scipy's values without importing
scipy.stats, which alone took 2 s of a batch's start).
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
import pyarrow as pa

from auditor.batch.rank_by import did_you_mean
from auditor.errors import InputError
from auditor.metrics.correlations import kendall_tau_test
from auditor.report.batch_summary import BatchSummary, SummaryRow, Trend
from auditor.summaries import STATUS_ERROR, STATUS_OK


def _head_share_metric(table: pa.Table) -> str | None:
    """The head-share ratio at the largest K that has values (``head_share_1pct_ratio@K``)."""
    candidates = []
    for name in table.column_names:
        match = re.fullmatch(r"head_share_1pct_ratio@(\d+)", name)
        if match and table.column(name).null_count < table.num_rows:
            candidates.append((int(match.group(1)), name))
    return max(candidates)[1] if candidates else None


def summarise(table: pa.Table, *, rank_by: str = "spearman") -> BatchSummary:
    """Rank the ok rows of a results table by ``rank_by`` and follow metrics across rows."""
    if rank_by not in table.column_names:  # popaudit batch refuses it before auditing (auditor/batch/rank_by.py)
        numeric = [f.name for f in table.schema if pa.types.is_floating(f.type) or pa.types.is_integer(f.type)]
        raise InputError(f"cannot rank by {rank_by!r}: not a results column{did_you_mean(rank_by, numeric)}; the "
                         f"table has {len(numeric)} numeric columns")
    head = _head_share_metric(table)
    recommended = _recommended(table)
    # The reports (tens of KB a row) are read above one at a time: leave them in Arrow.
    if "report_json" in table.column_names and rank_by != "report_json":
        table = table.drop_columns(["report_json"])
    records = sorted(table.to_pylist(), key=lambda r: r["row"])
    ok = [r for r in records if r["status"] == STATUS_OK]
    order: list[SummaryRow] = []
    previous: dict[str, Any] | None = None
    for r in ok:
        spearman, share = r.get("spearman"), r.get(head) if head else None
        order.append(
            SummaryRow(
                row=r["row"],
                model=r["model"],
                label=r.get("label"),
                severity=r.get("verdict_severity"),
                spearman=spearman,
                head_share=share,
                rank_value=r.get(rank_by),
                delta_spearman=_delta(spearman, previous.get("spearman") if previous else None),
                delta_head_share=_delta(share, previous.get(head) if previous and head else None),
                **_accuracy(r, head, recommended.get(r["row"])),
            )
        )
        previous = r
    ranking = sorted(order, key=ranking_key)
    trends = []
    for metric in dict.fromkeys(m for m in ("spearman", head, rank_by) if m):
        points = [(r["row"], r[metric]) for r in ok if r.get(metric) is not None]
        trends.append(_trend(metric, points))
    failures = [(r["row"], r["model"], r["error"] or "") for r in records if r["status"] == STATUS_ERROR]
    return BatchSummary(
        n_rows=len(records),
        n_ok=len(ok),
        n_error=len(failures),
        rank_by=rank_by,
        head_share_metric=head,
        ranking=ranking,
        order=order,
        trends=trends,
        failures=failures,
    )


def ranking_key(row: SummaryRow) -> tuple[bool, float, bool, float, int]:
    """The ranking rule (docs/report.md, "Batch summary"): most biased first by the
    ``rank_by`` column, descending; ties (and equal values) by the head-share ratio,
    descending; then by manifest row. Rows without a value come after every row with one,
    at each step."""
    return (row.rank_value is None, -(row.rank_value or 0.0), row.head_share is None, -(row.head_share or 0.0),
            row.row)


def _accuracy(record: dict[str, Any], head: str | None, recommended: str | None) -> dict[str, Any]:
    """The accuracy fields of one ok row: dot's NDCG and recall at the head-share K."""
    k = head.rsplit("@", 1)[1] if head else None
    return {"ndcg": record.get(f"ndcg_dot@{k}") if k else None, "recall": record.get(f"recall_dot@{k}") if k else None,
            "recommended": recommended}  # fmt: skip


def _recommended(table: pa.Table) -> dict[int, str | None]:
    """Each row's recommended scoring, read from its JSON report one row at a time (the
    reports are tens of kilobytes each: never all decoded at once)."""
    if "report_json" not in table.column_names or "row" not in table.column_names:
        return {}
    out: dict[int, str | None] = {}
    rows, reports = table.column("row"), table.column("report_json")
    for i in range(table.num_rows):
        text = reports[i].as_py()
        try:
            accuracy = (json.loads(text) or {}).get("accuracy") if text else None
        except (ValueError, AttributeError):
            accuracy = None
        chosen = accuracy.get("recommended") if isinstance(accuracy, dict) else None
        out[int(rows[i].as_py())] = chosen if isinstance(chosen, str) else None
    return out


def _delta(value: float | None, before: float | None) -> float | None:
    return None if value is None or before is None else value - before


def _trend(metric: str, points: list[tuple[int, float]]) -> Trend:
    if not points:
        return Trend(metric, 0, None, None, None, None, None, None, None, "no clear trend")
    rows = np.array([p[0] for p in points], dtype=np.float64)
    values = np.array([p[1] for p in points], dtype=np.float64)
    tau = p = None
    direction = "no clear trend"
    if len(points) >= 3 and np.ptp(values) > 0:
        test = kendall_tau_test(rows, values)
        tau, p = float(test.statistic), float(test.pvalue)
        if p < 0.05:
            direction = "rising" if tau > 0 else "falling"
    return Trend(
        metric=metric,
        n=len(points),
        first=float(values[0]),
        last=float(values[-1]),
        change=float(values[-1] - values[0]),
        min_row=int(rows[int(np.argmin(values))]),
        max_row=int(rows[int(np.argmax(values))]),
        kendall_tau=tau,
        p_value=p,
        direction=direction,
    )
