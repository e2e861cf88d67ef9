"""Served lists beside a model that queries nobody (``--no-retrieval``, QA "Served N1"): grading
the lists needs nothing of the model, so they are graded all the same, by the lists-only rule,
over the lists of the training log's users (``served.head_share_every_list``,
auditor/retrieval/served.py ``unqueried_lists_graded``), and adding MODEL never turns a tripped
``severity_level`` gate into a pass. The old code dropped them without a word (severity none)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from auditor.cli import cli
from served_head_lists import K, N_USERS, write_head_lists


@pytest.fixture(params=["equal norms", "random norms"])
def files(tmp_path: Path, request: pytest.FixtureRequest) -> tuple[Path, float, float]:
    """Item 0 trained by 24 of 40 users (6% of 400 interactions, the top 1%); half the users are
    served item 0 first, half no head item (10% of the slots: 1.67x, +4 points, moderate); a
    user absent from the log is served item 0 five times over lists of their own: not graded."""
    return write_head_lists(tmp_path, absent_users=True, equal_norms=request.param == "equal norms")


def _check(*args: str) -> tuple[int, dict[str, object]]:
    result = CliRunner().invoke(cli, ["check", *args, "--recommendations", "recs.csv", "--interactions", "train.csv",
                                      "--no-probes", "--bootstrap", "0", "-q", "--no-retrieval",
                                      "--fail-on", "severity_level>=2", "--json", "r.json", "--markdown", "r.md"],
                                catch_exceptions=False)
    return result.exit_code, json.loads(Path("r.json").read_text())


def test_the_served_lists_grade_beside_a_model_that_queries_nobody(
    files: tuple[Path, float, float], monkeypatch: pytest.MonkeyPatch,
) -> None:
    folder, served, log = files
    monkeypatch.chdir(folder)
    assert (served, log) == (pytest.approx(0.10), pytest.approx(0.06))  # 1.67x and +4 points: moderate
    code, report = _check("model.pt", "-k", str(K))
    verdict, section = report["verdict"], report["served"]
    assert section["head_share_every_list"] == {str(K): pytest.approx(served)}  # type: ignore[index]
    # old code: the lists dropped without a word: severity none, exit 0 (random norms, ρ's CI holds 0), or
    # exit 1 'nothing graded the severity' (equal norms)
    assert (verdict["severity"], verdict["graded_by"], verdict["quoted_k"], code) == (  # type: ignore[index]
        "moderate", "served", K, 3)
    assert verdict["summary"].startswith(  # type: ignore[index]
        f"The served lists amplify popularity: the served lists give the top-1% most popular items "
        f"{100 * served:.1f}% of their top-{K} slots, against {100 * log:.1f}% of the training interactions, 1.67×; "
        "severity moderate is theirs (the model, its serving not measured, grades none).")
    assert [w for w in report["warnings"] if "graded all the same" in w] == [  # type: ignore[attr-defined]
        "retrieval not measured (skipped with --no-retrieval): the served lists of recs.csv are graded all the same "
        f"({N_USERS} lists of the training log's users, by the lists-only rule), so they count in the severity as "
        "without the model; their other figures (list measures, overlaps, accuracy) are not measured"]
    assert "retrieval" in report["not_measured"]  # type: ignore[operator]
    headline = Path("r.md").read_text().splitlines()[2]  # old: 'retrieval not measured' and nothing of the lists
    assert f"retrieval not measured; served lists: top-1% items' share of the served top-{K} slots {100 * served:.1f}% " \
           f"vs {100 * log:.1f}% of the training interactions, which graded the severity;" in headline, headline


def test_a_k_above_the_lists_is_not_graded_and_said(
    files: tuple[Path, float, float], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(files[0])
    code, report = _check("model.pt", "-k", "3", "-k", "8")
    shares = report["served"]["head_share_every_list"]  # type: ignore[index]
    assert shares == {"3": pytest.approx(20 / (N_USERS * 3))}  # 20 of 120 slots: 16.7% vs 6%, high
    assert (report["verdict"]["severity"], code) == ("high", 3)  # type: ignore[index]
    assert any("not at K=8, above their length 5" in w for w in report["warnings"])  # type: ignore[attr-defined]


def test_a_batch_row_with_no_retrieval_grades_the_lists(
    files: tuple[Path, float, float], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(files[0])
    Path("man.csv").write_text("model,interactions,recommendations,k,no_retrieval\n"
                               f"model.pt,train.csv,recs.csv,{K},true\n")
    result = CliRunner().invoke(cli, ["batch", "man.csv", "-o", "b.parquet", "-q", "--no-probes", "-j", "1"])
    assert result.exit_code == 0, result.output
    row = pq.read_table("b.parquet").to_pylist()[0]
    assert (row["error"], row["severity_level"]) == (None, 2.0)  # old code: 0.0
