"""One gate policy for ``check`` and ``batch``: the same expressions accepted and rejected,
the same exit codes (2 unknown name, 1 unmeasured metric, 3 a gate holds).

Both commands run real audits of one small table (ρ = 1); ``batch`` audits inline here
(the same audit, in this process) so that the comparison stays quick.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pytest
from click.testing import CliRunner, Result

import auditor.batch
from auditor.cli import cli
from auditor.gate import UnmeasuredGateError, evaluate_gates, gates_for, require_measured
from gate_samples import write_popular_table

PLUGIN = ["--plugin", str(Path(__file__).parents[1] / "plugins" / "norm_measures.py")]
FAST = ["-k", "10", "--bootstrap", "0", "--no-retrieval", "--no-probes", "-q"]


@pytest.fixture()
def biased(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A table whose norms follow popularity exactly, its log, and a one-row manifest."""
    write_popular_table(tmp_path)
    pacsv.write_csv(pa.table({"model": ["items.npy"]}), tmp_path / "m.csv")
    monkeypatch.setattr("auditor.batch.run_batch", functools.partial(auditor.batch.run_batch, inline=True))
    return tmp_path


def check(d: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["check", str(d / "items.npy"), "--interactions", str(d / "log.parquet"), *FAST, *args])


def batch(d: Path, *args: str, manifest: str = "m.csv") -> Result:
    return CliRunner().invoke(
        cli, ["batch", str(d / manifest), "-o", str(d / "r.parquet"), "--interactions", str(d / "log.parquet"), *FAST, *args]
    )


def fail_on(*expressions: str) -> list[str]:
    return [arg for expr in expressions for arg in ("--fail-on", expr)]


def error_line(result: Result) -> str:
    return next(line for line in result.stderr.splitlines() if line.startswith("Error:"))


@pytest.mark.parametrize(
    ("expressions", "plugin", "problem"),
    [
        (["spearmn>0.5"], False, "unknown metric 'spearmn'"),
        (["spearman >> 1"], False, "is not 'METRIC OP NUMBER'"),
        (["recall@5x>0.9"], False, "unknown metric 'recall@5x'"),
        (["norm_gini>0"], False, "unknown metric 'norm_gini'"),  # a plugin measure, no plugin
        (["spearman>0.5", "norm_gini>>0"], True, "'norm_gini>>0' is not"),
    ],
)
def test_both_reject_the_same_expressions_with_the_same_usage_error(
    biased: Path, expressions: list[str], plugin: bool, problem: str
) -> None:
    args = fail_on(*expressions) + (PLUGIN if plugin else [])
    checked, batched = check(biased, *args), batch(biased, *args)
    assert (checked.exit_code, batched.exit_code) == (2, 2), (checked.output, batched.output)
    assert problem in error_line(checked)
    assert error_line(checked) == error_line(batched)  # the same names are valid for both
    assert not (biased / "r.parquet").exists()  # rejected before anything ran


@pytest.mark.parametrize(
    ("expressions", "plugin", "code"),
    [
        (["spearman>0.5"], False, 3),
        (["spearman<0"], False, 0),
        (["norm_gini>0"], True, 3),  # a plugin measure is a valid gate name for both
        (["norm_gini>1", "spearman<0"], True, 0),
        (["head_share_1pct_ratio@10>1.5"], False, 1),  # --no-retrieval: never measured
        (["spearman>0.5", "head_share_1pct_ratio@10>1.5"], False, 1),  # unmeasured beats tripped
    ],
)
def test_both_accept_the_same_expressions_with_the_same_exit_code(
    biased: Path, expressions: list[str], plugin: bool, code: int
) -> None:
    args = fail_on(*expressions) + (PLUGIN if plugin else [])
    checked, batched = check(biased, *args), batch(biased, *args)
    assert (checked.exit_code, batched.exit_code) == (code, code), (checked.output, batched.output)
    if code == 3:
        assert "TRIPPED" in checked.stderr and "gate row 0 (items.npy)" in batched.stderr
    if code == 1:
        said = "retrieval not measured: skipped with --no-retrieval"
        assert error_line(checked) == f"Error: cannot evaluate --fail-on head_share_1pct_ratio@10>1.5: {said}"
        assert error_line(batched) == f"Error: cannot evaluate --fail-on head_share_1pct_ratio@10>1.5: in every audited row, {said}"


@pytest.mark.parametrize(
    ("expression", "reason"),
    [  # well-formed names that other settings would measure: exit 1 with what would (they were "unknown", exit 2),
       # said before any audit runs
        # QA accuracy F2: -k and --alpha replace their defaults, so the advice gives the whole list to pass
        ("recall@5>0.9", "K=5 was not asked for (add -k 5; -k replaces the cut-offs measured now (10), so pass them "
                         "all: -k 10 -k 5)"),
        ("head_share_1pct_ratio@50>1.25", "K=50 was not asked for (add -k 50; -k replaces the cut-offs measured "
                                          "now (10), so pass them all: -k 10 -k 50)"),
        ("gini_alpha_0.3@10>0.5", "α=0.3 was not asked for (add --alpha 0.3; --alpha replaces the α measured now "
                                  "(0.25, 0.5, 0.75), so pass them all: --alpha 0.25 --alpha 0.5 --alpha 0.75 --alpha 0.3)"),
        ("head_share_1pct_alpha_1@10>0", "α=1 is dot serving, not measured apart: gate head_share_1pct_dot@10 instead"),
    ],
)
def test_a_gate_these_settings_cannot_measure_fails_before_the_audit_in_both(
    biased: Path, expression: str, reason: str
) -> None:
    checked, batched = check(biased, *fail_on(expression)), batch(biased, *fail_on(expression))
    assert (checked.exit_code, batched.exit_code) == (1, 1), (checked.output, batched.output)
    assert error_line(checked) == f"Error: cannot evaluate --fail-on {expression}: {reason}", checked.stderr
    assert error_line(batched) == error_line(checked)
    assert not (biased / "r.parquet").exists()  # nothing was audited


@pytest.mark.parametrize(
    ("expression", "reason"),
    [  # measured by neither run: each says why, from its report
        ("ndcg_dot@10<0.1", "accuracy not measured: no held-out interactions: pass --holdout PATH"),
        ("spearman_ci_lo>0", "no CI without a bootstrap (--bootstrap 0)"),
        ("training_spearman>0.5", "no training trace (pass --trace)"),
    ],
)
def test_a_gate_the_run_left_without_a_value_says_why_in_both(biased: Path, expression: str, reason: str) -> None:
    checked, batched = check(biased, *fail_on(expression)), batch(biased, *fail_on(expression))
    assert (checked.exit_code, batched.exit_code) == (1, 1), (checked.output, batched.output)
    assert error_line(checked).startswith(f"Error: cannot evaluate --fail-on {expression}: {reason}"), checked.stderr
    # batch has no --trace: it names the manifest column that sets it (QA batchlists F3)
    said = reason.replace("--trace", "the trace column")
    assert error_line(batched).startswith(f"Error: cannot evaluate --fail-on {expression}: in every audited row, {said}")


def test_a_batch_gate_with_no_audited_row_is_an_error_not_a_pass(biased: Path) -> None:
    (biased / "broken.npy").write_bytes(b"not a table")
    pacsv.write_csv(pa.table({"model": ["broken.npy"]}), biased / "broken.csv")
    assert batch(biased, manifest="broken.csv").exit_code == 0  # failing rows alone: still 0
    result = batch(biased, *fail_on("spearman>0.5"), manifest="broken.csv")
    assert result.exit_code == 1 and "not measured in any audited row" in error_line(result)


def test_require_measured_needs_one_run_that_measured_each_gate() -> None:
    gates = gates_for(["spearman>0.5", "norm_gini>0"], [10, 10], ["norm_gini"])
    runs = [evaluate_gates(gates, {"spearman": None, "norm_gini": 0.2}), evaluate_gates(gates, {"spearman": 0.7})]
    require_measured(gates, runs, where="in any row")  # each gate measured somewhere
    with pytest.raises(UnmeasuredGateError) as info:
        require_measured(gates, runs[:1], where="in any row")
    assert info.value.exit_code == 1 and "spearman>0.5" in str(info.value) and "norm_gini" not in str(info.value)
    with pytest.raises(UnmeasuredGateError):
        require_measured(gates, [], where="in any row")  # no run at all: never a pass


def test_alpha_zero_and_one_are_said_to_be_cosine_and_dot_at_audit_time(biased: Path) -> None:
    """--alpha 0 and 1 rank as cosine and dot do: the report says so where they used to be
    dropped with no word (only a gate on alpha_1 said why)."""
    out = biased / "r.json"
    ran = CliRunner().invoke(cli, ["check", str(biased / "items.npy"), "--interactions", str(biased / "log.parquet"),
                                   "-k", "10", "--bootstrap", "0", "--no-probes", "-q", "--alpha", "0", "--alpha", "1",
                                   "--alpha", "0.5", "--json", str(out)])
    assert ran.exit_code == 0, ran.output
    report = json.loads(out.read_text())
    said = [w for w in report["warnings"] if "not measured apart" in w]
    assert said == ["--alpha 0 is cosine serving, not measured apart: its figures are the cosine column's",
                    "--alpha 1 is dot serving, not measured apart: its figures are the dot column's"]
    assert set(report["retrieval"]["at"]["10"]) >= {"dot", "cosine", "alpha_0.5"}
    assert not {"alpha_0", "alpha_1"} & set(report["retrieval"]["at"]["10"])
