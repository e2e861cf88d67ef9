"""A gate threshold outside its figure's range is a usage error (exit 2) naming the unit (QA
report F2): the reports print shares as percentages (3.6%) but the JSON and every gate hold
the fraction (0.036), so ``head_share_1pct_dot@10>3`` (meant as 3%) could never trip. One
table of the fractions (:data:`auditor.flat.FRACTIONS`) and correlations decides."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from auditor.cli import cli
from auditor.errors import GateError
from auditor.flat import FRACTIONS
from auditor.gate import gates_for
from auditor.gate_names import figure_range, out_of_range
from auditor.sections import BUILTIN_LIST_MEASURES
from gate_samples import write_popular_table


@pytest.mark.parametrize("expr, said", [
    ("head_share_1pct_dot@10>3", "head_share_1pct_dot@10 is a fraction 0–1: 3% is 0.03"),
    ("head_share_10pct_alpha_0.5@10>=50", "head_share_10pct_alpha_0.5@10 is a fraction 0–1: 50% is 0.5"),
    ("aplt_served@10<5", "aplt_served@10 is a fraction 0–1: 5% is 0.05"),
    ("coverage_cosine@10<-0.1", "coverage_cosine@10 is a fraction 0–1; the threshold -0.1"),
    ("ndcg_dot@10<1.5", "ndcg_dot@10 is a fraction 0–1"),
    ("overlap_dot_cosine@10<2", "overlap_dot_cosine@10 is a fraction 0–1"),
    ("spearman>1.5", "spearman is a correlation from -1 to 1; the threshold 1.5 is outside that range"),
    ("served_spearman<-1.01", "served_spearman is a correlation from -1 to 1"),
    # the user groups' figures and the item bias's ρ (they were taken unchecked)
    ("ndcg_niche_dot@10>1.5", "ndcg_niche_dot@10 is a fraction 0–1; the threshold 1.5 is outside that range"),
    ("miscalibration_blockbuster_dot@10>2", "miscalibration_blockbuster_dot@10 is a Jensen–Shannon divergence in bits, "
                                            "0–1; the threshold 2"),
    ("miscalibration_cosine@10<-0.5", "miscalibration_cosine@10 is a Jensen–Shannon divergence in bits"),
    ("gap_delta_niche_dot@10<-50", "gap_delta_niche_dot@10 is a relative change, never below -1 (-100%): -50% is "
                                   "-0.5; the threshold -50 is outside that range"),
])
def test_a_threshold_outside_the_range_is_a_usage_error(expr: str, said: str) -> None:
    with pytest.raises(GateError) as caught:
        gates_for([expr], [10])
    assert said in str(caught.value)
    assert "Valid metrics" not in str(caught.value)  # the name is right: no list of names


@pytest.mark.parametrize("expr", ["head_share_1pct_dot@10>0", "head_share_1pct_dot@10<1", "coverage_dot@10>=1",
                                  "head_share_1pct_ratio@10>3", "arp_dot@10>150", "novelty_dot@10<4",
                                  "gap_delta_niche_dot@10>1.5", "loglog_slope>2", "spearman>-1", "severity_level>=1"])
def test_a_threshold_within_the_range_or_of_an_unbounded_figure_is_taken(expr: str) -> None:
    assert len(gates_for([expr], [10])) == 1


def test_the_table_holds_every_share_the_reports_print_as_a_percentage_but_the_signed_lift() -> None:
    shown_as_pct = {name for name, info in BUILTIN_LIST_MEASURES.items() if info.display == "pct"}
    assert shown_as_pct <= FRACTIONS
    assert figure_range("gap_delta_niche_dot@10") == (-1.0, float("inf"), "a relative change, never below -1 (-100%)")
    assert figure_range("head_share_1pct_ratio@10") == (0.0, float("inf"), "a dot / cosine ratio, never below 0")
    assert figure_range("recall@10") == (0.0, 1.0, "a fraction 0–1")  # the index's own recall
    assert out_of_range("kendall", ">", 0.5) == ""
    # the item bias's ρ (a built-in figure measure) is a correlation too
    assert out_of_range("item_bias_spearman", ">", 1.5) == ("item_bias_spearman is a correlation from -1 to 1; the "
                                                             "threshold 1.5 is outside that range")


def test_check_and_batch_refuse_it_with_exit_2_before_any_audit(tmp_path: Path) -> None:
    write_popular_table(tmp_path)
    runner = CliRunner()
    result = runner.invoke(cli, ["check", str(tmp_path / "items.npy"), "--interactions", str(tmp_path / "log.parquet"),
                                 "--bootstrap", "0", "--no-probes", "-q", "--fail-on", "head_share_1pct_dot@10>3"])
    assert result.exit_code == 2, result.output  # was 0: a gate that could never trip
    assert "head_share_1pct_dot@10 is a fraction 0–1: 3% is 0.03" in " ".join(result.output.split())
    (tmp_path / "m.csv").write_text("model\nitems.npy\n")
    batch = runner.invoke(cli, ["batch", str(tmp_path / "m.csv"), "-o", str(tmp_path / "r.parquet"), "--interactions",
                                str(tmp_path / "log.parquet"), "-q", "--fail-on", "aplt_dot@10<5"])
    assert batch.exit_code == 2, batch.output
    assert "aplt_dot@10 is a fraction 0–1: 5% is 0.05" in " ".join(batch.output.split())
    assert not (tmp_path / "r.parquet").exists()
