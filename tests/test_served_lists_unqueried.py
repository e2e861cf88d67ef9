"""Served lists beside a model that queries nobody (``--no-retrieval``, QA "Served N1"): grading
the lists needs nothing of the model, so they are graded all the same, by the lists-only rule,
over every list of the file, as lists alone (``served.head_share_every_list``,
auditor/retrieval/served.py ``graded_shares``), and adding MODEL never turns a tripped
``severity_level`` gate into a pass. The old code dropped them without a word (severity none),
then graded the log users' lists only (QA "Served F1": the lists of users the log lacks count)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from auditor.cli import cli
from served_head_lists import K, N_USERS, write_head_lists

ABSENT = 20
"""Users the log lacks, each served item 0 first (``write_head_lists(absent_users=True)``)."""


@pytest.fixture(params=["equal norms", "random norms"])
def files(tmp_path: Path, request: pytest.FixtureRequest) -> tuple[Path, float, float]:
    """Item 0 trained by 24 of 40 users (6% of 400 interactions, the top 1%); half the users are
    served item 0 first, half no head item (10% of the slots: 1.67x, +4 points, moderate); 20
    users absent from the log are served item 0 first too: graded (40 of 300 slots, 13.3%: high)."""
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
    assert (served, log) == (pytest.approx(0.10), pytest.approx(0.06))  # the log users' lists: 1.67x, +4 points
    every = (N_USERS * K * served + ABSENT) / ((N_USERS + ABSENT) * K)  # 40 of 300 slots: 2.22x, +7.3 points: high
    code, report = _check("model.pt", "-k", str(K))
    verdict, section = report["verdict"], report["served"]
    assert section["head_share_every_list"] == {str(K): pytest.approx(every)}  # type: ignore[index]
    # old code: the lists dropped without a word (severity none), then the log users' lists only (moderate)
    assert (verdict["severity"], verdict["graded_by"], verdict["quoted_k"], code) == (  # type: ignore[index]
        "high", "served", K, 3)
    assert verdict["summary"].startswith(  # type: ignore[index]
        f"The served lists amplify popularity: the served lists give the top-1% most popular items "
        f"{100 * every:.1f}% of their top-{K} slots, against {100 * log:.1f}% of the training interactions, "
        f"{every / log:.2f}× (graded over all {N_USERS + ABSENT} lists of the file); severity high is theirs (the "
        "model, its serving not measured, grades none).")
    assert [w for w in report["warnings"] if "grades the served" in w] == [  # type: ignore[attr-defined]
        f"the severity grades the served lists of recs.csv by the lists-only rule over all {N_USERS + ABSENT} lists, "
        "as lists alone do (served.head_share_every_list); their other figures (list measures, overlaps, accuracy, "
        "the *_served@K gates) are not measured (retrieval not measured: skipped with --no-retrieval): adding the "
        "model never drops a list from the grade"]
    served = every
    assert "retrieval" in report["not_measured"]  # type: ignore[operator]
    headline = Path("r.md").read_text().splitlines()[2]  # old: 'retrieval not measured' and nothing of the lists
    assert f"retrieval not measured; served lists: top-1% items' share of the served top-{K} slots {100 * served:.1f}% " \
           f"vs {100 * log:.1f}% of the training interactions, which graded the severity;" in headline, headline


def test_a_k_above_the_lists_is_graded_at_their_length_and_said(
    files: tuple[Path, float, float], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(files[0])
    code, report = _check("model.pt", "-k", "3", "-k", "8")
    shares = report["served"]["head_share_every_list"]  # type: ignore[index]
    # K=3: 40 of 180 slots (22.2% vs 6%, high); K=8 at the lists' length 5: 40 of 300 (old: not graded)
    assert shares == {"3": pytest.approx(40 / 180), "5": pytest.approx(40 / 300)}
    assert (report["verdict"]["severity"], code) == ("high", 3)  # type: ignore[index]
    assert any("not measured at K=8" in w and "the severity grades them at K=5, their length" in w
               for w in report["warnings"])  # type: ignore[attr-defined]


def test_a_batch_row_with_no_retrieval_grades_the_lists(
    files: tuple[Path, float, float], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(files[0])
    Path("man.csv").write_text("model,interactions,recommendations,k,no_retrieval\n"
                               f"model.pt,train.csv,recs.csv,{K},true\n")
    result = CliRunner().invoke(cli, ["batch", "man.csv", "-o", "b.parquet", "-q", "--no-probes", "-j", "1"])
    assert result.exit_code == 0, result.output
    row = pq.read_table("b.parquet").to_pylist()[0]
    assert (row["error"], row["severity_level"]) == (None, 3.0)  # old code: 0.0, then 2.0 (the log users' lists)
