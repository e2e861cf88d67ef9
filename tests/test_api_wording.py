"""The Python API's reasons name settings as the API spells them (QA11 diffapi F6): a
section turned off by ``retrieval=False`` is "skipped with retrieval=False", not "skipped
with retrieval" (the opposite of why), while the CLI keeps ``--no-retrieval``; and
``diff_reports`` given the paths the CLI takes says it takes dicts, not that the file is no
popaudit report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from auditor import AuditConfig, run_audit
from auditor.cli import cli
from auditor.diff import diff_reports
from auditor.errors import ReportError, setting_off, spelled_as
from diff_samples import biased_table_report


def test_a_switched_off_section_names_the_call_that_switched_it_off(tmp_path: Path) -> None:
    biased_table_report(tmp_path)  # items.npy and log.parquet
    config = AuditConfig(model=tmp_path / "items.npy", interactions=tmp_path / "log.parquet", retrieval=False,
                         probes=False, bootstrap=0)
    result = run_audit(config)
    assert result.not_measured["retrieval"] == "skipped with retrieval=False"
    assert result.not_measured["probes"] == "skipped with probes=False"
    got = CliRunner().invoke(cli, ["check", str(tmp_path / "items.npy"), "--interactions", str(tmp_path / "log.parquet"),
                                   "--no-retrieval", "--no-probes", "--bootstrap", "0", "-q", "--json", str(tmp_path / "c.json")])
    assert got.exit_code == 0, got.output
    said = json.loads((tmp_path / "c.json").read_text())["not_measured"]
    assert (said["retrieval"], said["probes"]) == ("skipped with --no-retrieval", "skipped with --no-probes")
    with spelled_as(lambda: {"retrieval": "no_retrieval"}):  # batch: the manifest's column
        assert setting_off("retrieval") == "no_retrieval"


@pytest.mark.parametrize("given", ["a.json", Path("a.json"), b"a.json"])
def test_diff_reports_given_a_path_says_it_takes_dicts(tmp_path: Path, given: object) -> None:
    report = biased_table_report(tmp_path)
    with pytest.raises(ReportError, match=r"^diff_reports takes the reports as dicts \(json\.load of each file, or "
                                          r"auditor\.diff\.read_report\(PATH, 'base'\)\); the base report is a "):
        diff_reports(given, report)  # type: ignore[arg-type]
    with pytest.raises(ReportError, match=r"read_report\(PATH, 'new'\)\); the new report is a"):
        diff_reports(report, given)  # type: ignore[arg-type]
