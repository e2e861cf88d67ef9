"""Served lists beside a model that queries nobody (``--no-retrieval``, QA "Served N1"): grading
the lists needs nothing of the model, so they are graded all the same, by the lists-only rule,
over the lists of the training log's users (``served.head_share_every_list``,
auditor/retrieval/served.py ``unqueried_lists_graded``), and adding MODEL never turns a tripped
``severity_level`` gate into a pass. The old code dropped them without a word (severity none)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from click.testing import CliRunner

from auditor.cli import cli

N_USERS, N_ITEMS, K = 40, 50, 5


@pytest.fixture(params=["equal norms", "random norms"])
def files(tmp_path: Path, request: pytest.FixtureRequest) -> tuple[Path, float, float]:
    """Item 0 trained by 24 of 40 users (6% of 400 interactions, the top 1%); half the users are
    served item 0 first, half no head item (10% of the slots: 1.67x, +4 points, moderate); a
    user absent from the log is served item 0 five times over lists of their own: not graded."""
    rng = np.random.default_rng(2)
    rows = []
    for u in range(N_USERS):
        others = rng.choice(np.arange(1, N_ITEMS), size=10 if u >= 24 else 9, replace=False)
        rows += [(u, int(i)) for i in ([0] if u < 24 else []) + sorted(others.tolist())]
    (tmp_path / "train.csv").write_text("user_id,item_id\n" + "".join(f"{u},{i}\n" for u, i in rows))
    lists = {u: ([0, 1, 2, 3, 4] if u % 2 == 0 else [5, 6, 7, 8, 9]) for u in range(N_USERS)}
    absent = {1000 + a: [0, 10, 11, 12, 13] for a in range(20)}  # not the log's users: not graded beside a model
    (tmp_path / "recs.csv").write_text("user_id,item_id,rank\n" + "".join(
        f"{u},{i},{r + 1}\n" for u, items in {**lists, **absent}.items() for r, i in enumerate(items)))
    items = rng.normal(size=(N_ITEMS, 4))
    if request.param == "equal norms":  # no correlation to grade: the old code refused the gate (exit 1)
        items /= np.linalg.norm(items, axis=1, keepdims=True)
    torch.save({"user_embedding.weight": torch.from_numpy(rng.normal(size=(N_USERS, 4)).astype(np.float32)),
                "item_embedding.weight": torch.from_numpy(items.astype(np.float32))}, tmp_path / "model.pt")
    counts = np.bincount([i for _, i in rows], minlength=N_ITEMS)
    assert int(np.argmax(counts)) == 0 and (counts == counts.max()).sum() == 1  # one head item: item 0
    served = sum(items[:K].count(0) for items in lists.values()) / (N_USERS * K)
    return tmp_path, served, counts[0] / counts.sum()


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
