"""Beside a model, the served lists' grade counts items the model's item table has no row for by their raw
ids, as lists alone do (QA "Served N3"; ``auditor.retrieval.served.graded_shares`` over ``ServedLists.rowless``):
the lists' new items fill their slots and count in the catalogue whose top 1% is the head; a log item
without a row keeps its interactions. So the grade beside a model is the lists-alone grade on every route
(lists alone, beside the model, ``--no-retrieval``, ``--max-queries``, batch rows), and adding MODEL never
turns a tripped ``severity_level`` gate into a pass.

The old code left those slots empty and out of the grade beside a model: QA's V5 lists (40% of their slots
new items) read 15.6% vs 7.3%, high, rc 3 alone but 0.0, none, rc 0 beside the model.
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
from auditor.loading.served_lists import read_served_lists
from auditor.values import ItemRows, LogSpec

N_USERS, N_LOG_ITEMS, K = 100, 100, 5
ROUTES = {
    "alone": [],
    "beside": ["model.pt"],
    "no-retrieval": ["model.pt", "--no-retrieval"],
    "sampled": ["model.pt", "--max-queries", "10", "--seed", "3"],
}


def _graded(lists: dict[int, list[int]], counts: dict[int, int], catalogue: set[int]) -> tuple[float, float]:
    """The lists-only grade, computed here: the top 1% of the items trained on or served (ties at the cut in),
    its share of every list's top-K slots and of the training interactions."""
    ids = np.array(sorted(catalogue))
    popularity = np.array([counts.get(int(i), 0) for i in ids])
    c = max(1, int(np.floor(0.01 * ids.size)))
    head = set(ids[popularity >= np.sort(popularity)[::-1][c - 1]].tolist())
    slots = [i for items in lists.values() for i in items[:K]]
    return float(np.mean([i in head for i in slots])), float(popularity[[i in head for i in ids]].sum() / popularity.sum())


def _write(folder: Path, log: list[tuple[int, int]], lists: dict[int, list[int]], n_rows: int) -> None:
    (folder / "train.csv").write_text("user_id,item_id\n" + "".join(f"{u},{i}\n" for u, i in log))
    (folder / "recs.csv").write_text("user_id,item_id,rank\n" + "".join(
        f"{u},{i},{r + 1}\n" for u, items in lists.items() for r, i in enumerate(items)))
    rng = np.random.default_rng(0)
    torch.save({"user_embedding.weight": torch.from_numpy(rng.normal(size=(N_USERS, 8)).astype(np.float32)),
                "item_embedding.weight": torch.from_numpy(rng.normal(size=(n_rows, 8)).astype(np.float32))},
               folder / "model.pt")


@pytest.fixture()
def new_items(tmp_path: Path) -> tuple[Path, float, float]:
    """QA's V5 (its mk.py, draw for draw): items 0..99 trained (item 0 by 25 users, item 1 by 22), a 100-row
    model; every list serves item 1 unless its user trained on it (never item 0), two new items (ids 100..199:
    no log interaction, no model row; 40% of the slots) and untrained log items. Alone the catalogue is 200
    items: the top 1% is {0, 1}."""
    rng = np.random.default_rng(11)
    log = [(int(u), i) for i, n in ((0, 25), (1, 22)) for u in rng.choice(N_USERS, size=n, replace=False)]
    log += [(u, int(i)) for u in range(N_USERS) for i in rng.choice(np.arange(2, N_LOG_ITEMS), size=6, replace=False)]
    log = sorted(set(log))
    seen: dict[int, set[int]] = {}
    for u, i in log:
        seen.setdefault(u, set()).add(i)
    _ = rng.normal(size=(N_USERS, 8)), rng.normal(size=(N_LOG_ITEMS, 8))  # mk.py's model draws
    new = np.concatenate([rng.permutation(np.arange(100, 200)), rng.permutation(np.arange(100, 200))])
    lists = {}
    for u in range(N_USERS):
        untrained = [int(i) for i in rng.permutation(np.arange(2, N_LOG_ITEMS)) if int(i) not in seen[u]]
        pair = [int(new[2 * u]), int(new[2 * u + 1])]
        lists[u] = [untrained[0], *pair, *untrained[1:3]] if 1 in seen[u] else [1, *pair, *untrained[:2]]
    _write(tmp_path, log, lists, N_LOG_ITEMS)
    counts = {i: sum(1 for _, j in log if j == i) for i in range(N_LOG_ITEMS)}
    return tmp_path, *_graded(lists, counts, set(range(200)))


def _check(route: list[str], gate: str = "severity_level>=2") -> tuple[int, dict[str, object]]:
    result = CliRunner().invoke(cli, ["check", *route, "--recommendations", "recs.csv", "--interactions",
                                      "train.csv", "-k", str(K), "--no-probes", "--bootstrap", "0", "-q",
                                      "--fail-on", gate, "--json", "r.json"], catch_exceptions=False)
    return result.exit_code, json.loads(Path("r.json").read_text())


@pytest.mark.parametrize("route", list(ROUTES))
def test_listed_items_without_a_model_row_grade_by_raw_id_on_every_route(
    new_items: tuple[Path, float, float], monkeypatch: pytest.MonkeyPatch, route: str,
) -> None:
    folder, served, log = new_items
    monkeypatch.chdir(folder)
    assert (round(served, 4), round(log, 4)) == (0.156, 0.0726)  # 2.15x, +8.3 points: high
    code, report = _check(ROUTES[route])
    verdict, section = report["verdict"], report["served"]
    assert section["head_share_every_list"] == {"5": pytest.approx(served)}  # type: ignore[index]  # old: 0.0
    assert section["head_share_log"] == pytest.approx(log)  # type: ignore[index]  # old: 0.0386 (head {0})
    assert (code, verdict["severity"], verdict["graded_by"]) == (3, "high", "served")  # type: ignore[index]
    if route != "alone":  # the warning says the grade counts them, no longer that it may be lower
        warned = [w for w in report["warnings"] if "have no row in the item table" in w]  # type: ignore[attr-defined]
        assert warned and "count them by their raw ids" in warned[0] and "can be lower" not in warned[0]


@pytest.mark.parametrize("route", list(ROUTES))
def test_the_cold_slot_share_counts_slots_of_items_without_a_row_on_every_route(
    new_items: tuple[Path, float, float], monkeypatch: pytest.MonkeyPatch, route: str,
) -> None:
    """``served.cold_slot_share`` is the share of served slots naming items the training log never saw (docs/report.md),
    with a table row or not: QA's V5 new items fill 40% of the slots on every route (old beside a model: 0.0, the
    share counting only items with a row, and no warning)."""
    monkeypatch.chdir(new_items[0])
    listed = np.loadtxt("recs.csv", delimiter=",", skiprows=1, dtype=np.int64)[:, 1]
    trained = np.loadtxt("train.csv", delimiter=",", skiprows=1, dtype=np.int64)[:, 1]
    share = float(np.mean(~np.isin(listed, trained)))
    assert share == 0.4
    report = _check(ROUTES[route])[1]
    assert report["served"]["cold_slot_share"] == pytest.approx(share)  # type: ignore[index]
    warned = [w for w in report["warnings"] if "never appear in the training log" in w]  # type: ignore[attr-defined]
    assert warned and warned[0].startswith("100 of the 187 distinct items in recs.csv never appear in the training log "
                                           "(200 rows, 40.0% of the served slots)")
    assert ("; 100 of them are also without a row in the item table" in warned[0]) == (route != "alone")


def test_the_reference_beside_the_grade_is_the_same_alone_and_beside(
    new_items: tuple[Path, float, float], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(new_items[0])
    alone, beside = _check(ROUTES["alone"])[1], _check(ROUTES["beside"])[1]
    popular = alone["served"]["head_share_popular"]  # type: ignore[index]
    assert popular == beside["served"]["head_share_popular"] and popular["5"] > 0  # type: ignore[index]


def test_batch_rows_grade_listed_items_without_a_row_alike(
    new_items: tuple[Path, float, float], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(new_items[0])
    Path("man.csv").write_text("model,interactions,recommendations,k\n,train.csv,recs.csv,5\n"
                               "model.pt,train.csv,recs.csv,5\n")
    result = CliRunner().invoke(cli, ["batch", "man.csv", "-o", "b.parquet", "-q", "--no-probes", "-j", "1"])
    assert result.exit_code == 0, result.output
    rows = pq.read_table("b.parquet").to_pylist()
    assert [(row["error"], row["severity_level"]) for row in rows] == [(None, 3.0), (None, 3.0)]  # old: 3.0, 0.0


@pytest.mark.parametrize("route", ["alone", "beside"])
def test_a_log_item_without_a_model_row_keeps_its_interactions_in_the_grade(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, route: str,
) -> None:
    """The log's most popular item (id 150, 30 users) has no row in the 100-row model (its id file names 0..99):
    alone it is the top 1%, and the lists give it a fifth of their slots. Beside the model the old grade
    dropped its interactions and its slots: head {0}, which no list serves, none."""
    rng = np.random.default_rng(5)
    log = {(int(u), 150) for u in rng.choice(N_USERS, size=30, replace=False)}
    log |= {(int(u), 0) for u in rng.choice(N_USERS, size=12, replace=False)}
    log |= {(u, int(i)) for u in range(N_USERS) for i in rng.choice(np.arange(1, N_LOG_ITEMS), size=5, replace=False)}
    lists = {u: [150, *[int(i) for i in rng.choice(np.arange(1, N_LOG_ITEMS), size=4, replace=False)]]
             for u in range(N_USERS)}
    _write(tmp_path, sorted(log), lists, N_LOG_ITEMS)
    (tmp_path / "ids.txt").write_text("".join(f"{i}\n" for i in range(N_LOG_ITEMS)))
    counts: dict[int, int] = {}
    for _, i in log:
        counts[i] = counts.get(i, 0) + 1
    served, share = _graded(lists, counts, set(counts) | {i for items in lists.values() for i in items})
    assert (round(served, 4), round(share, 4)) == (0.2, 0.0554)  # head {150}: 3.61x, +14.5 points
    monkeypatch.chdir(tmp_path)
    code, report = _check(["model.pt", "--item-ids", "ids.txt"] if route == "beside" else [])
    assert report["served"]["head_share_every_list"] == {"5": pytest.approx(served)}  # type: ignore[index]
    assert report["served"]["head_share_log"] == pytest.approx(share)  # type: ignore[index]
    assert (code, report["verdict"]["severity"]) == (3, "high")  # type: ignore[index]  # old beside: 0, none
    if route == "beside":  # the statistics' warning says the grade counts them (old: only 'left out of the frequencies')
        assert f"30 interactions ({30 / len(log):.1%}) reference 1 item id with no row in the item table; they are " \
            "left out of the frequencies (the model's scorings'); the served lists recs.csv are graded (the severity) " \
            "and measured (the served scoring's figures) over them all the same, by their raw ids, as lists alone " \
            "are" in report["warnings"]  # type: ignore[operator]


def test_a_tied_item_without_a_row_keeps_the_slot_its_id_gives_it(tmp_path: Path) -> None:
    """Tied scores break by the file's item id with a model or without, a listed item without a row included:
    its slot is left empty where its id puts it (before, it went behind its tied peers, so K=2 beside the model
    held items 7 and 9 where alone held 5 and 7), and the grade reads it there."""
    (tmp_path / "recs.csv").write_text("user_id,item_id,score\n0,9,1.0\n0,5,1.0\n0,7,1.0\n")
    beside = read_served_lists(LogSpec(tmp_path / "recs.csv"), items=ItemRows(np.array([7, 9]), 2), max_k=2)
    alone = read_served_lists(LogSpec(tmp_path / "recs.csv"), max_k=2)
    assert alone.items.item_ids is not None and beside.rowless is not None
    assert [int(alone.items.item_ids[r]) for r in alone.lists[0]] == [5, 7]
    assert beside.lists.tolist() == [[-1, 0]]  # item 5 has no row: its slot empty, item 7 (row 0) second
    assert (beside.rowless.ids.tolist(), beside.rowless.slot_positions.tolist()) == ([5], [0])


@pytest.mark.parametrize("route", ["alone", "beside", "no-retrieval"])
def test_lists_mostly_of_items_neither_the_log_nor_the_model_knows_are_refused_on_every_route(
    new_items: tuple[Path, float, float], monkeypatch: pytest.MonkeyPatch, route: str,
) -> None:
    """QA's V4 (a): 3 of each list's 5 slots (60%) name items the log never saw and the model has no row for.
    Lists alone refuse them (the ids evidently do not line up); beside the model they were graded none (old,
    the slots dropped) or would be graded by raw id (the spelling, not the service): refused alike."""
    monkeypatch.chdir(new_items[0])
    Path("recs.csv").write_text("user_id,item_id,rank\n" + "".join(
        f"{u},{i},{r + 1}\n" for u in range(N_USERS) for r, i in enumerate((1, 2, 300 + u, 400 + u, 500 + u))))
    result = CliRunner().invoke(cli, ["check", *ROUTES[route], "--recommendations", "recs.csv", "--interactions",
                                      "train.csv", "-k", str(K), "--no-probes", "-q"])
    knows = "the training log never saw" if route == "alone" else \
        "neither the training log nor the model's item table knows"
    assert result.exit_code == 1 and f"300 of the 500 served slots in recs.csv (column 'item_id') (60.0%) name " \
        f"items {knows}, more than the 50% an audit measures" in " ".join(result.output.split())
