"""QA13 report F3: a gate at a K not asked for and past the catalogue was advised "add -k 600",
and following that failed again ("exceeds the catalogue (500 items) and was clamped to 500 …
gate …@500 and add -k 500"). ``check`` now says the advice once the model is read, before
anything is measured, naming the catalogue and a K that measures the figure (README "Gating
CI": the advice for a K clamped to the catalogue never points at such a K)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from auditor.cli import cli
from auditor.gate_names import per_k_name
from auditor.gate_reasons import why_not_asked
from gate_samples import write_popular_table

RUN = ["--bootstrap", "0", "--no-probes", "-q"]


@pytest.fixture()
def table(tmp_path: Path) -> Path:
    write_popular_table(tmp_path)  # 60 items
    return tmp_path


def check(d: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["check", str(d / "items.npy"), "--interactions", str(d / "log.parquet"), *RUN, *args])


def error_line(result: Result) -> str:
    return next(line for line in result.stderr.splitlines() if line.startswith("Error:"))


def test_a_scorings_figure_past_the_catalogue_is_advised_the_catalogues_k_and_that_runs(table: Path) -> None:
    first = check(table, "--fail-on", "head_share_1pct_dot@200>0.99")
    assert first.exit_code == 1
    assert error_line(first) == (
        "Error: cannot evaluate --fail-on head_share_1pct_dot@200>0.99: K=200 exceeds the catalogue (60 items), which "
        "clamps it to 60: gate head_share_1pct_dot@60 (add -k 60; -k replaces the cut-offs measured now (10, 100), so "
        "pass them all: -k 10 -k 100 -k 60)")  # was "K=200 was not asked for (add -k 200; …)", which failed again
    followed = check(table, "-k", "10", "-k", "100", "-k", "60", "--fail-on", "head_share_1pct_dot@60>0.99")
    assert followed.exit_code == 0, followed.stderr


def test_a_comparison_past_the_catalogue_is_advised_a_k_below_it_that_grades(table: Path) -> None:
    first = check(table, "-k", "10", "--fail-on", "head_share_1pct_ratio@100>1000")
    assert first.exit_code == 1
    assert error_line(first) == (
        "Error: cannot evaluate --fail-on head_share_1pct_ratio@100>1000: K=100 exceeds the catalogue (60 items), which "
        "clamps it to 60, where every list holds every candidate: head_share_1pct_ratio measures nothing there; gate "
        "head_share_1pct_ratio@10")
    followed = check(table, "-k", "10", "--fail-on", "head_share_1pct_ratio@10>1000")
    assert followed.exit_code == 0, followed.stderr


def test_the_advice_below_the_catalogue_skips_saturated_ks_for_the_largest_that_grades() -> None:
    name = per_k_name("head_share_1pct_ratio@600")
    catalogue = {"n_items": 500, "saturated": {10: False, 100: True}, "graded_up_to": 80}
    assert why_not_asked(name, [10, 100], [0.5], catalogue=catalogue).endswith(
        "gate head_share_1pct_ratio@10")  # 100 saturates, 10 grades
    catalogue["saturated"] = {10: True, 100: True}
    assert "; gate it at K=80, the largest K that holds fewer than every candidate for most queries with a candidate: " \
           "head_share_1pct_ratio@80 (add " in why_not_asked(name, [10, 100], [0.5], catalogue=catalogue)
    catalogue["graded_up_to"] = None
    assert "no K can tell the scorings apart" in why_not_asked(name, [10, 100], [0.5], catalogue=catalogue)
    # A K within the catalogue: the usual advice, without a gate's K past the catalogue in the list to pass.
    assert why_not_asked(per_k_name("gini_dot@20"), [10], [0.5], named_ks=[20.0, 600.0], catalogue=catalogue) == (
        "K=20 was not asked for (add ks 20; ks replaces the cut-offs measured now (10), so pass them all: ks 10 ks 20)")
