"""``popaudit batch`` through click's CliRunner (audits by the fake audit, in-process)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from test_batch_core import fake_audit, workspace, write_manifest  # noqa: F401

import auditor.batch
from auditor.cli import cli


@pytest.fixture()
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    # The command audits in worker processes at every -j: hand them the fake audit (the
    # command looks run_batch up at call time; workers import fake_audit by name).
    monkeypatch.setattr("auditor.batch.run_batch", functools.partial(auditor.batch.run_batch, audit_fn=fake_audit))
    return CliRunner()


def _manifest(d: Path) -> Path:
    return write_manifest(
        d / "nightly.csv",
        {
            "model": ["m0.npy", "m1.npy", "broken.npy", "m2.npy", "m3.npy"],
            "interactions": ["log_a.parquet", "log_b.parquet", None, "log_a.parquet", "log_b.parquet"],
            "label": ["mon", "tue", "wed", "thu", "fri"],
        },
    )


def test_batch_with_a_failing_row_exits_0_and_reports_it(runner: CliRunner, workspace: dict[str, Any]) -> None:
    d = workspace["dir"]
    out = d / "results.parquet"
    html = d / "summary.html"
    result = runner.invoke(
        cli,
        ["batch", str(_manifest(d)), "-o", str(out), "--interactions", str(d / "log_a.parquet"),
         "-k", "10", "--max-memory", "2G", "--html", str(html)],
    )
    assert result.exit_code == 0, result.output
    assert "5 rows: 4 ok, 1 failed" in result.stdout
    assert "Models ranked by spearman" in result.stdout and "Across the manifest order" in result.stdout
    # Bias strength rises along the manifest: fri (m3) ranks first.
    ranking = result.stdout.split("Models ranked by spearman")[1].split("Across")[0]
    assert ranking.index("m3.npy") < ranking.index("m2.npy") < ranking.index("m0.npy")
    assert "row 2 (broken.npy) failed" in result.stderr
    table = pq.read_table(out)
    assert table.column("status").to_pylist() == ["ok", "ok", "error", "ok", "ok"]
    assert "head_share_1pct_ratio@10" in table.column_names and "head_share_1pct_dot@100" not in table.column_names
    report = json.loads(table.column("report_json")[0].as_py())
    assert report["settings"]["max_memory"] == 2 * 2**30
    page = html.read_text()
    assert "data:image/png;base64," in page and "broken.npy" in page and "fri" in page


def test_bad_manifest_exits_1(runner: CliRunner, workspace: dict[str, Any]) -> None:
    d = workspace["dir"]
    manifest = write_manifest(d / "m.csv", {"path": ["m0.npy"]})
    result = runner.invoke(cli, ["batch", str(manifest), "-o", str(d / "r.parquet")])
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: manifest") and "columns found: path" in result.stderr
    assert "Traceback" not in result.output
    unknown = write_manifest(d / "u.csv", {"model": ["m0.npy"], "colour": ["red"]})
    result = runner.invoke(cli, ["batch", str(unknown), "-o", str(d / "r.parquet")])
    assert result.exit_code == 1 and "unknown column(s) 'colour'" in result.stderr


def test_fail_on_gate_exits_3(runner: CliRunner, workspace: dict[str, Any]) -> None:
    d = workspace["dir"]
    manifest = _manifest(d)
    args = ["batch", str(manifest), "-o", str(d / "r.parquet"), "--interactions", str(d / "log_a.parquet"), "-q"]
    tripped = runner.invoke(cli, [*args, "--fail-on", "spearman>0.5"])
    assert tripped.exit_code == 3, tripped.output
    assert "gate row 4 (m3.npy): spearman>0.5" in tripped.stderr and tripped.stdout == ""
    # The gates already fail the run; the row they could not read is named beside them.
    assert "gates not evaluated everywhere: 1 row failed (row 2 (broken.npy))" in tripped.stderr
    # No gate trips, but row 2 failed: the gate cannot pass a row it never read (exit 1, as check of it).
    calm = runner.invoke(cli, [*args, "--fail-on", "spearman>0.999"])
    assert calm.exit_code == 1, calm.output
    assert calm.stderr.splitlines()[-1] == ("Error: cannot evaluate --fail-on: 1 row failed (row 2 (broken.npy)): no "
                                            "gate can pass a row that was not audited")
    bad = runner.invoke(cli, [*args, "--fail-on", "spearmann>0.5"])
    assert bad.exit_code == 2 and "unknown metric 'spearmann'" in bad.output


def test_resume_from_the_cli(runner: CliRunner, workspace: dict[str, Any]) -> None:
    d = workspace["dir"]
    manifest = _manifest(d)
    out = d / "r.parquet"
    args = ["batch", str(manifest), "-o", str(out), "--interactions", str(d / "log_a.parquet")]
    assert runner.invoke(cli, args).exit_code == 0
    (d / "calls.log").unlink()
    again = runner.invoke(cli, [*args, "--resume"])
    assert again.exit_code == 0
    assert "(4 kept from the earlier run)" in again.stdout
    assert [line.split()[2] for line in (d / "calls.log").read_text().splitlines() if line.startswith("audit")] == ["broken"]


def test_help_documents_the_options(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["batch", "--help"])
    assert result.exit_code == 0
    for option in ("--jobs", "--resume", "--scheduler", "--html", "--max-memory", "--fail-on", "--rank-by"):
        assert option in result.output


def test_the_interrupted_exit_code_is_documented(runner: CliRunner) -> None:
    """QA F6: Ctrl-C exits 130 (128 + SIGINT, every command), a code the README's exit-code
    table and batch --help did not list; SIGTERM (scale N1) exits 143, listed alike."""
    import re

    from auditor.errors import Terminated, interruption

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    table = readme.split("### Exit codes", 1)[1].split("###", 1)[0]
    assert [int(code) for code in re.findall(r"^\| (\d+) \|", table, re.M)] == [0, 1, 2, 3, 130, 143]
    assert interruption(KeyboardInterrupt()) == ("interrupted", 130)  # the codes the table documents
    assert interruption(Terminated()) == ("terminated by SIGTERM", 143)
    help_text = " ".join(runner.invoke(cli, ["batch", "--help"]).output.split())
    assert "130 when interrupted by Ctrl-C, 143 by SIGTERM" in help_text
