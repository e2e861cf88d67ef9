"""Under ``--popularity users`` the served lists' grade counts distinct training users per item on every
route: lists alone, beside a model, ``--no-retrieval``, ``--max-queries`` and batch rows
(``auditor.loading.statistics.counts_users``: the log's counts carry distinct users wherever the lists are
graded by them, not only where retrieval is measured).

The old code counted the log without distinct users under ``--no-retrieval`` beside a model, so the lists
were not graded at all there: the verdict fell back to the model's (QA12 served, round 4: V5's lists graded
high alone, none beside the model with ``--no-retrieval --popularity users``, and a ``severity_level`` gate
passed). Here the head differs by popularity: item 0 has the most interactions (5 users, 8 times each)
but item 150, which the model's item table has no row for, the most users (30, once each); every list
serves item 150 first and never item 0.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from click.testing import CliRunner

from auditor.cli import cli

N_USERS, N_ROWS, K = 100, 100, 5
ROUTES = {
    "alone": [],
    "beside": ["model.pt", "--item-ids", "ids.txt"],
    "no-retrieval": ["model.pt", "--item-ids", "ids.txt", "--no-retrieval"],
    "sampled": ["model.pt", "--item-ids", "ids.txt", "--max-queries", "10", "--seed", "3"],
}


def _grade(log: np.ndarray, lists: np.ndarray, by_users: bool) -> tuple[float, float]:
    """The lists-only grade, computed here: over the items trained on or served, the top 1% by distinct users
    (or interactions; ties at the cut in), its share of every list's top-K slots and of the popularity."""
    pairs = np.unique(log, axis=0) if by_users else log
    ids = np.union1d(log[:, 1], lists.ravel())
    popularity = np.array([np.count_nonzero(pairs[:, 1] == i) for i in ids])
    c = max(1, int(np.floor(0.01 * ids.size)))
    head = ids[popularity >= np.sort(popularity)[::-1][c - 1]]
    served = float(np.isin(lists[:, :K], head).mean())
    return served, float(popularity[np.isin(ids, head)].sum() / popularity.sum())


@pytest.fixture()
def folder(tmp_path: Path) -> tuple[Path, tuple[float, float], tuple[float, float]]:
    rng = np.random.default_rng(7)
    log = [(int(u), 0) for u in range(5) for _ in range(8)]  # 40 interactions, 5 users
    log += [(int(u), 150) for u in rng.choice(N_USERS, size=30, replace=False)]  # 30 of each; no model row
    log += [(u, int(i)) for u in range(N_USERS) for i in rng.choice(np.arange(1, N_ROWS), size=4, replace=False)]
    lists = np.array([[150, *rng.choice(np.arange(1, N_ROWS), size=3, replace=False), 200 + u % 40]
                      for u in range(N_USERS)])  # 200..239: new items, no log interaction and no row
    (tmp_path / "train.csv").write_text("user_id,item_id\n" + "".join(f"{u},{i}\n" for u, i in log))
    (tmp_path / "recs.csv").write_text("user_id,item_id,rank\n" + "".join(
        f"{u},{i},{r + 1}\n" for u in range(N_USERS) for r, i in enumerate(lists[u])))
    (tmp_path / "ids.txt").write_text("".join(f"{i}\n" for i in range(N_ROWS)))
    torch.save({"user_embedding.weight": torch.from_numpy(rng.normal(size=(N_USERS, 8)).astype(np.float32)),
                "item_embedding.weight": torch.from_numpy(rng.normal(size=(N_ROWS, 8)).astype(np.float32))},
               tmp_path / "model.pt")
    pairs = np.array(log)
    return tmp_path, _grade(pairs, lists, by_users=True), _grade(pairs, lists, by_users=False)


def _check(route: list[str], popularity: str) -> tuple[int, dict[str, object]]:
    result = CliRunner().invoke(cli, ["check", *route, "--recommendations", "recs.csv", "--interactions",
                                      "train.csv", "-k", str(K), "--no-probes", "--bootstrap", "0", "-q",
                                      "--popularity", popularity, "--fail-on", "severity_level>=2", "--json",
                                      "r.json"], catch_exceptions=False)
    return result.exit_code, json.loads(Path("r.json").read_text())


@pytest.mark.parametrize("route", list(ROUTES))
def test_the_grade_by_distinct_users_is_the_same_on_every_route(
    folder: tuple[Path, tuple[float, float], tuple[float, float]], monkeypatch: pytest.MonkeyPatch, route: str,
) -> None:
    path, (served, log), _ = folder
    monkeypatch.chdir(path)
    assert (served, round(log, 4)) == (0.2, 0.069)  # head {150}: 30 of the 435 user-item pairs; 2.90x: high
    code, report = _check(ROUTES[route], "users")
    section, verdict = report["served"], report["verdict"]
    assert section["head_share_every_list"] == {"5": pytest.approx(served)}  # type: ignore[index]  # old nr: {}
    assert section["head_share_log"] == pytest.approx(log)  # type: ignore[index]  # old --no-retrieval: None
    assert (code, verdict["severity"], verdict["graded_by"]) == (3, "high", "served")  # type: ignore[index]


@pytest.mark.parametrize("route", ["alone", "no-retrieval"])
def test_the_grade_by_interactions_counts_another_head(
    folder: tuple[Path, tuple[float, float], tuple[float, float]], monkeypatch: pytest.MonkeyPatch, route: str,
) -> None:
    """The other popularity over the same files: head {0} (40 interactions), which no list serves."""
    path, _, (served, log) = folder
    monkeypatch.chdir(path)
    assert (served, round(log, 4)) == (0.0, 0.0851)  # 40 of 470 interactions
    report = _check(ROUTES[route], "interactions")[1]
    assert report["served"]["head_share_every_list"] == {"5": 0.0}  # type: ignore[index]
    assert report["served"]["head_share_log"] == pytest.approx(log)  # type: ignore[index]


def test_batch_rows_grade_by_distinct_users_alike(
    folder: tuple[Path, tuple[float, float], tuple[float, float]], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(folder[0])
    Path("man.csv").write_text("model,item_ids,retrieval,interactions,recommendations,k\n"  # the log read first here
                               "model.pt,ids.txt,false,train.csv,recs.csv,5\nmodel.pt,ids.txt,true,train.csv,recs.csv,5\n"
                               ",,,train.csv,recs.csv,5\n")
    result = CliRunner().invoke(cli, ["batch", "man.csv", "-o", "b.parquet", "-q", "--no-probes", "-j", "1",
                                      "--popularity", "users"])
    assert result.exit_code == 0, result.output
    rows = pq.read_table("b.parquet").to_pylist()
    assert [(row["error"], row["severity_level"]) for row in rows] == [(None, 3.0)] * 3  # old: 0.0 first (--no-retrieval)
