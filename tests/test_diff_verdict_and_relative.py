"""`popaudit diff`: the verdict's grade is checked, relative changes from 0 or from
round-off of 0, and the verdict's grade in the JSON (QA report 5, Diff F4–F8)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from auditor.diff import diff_reports
from auditor.errors import ReportError
from diff_samples import biased_table_report


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The JSON report of a small biased table (popular items longer), as written and read back."""
    return biased_table_report(tmp_path_factory.mktemp("verdict"))


@pytest.mark.parametrize("severity", ["catastrophic", None, "MODERATE"])
def test_an_unknown_or_missing_severity_is_a_corrupt_report(report: dict[str, Any], severity: str | None) -> None:
    """F4: read as "none", an edited grade made the verdict's change "less bias"."""
    edited = copy.deepcopy(report)
    if severity is None:
        del edited["verdict"]["severity"]
    else:
        edited["verdict"]["severity"] = severity
    found = "missing" if severity is None else f'"{severity}"'
    with pytest.raises(ReportError, match=rf"after\.json: verdict\.severity is {found}, not one of none, low"):
        diff_reports(report, edited, base_name="before.json", new_name="after.json")
    with pytest.raises(ReportError, match=r"base report before\.json: verdict\.severity"):
        diff_reports(edited, report, base_name="before.json", new_name="after.json")


def _slopes(report: dict[str, Any], base: float, new: float) -> tuple[dict[str, Any], dict[str, Any]]:
    before, after = copy.deepcopy(report), copy.deepcopy(report)
    before["frequency_norm"]["loglog_slope"], after["frequency_norm"]["loglog_slope"] = base, new
    return before, after


def test_a_base_within_float32_round_off_of_0_has_no_relative_change(report: dict[str, Any]) -> None:
    """F5: the log–log slope of norms equal to within float32 rounding (6e-10) against 0.2586
    read +43,272,124,953.9 % and topped "Largest changes"."""
    from auditor.diff import evaluate_diff_gates, parse_diff_gates
    from auditor.errors import UnmeasuredGateError
    from auditor.report.diff_doc import diff_document

    diff = diff_reports(*_slopes(report, 5.98e-10, 0.2586))
    slope = diff.metric("loglog_slope")
    assert slope.relative is None and slope.delta == pytest.approx(0.2586 - 5.98e-10) and slope.direction == "more bias"
    assert 5.98e-10 <= 2.0**-23 * 0.2586  # the rule: |base| <= float32 round-off of |new|
    gates = parse_diff_gates(["loglog_slope.rel>1"], ["loglog_slope"])
    with pytest.raises(UnmeasuredGateError, match=r"base value 5\.98e-10 is 0 to within float32 round-off"):
        evaluate_diff_gates(gates, diff)
    largest = next(s for s in diff_document(diff.to_dict()).sections if s.key == "largest")
    assert "loglog_slope" not in str(largest.blocks[:2])  # counted as moved from 0, not ranked
    # A small base above round-off keeps its relative change: (0.2586 − 0.001) / 0.001.
    kept = diff_reports(*_slopes(report, 1e-3, 0.2586)).metric("loglog_slope")
    assert kept.relative == pytest.approx((0.2586 - 1e-3) / 1e-3)


def test_no_change_from_0_is_a_relative_change_of_0(report: dict[str, Any]) -> None:
    """F6 (documented, not changed): 0 → 0 is unchanged, relative 0, so `.rel` gates read 0
    (`ndcg_dot@10.rel<-0.02` passes on a figure that stays 0); a move from 0 has none."""
    from auditor.diff import evaluate_diff_gates, parse_diff_gates
    from auditor.errors import UnmeasuredGateError

    still = diff_reports(*_slopes(report, 0.0, 0.0)).metric("loglog_slope")
    assert (still.delta, still.relative, still.direction) == (0.0, 0.0, "unchanged")
    gates = parse_diff_gates(["loglog_slope.rel>=0"], ["loglog_slope"])
    assert [o.value for o in evaluate_diff_gates(gates, diff_reports(*_slopes(report, 0.0, 0.0)))] == [0.0]
    with pytest.raises(UnmeasuredGateError, match="the base value is 0"):
        evaluate_diff_gates(gates, diff_reports(*_slopes(report, 0.0, 0.1)))


def test_the_verdicts_grade_is_in_the_json_and_the_table_of_every_figure(report: dict[str, Any], tmp_path: Path) -> None:
    """F8: severity_level could be gated but was in neither the JSON's metrics nor --all."""
    from click.testing import CliRunner

    from auditor.cli import cli

    lower = copy.deepcopy(report)
    lower["verdict"]["severity"] = "none" if report["verdict"]["severity"] != "none" else "high"
    levels = ["none", "low", "moderate", "high"]
    expected = levels.index(lower["verdict"]["severity"]) - levels.index(report["verdict"]["severity"])
    (tmp_path / "a.json").write_text(json.dumps(report))
    (tmp_path / "b.json").write_text(json.dumps(lower))
    run = CliRunner().invoke(cli, ["diff", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--format", "json"],
                             catch_exceptions=False)
    metrics = json.loads(run.stdout)["metrics"]
    graded = metrics[-1]
    assert graded["name"] == "severity_level" and graded["delta"] == float(expected)
    assert graded["direction"] == ("less bias" if expected < 0 else "more bias") == json.loads(run.stdout)["verdict"]["direction"]
    run = CliRunner().invoke(cli, ["diff", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--format", "markdown",
                                   "--all"], catch_exceptions=False)
    assert run.stdout.count("| severity\\_level |") == 1  # a row of the table of every figure only
    lead = run.stdout.split("\n\n")[1]
    same = CliRunner().invoke(cli, ["diff", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--format",
                                    "markdown"], catch_exceptions=False)
    assert lead == same.stdout.split("\n\n")[1] and "severity\\_level" not in same.stdout


def test_a_verdict_check_could_not_assess_is_not_comparable(report: dict[str, Any]) -> None:
    """QA (not filed): `check` writes severity "none" with assessed false when nothing graded
    the verdict; diff read "moderate → none" as less bias while a severity_level gate said
    "nothing graded the severity"."""
    from auditor.diff import evaluate_diff_gates, parse_diff_gates
    from auditor.errors import UnmeasuredGateError

    assert report["verdict"]["assessed"] is True and report["verdict"]["severity"] != "none"
    unassessed = copy.deepcopy(report)
    unassessed["verdict"].update(severity="none", assessed=False, bias_detected=False)
    for base, new, side in ((report, unassessed, "the new"), (unassessed, report, "the base")):
        diff = diff_reports(base, new)
        assert diff.verdict.direction == "not comparable"
        assert diff.verdict.reason == f"{side} report's verdict was not assessed; nothing graded its severity"
        assert diff.graded.delta is None and diff.graded.status != "compared"
        gates = parse_diff_gates(["severity_level.delta<0"], ["severity_level"])
        with pytest.raises(UnmeasuredGateError):
            evaluate_diff_gates(gates, diff)
    both = diff_reports(unassessed, copy.deepcopy(unassessed)).verdict
    assert (both.direction, both.reason) == ("not comparable", "neither report's verdict was assessed; "
                                             "nothing graded a severity")
