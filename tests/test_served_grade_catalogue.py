"""The served lists' grade counts its top 1% over one catalogue, with a model beside them or not (QA "Served N1";
``auditor.retrieval.served.graded_head``): the items trained on or served, as lists alone number them. A model's
item table with rows neither trained on nor served (new catalogue entries, RecBole's rows of valid/test-only
items) put the cut at another c: 300 rows made the top 1% three items instead of one, the log's share 17.1%
instead of 6.2%, and adding MODEL turned a tripped ``severity_level`` gate (high) into a pass (low, exit 0).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from auditor.cli import cli

N_USERS, N_ITEMS, N_ROWS = 40, 100, 300
ROUTES = {"alone": [], "beside": ["model.pt"], "no-retrieval": ["model.pt", "--no-retrieval"]}


@pytest.fixture()
def extra_rows(tmp_path: Path) -> tuple[Path, float, float, float]:
    """Items 0, 1, 2 hold 12, 11, 10 log interactions; every list opens with item 0, never serves 1 or 2;
    the model's table has 200 rows past every item of the log and the lists (the QA's V1 case)."""
    rng = np.random.default_rng(5)
    log = [(int(u), i) for i, n in ((0, 12), (1, 11), (2, 10)) for u in rng.choice(N_USERS, size=n, replace=False)]
    log += [(u, int(i)) for u in range(N_USERS) for i in rng.choice(np.arange(3, N_ITEMS), size=4, replace=False)]
    log = sorted(set(log))
    seen: dict[int, set[int]] = {}
    for u, i in log:
        seen.setdefault(u, set()).add(i)
    torch.save({"user_embedding.weight": torch.from_numpy(rng.normal(size=(N_USERS, 8)).astype(np.float32)),
                "item_embedding.weight": torch.from_numpy(rng.normal(size=(N_ROWS, 8)).astype(np.float32))},
               tmp_path / "model.pt")
    (tmp_path / "train.csv").write_text("user_id,item_id\n" + "".join(f"{u},{i}\n" for u, i in log))
    lists = {u: [0] + [int(i) for i in rng.permutation(np.arange(3, N_ITEMS)) if int(i) not in seen[u]][:4]
             for u in range(N_USERS)}
    (tmp_path / "recs.csv").write_text("user_id,item_id,rank\n" + "".join(
        f"{u},{i},{r + 1}\n" for u, items in lists.items() for r, i in enumerate(items)))
    counts = np.bincount([i for _, i in log], minlength=N_ROWS).astype(float)
    catalogue = np.flatnonzero((counts > 0) | np.isin(np.arange(N_ROWS), [i for v in lists.values() for i in v]))
    c = max(1, int(np.floor(0.01 * catalogue.size)))  # 1% of the items trained on or served
    cut = np.sort(counts[catalogue])[::-1][c - 1]
    head = np.zeros(N_ROWS, dtype=bool)
    head[catalogue[counts[catalogue] >= cut]] = True
    slots = [i for items in lists.values() for i in items]
    order = np.argsort(-counts, kind="stable")  # the most-popular list: the 5 most popular untrained items
    popular = [int(i) for u in lists for i in [j for j in order if int(j) not in seen[u]][:5]]
    return tmp_path, float(np.mean(head[slots])), float(counts[head].sum() / counts.sum()), float(np.mean(head[popular]))


def _check(route: list[str]) -> tuple[int, dict[str, object]]:
    result = CliRunner().invoke(cli, ["check", *route, "--recommendations", "recs.csv", "--interactions", "train.csv",
                                      "-k", "5", "--no-probes", "--bootstrap", "0", "-q", "--fail-on",
                                      "severity_level>=2", "--json", "r.json"], catch_exceptions=False)
    return result.exit_code, json.loads(Path("r.json").read_text())


@pytest.mark.parametrize("route", list(ROUTES))
def test_model_rows_neither_trained_nor_served_do_not_move_the_head(
    extra_rows: tuple[Path, float, float, float], monkeypatch: pytest.MonkeyPatch, route: str,
) -> None:
    folder, served, log, _ = extra_rows
    monkeypatch.chdir(folder)
    assert (round(served, 4), round(log, 4)) == (0.2, 0.0622)  # head {0} of 97 items: 3.22x, +13.8 points
    code, report = _check(ROUTES[route])
    verdict, section = report["verdict"], report["served"]
    assert section["head_share_log"] == pytest.approx(log)  # type: ignore[index]  # old beside a model: 0.1710
    assert section["head_share_every_list"] == {"5": pytest.approx(served)}  # type: ignore[index]
    assert (code, verdict["severity"], verdict["graded_by"]) == (3, "high", "served")  # type: ignore[index]
    assert "20.0% of their top-5 slots, against 6.2% of the training interactions, 3.22×" in verdict["summary"]  # type: ignore[index]
    if route == "beside":  # the per-K served figures are over the lists-alone catalogue too (QA13 harms): head {0}
        assert section["n_catalogue"] == 97  # type: ignore[index]  # old: the model's 300 rows, head {0, 1, 2}
        figures = report["retrieval"]["at"]["5"]["served"]  # type: ignore[index]
        assert figures["head_share_1pct"] == pytest.approx(served)  # type: ignore[index]
    elif route != "alone":  # not measured per K: the model's rows describe the file
        assert section["n_catalogue"] == N_ROWS  # type: ignore[index]


@pytest.mark.parametrize("route", ["alone", "beside"])
def test_the_most_popular_reference_counts_the_grades_head(
    extra_rows: tuple[Path, float, float, float], monkeypatch: pytest.MonkeyPatch, route: str,
) -> None:
    """The reference quoted beside the grade is the most-popular list's share of the grade's head (QA "Served
    N2"): 14.0% on both routes; beside the model it was the per-K figure over the 300 rows' head, 43.5%."""
    folder, _, _, popular = extra_rows
    monkeypatch.chdir(folder)
    assert round(popular, 4) == 0.14  # 28 of the 40 users did not train on item 0: 28 of 200 slots
    _, report = _check(ROUTES[route])
    assert "(the most-popular list: 14.0%)" in report["verdict"]["summary"]  # type: ignore[index]
    if route == "beside":
        assert report["served"]["head_share_popular"] == {"5": pytest.approx(popular)}  # type: ignore[index]


def test_lists_alone_beside_zero_count_items_quote_the_reference_over_the_grades_head(
    extra_rows: tuple[Path, float, float, float], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Lists alone with a counts file of 300 items, 203 of them count 0 (QA "Served N4"): the grade's head is {0}
    (the top 1% of the 97 items trained on or served), the per-K figures' {0, 1, 2} (of all 300). The most-popular
    list (no user named: the same 5 most popular items for all) holds 1 of its 5 slots in the grade's head: 20.0%,
    quoted beside the grade as beside a model, in the summary and the report's headline; both quoted the per-K
    60.0% before."""
    monkeypatch.chdir(extra_rows[0])
    log = np.loadtxt("train.csv", delimiter=",", skiprows=1, dtype=np.int64)
    listed = np.loadtxt("recs.csv", delimiter=",", skiprows=1, dtype=np.int64)[:, 1]
    counts = np.bincount(log[:, 1], minlength=N_ROWS)
    Path("freq300.csv").write_text("item_id,count\n" + "".join(f"{i},{c}\n" for i, c in enumerate(counts)))
    catalogue = np.flatnonzero((counts > 0) | np.isin(np.arange(N_ROWS), listed))
    head = catalogue[counts[catalogue] >= np.sort(counts[catalogue])[::-1][max(1, catalogue.size // 100) - 1]]
    top = np.argsort(-counts, kind="stable")[:5]
    popular = float(np.isin(top, head).mean())
    assert (catalogue.size, head.tolist(), top[:3].tolist(), popular) == (97, [0], [0, 1, 2], 0.2)
    result = CliRunner().invoke(cli, ["check", "--recommendations", "recs.csv", "--frequencies", "freq300.csv", "-k",
                                      "5", "-q", "--json", "r.json", "--markdown", "r.md"], catch_exceptions=False)
    report = json.loads(Path("r.json").read_text())
    assert result.exit_code == 0 and report["served"]["head_share_popular"] == {"5": pytest.approx(popular)}
    assert report["retrieval"]["at"]["5"]["popular"]["head_share_1pct"] == pytest.approx(0.6)  # the per-K head's
    assert "3.22× (the most-popular list: 20.0%)" in report["verdict"]["summary"]  # old: 60.0%
    assert "of the training interactions (most-popular list 20.0%)" in Path("r.md").read_text()  # the headline too
