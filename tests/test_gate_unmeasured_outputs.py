"""A gate that cannot be evaluated ends ``check`` in exit 1 with no output of the run
(QA report F2): a gate on a figure of an input the command line does not give (a trace,
served lists, a bootstrap) is refused before any audit, as a K not asked for; one whose
section the read inputs leave unmeasured (no held-out interactions) once they are read,
before anything is measured; one without a value after the audit (a ratio of two zeros)
before any report is written, so an earlier run's report is never replaced."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import auditor.audit
from auditor.cli import cli
from auditor.gate import UnmeasuredGateError, gates_for, refuse_unread
from auditor.gate_reasons import section_of, why_inputs_lack
from gate_samples import write_popular_table

EARLIER = '{"previous_run": true}\n'


@pytest.fixture()
def inputs(tmp_path: Path) -> Path:
    """60 items whose norms grow with popularity, their log, and an earlier run's reports."""
    write_popular_table(tmp_path)
    (tmp_path / "audit.json").write_text(EARLIER)
    return tmp_path


def check(d: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["check", str(d / "items.npy"), "--interactions", str(d / "log.parquet"),
                                    "--bootstrap", "0", "--no-probes", "-q", "-k", "10", "--json",
                                    str(d / "audit.json"), "--html", str(d / "audit.html"), *args])


def test_why_inputs_lack_names_the_missing_input() -> None:
    nothing = {"trace": None, "recommendations": None, "bootstrap": 0}
    assert why_inputs_lack("training_spearman", nothing) == "no training trace (pass trace)"
    assert why_inputs_lack("training_angle_share_90_1", nothing) == "no training trace (pass trace)"
    assert why_inputs_lack("spearman_ci_lo", nothing) == "no CI without a bootstrap (bootstrap 0)"
    assert why_inputs_lack("served_spearman_ci_hi", nothing) == "no CI without a bootstrap (bootstrap 0)"
    for name in ("gini_served@10", "overlap_served_dot@10"):
        assert why_inputs_lack(name, nothing) == "no served lists were given (pass recommendations)"
    assert why_inputs_lack("head_share_log", nothing) == ("measured for served lists (recommendations), alone or "
                                                          "beside a model")
    given = {"trace": Path("t.jsonl"), "recommendations": Path("r.csv"), "bootstrap": 1000}
    for name in ("training_spearman", "spearman_ci_lo", "gini_served@10", "head_share_log", "spearman", "gini_dot@10"):
        assert why_inputs_lack(name, given) == ""
    assert why_inputs_lack("gini_dot@10", nothing) == "" and why_inputs_lack("spearman", nothing) == ""


def test_gates_for_refuses_a_gate_of_an_input_not_given_with_the_k_advice() -> None:
    given = {"trace": None, "recommendations": None, "bootstrap": 1000}
    with pytest.raises(UnmeasuredGateError) as caught:
        gates_for(["training_spearman>0.5", "gini_dot@100>0.5", "spearman>0.5"], [10], given=given)
    message = str(caught.value)
    assert "training_spearman>0.5: no training trace (pass trace)" in message  # the library names settings so
    assert "gini_dot@100>0.5: K=100 was not asked for" in message
    assert "; spearman>0.5" not in message and not message.endswith("spearman>0.5")
    # Given the trace, the same gate parses (without ``given``, as the library's callers had it).
    assert len(gates_for(["training_spearman>0.5"], [10], given={**given, "trace": Path("t")})) == 1
    assert len(gates_for(["training_spearman>0.5"], [10])) == 1


def test_refuse_unread_names_only_the_sections_the_inputs_leave_unmeasured() -> None:
    assert [section_of(n) for n in ("ndcg_dot@10", "gini_dot@10", "recall@10", "spearman", "served_spearman",
                                    "severity_level")] == ["accuracy", "retrieval", "retrieval", "frequency_norm",
                                                           None, None]
    gates = gates_for(["ndcg_dot@10<0.1", "gini_dot@10>0.5", "spearman>0.5"], [10])
    refuse_unread(gates, {"novelty": "a reason"})  # nothing the gates read: no error
    with pytest.raises(UnmeasuredGateError) as caught:
        refuse_unread(gates, {"accuracy": "no held-out interactions: pass --holdout PATH"})
    assert str(caught.value) == ("cannot evaluate fail_on ndcg_dot@10<0.1: accuracy not measured: no held-out "
                                 "interactions: pass --holdout PATH")


@pytest.mark.parametrize("gate, said", [
    ("training_spearman>0.5", "training_spearman>0.5: no training trace (pass --trace)"),
    ("ndcg_dot@10<0.05", "ndcg_dot@10<0.05: accuracy not measured: no held-out interactions: pass --holdout PATH"),
])
def test_gate_of_a_missing_input_is_refused_before_anything_is_measured(
    inputs: Path, gate: str, said: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    served: list[object] = []
    serve = auditor.audit._serve
    monkeypatch.setattr(auditor.audit, "_serve", lambda *a, **k: served.append(a) or serve(*a, **k))
    result = check(inputs, "--fail-on", gate)
    assert result.exit_code == 1, result.output
    assert said in result.stderr and "Traceback" not in result.output
    assert served == []  # no retrieval ran
    assert (inputs / "audit.json").read_text() == EARLIER and not (inputs / "audit.html").exists()


def test_gate_without_a_value_after_the_audit_replaces_no_report(inputs: Path) -> None:
    first = check(inputs, "--fail-on", "spearman<0")
    assert first.exit_code == 0, first.output
    report = json.loads((inputs / "audit.json").read_text())
    cut = report["retrieval"]["at"]["10"]
    (inputs / "audit.json").write_text(EARLIER)
    (inputs / "audit.html").unlink()
    # Norms frequency^0.25 over distinct frequencies: ρ is exactly 1.
    assert report["frequency_norm"]["spearman"] == pytest.approx(1.0)
    # ΔGAP of the diverse users is negative under dot and cosine here: their ratio is undefined, which
    # only the finished audit knows.
    assert cut["dot"]["gap_delta_diverse"] < 0 and cut["cosine"]["gap_delta_diverse"] < 0
    result = check(inputs, "--fail-on", "gap_delta_diverse_ratio@10>1", "--fail-on", "spearman>0.5")
    assert result.exit_code == 1, result.output
    assert "gate spearman>0.5: 1 (TRIPPED)" in result.stderr
    assert "a ratio of two signed figures is undefined" in result.stderr
    assert result.stderr.rstrip().endswith("No report was written")
    assert (inputs / "audit.json").read_text() == EARLIER and not (inputs / "audit.html").exists()
    # Without the unmeasurable gate, the tripped one writes the reports and exits 3.
    tripped = check(inputs, "--fail-on", "spearman>0.5")
    assert tripped.exit_code == 3 and json.loads((inputs / "audit.json").read_text())["schema_version"] == 1


@pytest.mark.parametrize(("outputs", "ending"), [
    (["--format", "json"], "No report was printed"),  # the JSON report asked for on stdout
    ([], "No report was printed"),  # the console report (no -q)
    (["--format", "json", "--markdown", "{d}/audit.md"], "No report was written or printed"),
    (["--markdown", "{d}/audit.md"], "No report was written"),  # -q: the console report is not asked for
    ([], None),  # -q and no file: no report was asked for, nothing to say
])
def test_a_refused_gate_says_which_reports_the_run_did_not_give(
    inputs: Path, outputs: list[str], ending: str | None,
) -> None:
    """QA verification note: a gate refused after the audit with the report on stdout left
    stdout empty, and its Error: line said nothing of it ("No report was written" came only
    with report files or MLflow). It now says the report was not printed either."""
    quiet = ["-q"] if outputs != [] or ending is None else []
    args = ["check", str(inputs / "items.npy"), "--interactions", str(inputs / "log.parquet"), "--bootstrap", "0",
            "--no-probes", "-k", "10", *quiet, *(o.format(d=inputs) for o in outputs),
            "--fail-on", "gap_delta_diverse_ratio@10>1"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1, result.output
    assert result.stdout == ""  # nothing of the run's report on stdout
    error = result.stderr.rstrip()
    assert "a ratio of two signed figures is undefined" in error
    if ending is None:
        assert not error.endswith(("written", "printed")) and "No report" not in error
    else:
        assert error.endswith(ending) and error.count("No report") == 1
    assert not (inputs / "audit.md").exists() and (inputs / "audit.json").read_text() == EARLIER
