"""diff's gates get check's range check (QA11 diffapi F3): a threshold outside the range of
the figure (as check refuses it), of its change (``.delta`` of a figure in [a, b] lies in
[a − b, b − a]) or of its relative change (``.rel`` of a figure never below 0 is never below
-1), or on the edge where the gate could never trip, is a usage error, not a gate that
silently passes: ``head_share_1pct_dot@10.delta>1``, meant as one point, passed a 3.5-point rise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from auditor.cli import cli
from auditor.diff import parse_diff_gates
from auditor.errors import GateError
from auditor.gate_names import FIGURE_RANGES, change_range, figure_range

NAMES = ["head_share_1pct_dot@10", "coverage_dot@10", "spearman", "severity_level", "head_share_1pct_ratio@10",
         "gap_delta_niche_dot@10", "ndcg_dot@10", "aplt_dot@10", "loglog_slope"]
NEVER = "so the gate could never trip"


@pytest.mark.parametrize("expr, said", [
    ("head_share_1pct_dot@10>3", "head_share_1pct_dot@10 is a fraction 0–1: 3% is 0.03; the threshold 3 is outside"),
    ("head_share_1pct_dot@10>1", f"it is never > 1, {NEVER}"),
    ("coverage_dot@10<50", "coverage_dot@10 is a fraction 0–1: 50% is 0.5"),
    ("aplt_dot@10<0", f"it is never < 0, {NEVER}"),
    ("severity_level>3", f"it is never > 3, {NEVER}"),
    ("head_share_1pct_dot@10.delta>1", "head_share_1pct_dot@10.delta is a change of a fraction 0–1, so from -1 to 1: "
                                       f"1% is 0.01; it is never > 1, {NEVER}"),
    ("coverage_dot@10.delta<-5", "coverage_dot@10.delta is a change of a fraction 0–1, so from -1 to 1: -5% is -0.05; "
                                 "the threshold -5 is outside that range"),
    ("spearman.delta>2.5", "spearman.delta is a change of a correlation from -1 to 1, so from -2 to 2; the threshold 2.5"),
    ("severity_level.delta>3", f"so from -3 to 3; it is never > 3, {NEVER}"),
    ("severity_level.delta==0.5", f"it is never == 0.5, {NEVER}"),
    ("ndcg_dot@10.rel<-2", "ndcg_dot@10.rel is the relative change of a figure never below 0 (a fraction 0–1), so "
                           "never below -1 (-100%): -2% is -0.02; the threshold -2 is outside that range"),
    # each bound said of its own quantity (QA11 verification N4: "…, never below 0, never below -1")
    ("arp_dot@10.rel<-1", "arp_dot@10.rel is the relative change of a figure never below 0 (a mean training popularity "
                          "(interactions or users per item)), so never below -1 (-100%): -1% is -0.01; it is never < -1"),
    ("unsafe_globals.rel<-1", "unsafe_globals.rel is the relative change of a figure never below 0 (a count), so never "
                              "below -1 (-100%)"),
    ("head_share_1pct_ratio@10.rel<-1", f"it is never < -1, {NEVER}"),
])
def test_a_diff_gate_that_could_never_trip_is_a_usage_error(expr: str, said: str) -> None:
    with pytest.raises(GateError, match="invalid fail_on") as caught:
        parse_diff_gates([expr], NAMES)
    assert said in str(caught.value)


@pytest.mark.parametrize("expr", [
    "head_share_1pct_dot@10.delta>0.01", "head_share_1pct_dot@10.delta>=1", "coverage_dot@10.delta<-0.05",
    "spearman.delta<-1.5", "spearman.rel<-3", "severity_level.delta>0", "severity_level.delta>=3", "ndcg_dot@10.rel<-0.02",
    "ndcg_dot@10.rel<=-1", "head_share_1pct_ratio@10.delta>100", "gap_delta_niche_dot@10.rel<-5", "loglog_slope.delta>7",
    "severity_level.rel>5", "head_share_1pct_dot@10<0.05",
])
def test_a_diff_gate_that_can_trip_is_taken(expr: str) -> None:
    assert len(parse_diff_gates([expr], NAMES)) == 1


def test_the_change_ranges_follow_from_the_one_table() -> None:
    assert change_range(FIGURE_RANGES["fraction"], "delta")[:2] == (-1.0, 1.0)  # type: ignore[index]
    assert change_range(FIGURE_RANGES["correlation"], "delta")[:2] == (-2.0, 2.0)  # type: ignore[index]
    assert change_range(figure_range("severity_level"), "delta")[:2] == (-3.0, 3.0)  # type: ignore[index]
    assert change_range(FIGURE_RANGES["ratio"], "delta") is None  # unbounded above
    assert change_range(FIGURE_RANGES["ratio"], "rel")[:2] == (-1.0, float("inf"))  # type: ignore[index]
    assert change_range(FIGURE_RANGES["correlation"], "rel") is None  # a figure below 0: any relative change


def test_the_cli_refuses_with_exit_2_and_the_intended_gate_trips(tmp_path: Path) -> None:
    def report(share: float) -> str:
        return json.dumps({"schema_version": 1, "tool": {"name": "popaudit"}, "inputs": {}, "frequency_norm": None,
                           "retrieval": {"at": {"10": {"dot": {"head_share_1pct": share}}}},
                           "verdict": {"severity": "low", "bias_detected": True}})

    (tmp_path / "a.json").write_text(report(0.0065))
    (tmp_path / "b.json").write_text(report(0.0413))
    args = ["diff", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "-q", "--fail-on"]
    refused = CliRunner().invoke(cli, [*args, "head_share_1pct_dot@10.delta>1"])
    assert refused.exit_code == 2 and "1% is 0.01" in refused.output  # was exit 0 on a +3.48-point rise
    tripped = CliRunner().invoke(cli, [*args, "head_share_1pct_dot@10.delta>0.01"])
    assert tripped.exit_code == 3 and "0.0348 (TRIPPED)" in tripped.output
