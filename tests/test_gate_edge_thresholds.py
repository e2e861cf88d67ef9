"""A threshold on the edge of its figure's range where the gate can never trip (``>1`` on a
fraction, meant as 1%; ``<0`` on a fraction or a ratio; ``>3`` on the severity level) is a
usage error (exit 2) as one outside the range is (QA report N2). A gate that trips on every
run (``>=0``, ``spearman>=-1``) is loud, not silent, and is taken (the corpus uses them).
One table (:data:`auditor.gate_names.FIGURE_RANGES`) holds every range: fractions 0–1,
correlations -1–1, every ``_ratio`` at least 0, ``severity_level`` 0–3."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from auditor.cli import cli
from auditor.errors import GateError
from auditor.gate import gates_for
from auditor.gate_names import FIGURE_RANGES, figure_range, out_of_range
from auditor.sections import SEVERITIES
from gate_samples import write_popular_table

NEVER = "so the gate could never trip"


@pytest.mark.parametrize("expr, said", [
    ("head_share_1pct_dot@10>1", f"head_share_1pct_dot@10 is a fraction 0–1: 1% is 0.01; it is never > 1, {NEVER}"),
    ("aplt_dot@10<0", f"aplt_dot@10 is a fraction 0–1; it is never < 0, {NEVER}"),
    ("ndcg_cosine@10>1", f"it is never > 1, {NEVER}"),
    ("spearman>1", f"spearman is a correlation from -1 to 1; it is never > 1, {NEVER}"),
    ("spearman<-1", f"it is never < -1, {NEVER}"),
    ("severity_level>=4", "severity_level is a level 0–3 (0 none, 1 low, 2 moderate, 3 high); the threshold 4 is "
                          "outside that range"),
    ("severity_level>3", f"it is never > 3, {NEVER}"),
    ("severity_level<0", f"it is never < 0, {NEVER}"),
    ("head_share_1pct_ratio@10<-1", "head_share_1pct_ratio@10 is a dot / cosine ratio, never below 0; the threshold -1 "
                                    "is outside that range"),
    ("head_share_1pct_ratio@10<0", f"it is never < 0, {NEVER}"),
    ("mrr_ratio@10<0", f"mrr_ratio@10 is a dot / cosine ratio, never below 0; it is never < 0, {NEVER}"),
    ("head_share_1pct_ratio@10==-2", "the threshold -2 is outside that range"),
    ("severity_level==1.5", f"severity_level is a level 0–3 (0 none, 1 low, 2 moderate, 3 high); it is never == 1.5, "
                            f"{NEVER}"),
    ("gap_delta_niche_dot@10<-1", f"it is never < -1, {NEVER}"),
    ("miscalibration_dot@10>1", f"it is never > 1, {NEVER}"),
])
def test_a_gate_that_could_never_trip_is_a_usage_error(expr: str, said: str) -> None:
    with pytest.raises(GateError) as caught:
        gates_for([expr], [10])
    assert said in str(caught.value)
    assert "Valid metrics" not in str(caught.value)
    fraction = figure_range(expr.split("<")[0].split(">")[0].split("=")[0]) == FIGURE_RANGES["fraction"]
    assert ("gate as fractions" in str(caught.value)) == fraction  # the unit note only where a fraction is refused


@pytest.mark.parametrize("expr", [
    "head_share_1pct_dot@10<1", "head_share_1pct_dot@10>=1", "head_share_1pct_dot@10>0", "head_share_1pct_dot@10<=0",
    "coverage_dot@10==1", "aplt_dot@10!=0", "spearman>-1", "spearman<1", "spearman>=1",
    "severity_level>=3", "severity_level<=0", "severity_level>2.5", "severity_level!=0",
    "head_share_1pct_ratio@10<=0", "head_share_1pct_ratio@10>0", "head_share_1pct_ratio@10>1000", "mrr_ratio@10<0.5",
    "loglog_slope<-3", "arp_dot@10>0", "gap_delta_niche_dot@10<=-1", "gap_delta_niche_dot@10>10",
    "severity_level==2", "severity_level!=1.5", "ndcg_niche_dot@10>=1", "miscalibration_niche_dot@10>0",
    "coverage_dot@10>=0", "head_share_10pct_dot@10<=1", "severity_level>=0", "mrr_ratio@10>=0", "spearman>=-1",
])
def test_a_gate_that_can_trip_is_taken(expr: str) -> None:
    assert len(gates_for([expr], [10])) == 1


def test_the_one_table_holds_the_severity_and_ratio_ranges() -> None:
    assert figure_range("severity_level") == (0.0, float(len(SEVERITIES) - 1), FIGURE_RANGES["severity_level"][2])
    assert figure_range("head_share_1pct_ratio@10") == FIGURE_RANGES["ratio"]
    assert figure_range("ndcg_niche_ratio@10") == FIGURE_RANGES["ratio"]
    assert FIGURE_RANGES["ratio"][:2] == (0.0, float("inf"))
    assert out_of_range("kendall", ">", 0.5) == ""


def test_check_refuses_an_edge_threshold_with_exit_2_and_the_fraction_it_meant_trips(tmp_path: Path) -> None:
    write_popular_table(tmp_path)
    args = ["check", str(tmp_path / "items.npy"), "--interactions", str(tmp_path / "log.parquet"), "--bootstrap", "0",
            "--no-probes", "-q", "-k", "10"]
    runner = CliRunner()
    for gate in ("head_share_10pct_dot@10>1", "aplt_dot@10<0", "severity_level>=4", "head_share_10pct_ratio@10<-1"):
        result = runner.invoke(cli, [*args, "--fail-on", gate])
        assert result.exit_code == 2, (gate, result.output)  # was 0: a gate that could never trip
        assert f"invalid --fail-on: '{gate}'" in result.output
    runner.invoke(cli, [*args, "--json", str(tmp_path / "r.json")])
    share = json.loads((tmp_path / "r.json").read_text())["retrieval"]["at"]["10"]["dot"]["head_share_10pct"]
    assert 0.01 < share < 1  # the intended gate, above 1%, holds
    assert runner.invoke(cli, [*args, "--fail-on", "head_share_10pct_dot@10>0.01"]).exit_code == 3
