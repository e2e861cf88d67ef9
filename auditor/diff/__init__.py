"""Comparing two audits: every flat metric of two JSON reports side by side with its
change and whether it moved towards less bias or more accuracy, the verdict's and the
conditions' changes, the settings that make figures incomparable, and gates on changes
(docs/diff.md)."""

from auditor.diff.compare import MetricChange, ReportDiff, diff_reports
from auditor.flat import flat_metrics_from_report
from auditor.diff.gates import diff_gate_names, evaluate_diff_gates, parse_diff_gates
from auditor.diff.read import read_report

__all__ = [
    "MetricChange", "ReportDiff", "diff_gate_names", "diff_reports", "evaluate_diff_gates",
    "flat_metrics_from_report", "parse_diff_gates", "read_report",
]  # fmt: skip
