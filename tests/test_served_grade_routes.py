"""The served lists' grade is one policy, with a model beside them or not (QA "Served F1", "Served F2";
``auditor.retrieval.served.graded_shares``): every list of the file, at each K asked, a K past the lists'
length at their length. So the README's promise holds on every route: adding MODEL (with retrieval,
``--no-retrieval``, sampled queries, a batch row) never turns a tripped ``severity_level`` gate into a pass.

Two files, each graded with numpy here: lists of users the training log lacks (cold-start fallbacks
serving the most popular items), and lists shorter than every K asked (a top-5 carousel audited at the
default K's). The old code graded neither beside a model: severity none, exit 0, batch rows 0.0.
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

N_USERS, N_ITEMS, SEEN = 30, 100, 7
ROUTES = {
    "alone": [],
    "beside": ["model.pt"],
    "no-retrieval": ["model.pt", "--no-retrieval"],
    "sampled": ["model.pt", "--max-queries", "10"],
}


def _log(folder: Path, rng: np.random.Generator) -> tuple[dict[int, set[int]], np.ndarray]:
    """train.csv (each user SEEN items, Zipf-like) and a model with no norm bias; the items' counts."""
    weights = 1 / np.arange(1, N_ITEMS + 1) ** 0.5
    seen = {u: {int(i) for i in rng.choice(N_ITEMS, size=SEEN, replace=False, p=weights / weights.sum())}
            for u in range(N_USERS)}
    (folder / "train.csv").write_text("user_id,item_id\n" + "".join(
        f"{u},{i}\n" for u in seen for i in sorted(seen[u])))
    torch.save({"user_embedding.weight": torch.from_numpy(rng.normal(size=(N_USERS, 5)).astype(np.float32)),
                "item_embedding.weight": torch.from_numpy(rng.normal(size=(N_ITEMS, 5)).astype(np.float32))},
               folder / "model.pt")
    counts = np.zeros(N_ITEMS)
    for items in seen.values():
        counts[list(items)] += 1
    return seen, counts


def _write_lists(folder: Path, lists: dict[int, list[int]]) -> None:
    (folder / "recs.csv").write_text("user_id,item_id,rank\n" + "".join(
        f"{u},{i},{r + 1}\n" for u, items in lists.items() for r, i in enumerate(items)))


def _graded(lists: dict[int, list[int]], counts: np.ndarray, k: int) -> tuple[float, float]:
    """The top-1% share (ties at the cut all in, popularity > 0) of every list's top-k slots, and the log's."""
    head = (counts >= np.sort(counts)[-1]) & (counts > 0)  # 1% of 100 items: the most popular, ties in
    slots = [i for items in lists.values() for i in items[:k]]
    return float(np.mean(head[slots])), float(counts[head].sum() / counts.sum())


@pytest.fixture()
def newcomers(tmp_path: Path) -> tuple[Path, float, float]:
    """The log users are served random untrained items, never the top one; 45 users the log lacks are
    served the 5 most popular items (QA "Served F1": 12.0% vs 7.1%, 1.68x, +4.9 points: moderate)."""
    rng = np.random.default_rng(21)
    seen, counts = _log(tmp_path, rng)
    order = np.argsort(-counts, kind="stable")
    lists = {u: [int(i) for i in rng.permutation(N_ITEMS) if int(i) not in seen[u] and counts[i] < counts.max()][:5]
             for u in range(N_USERS)}
    lists.update({u: [int(i) for i in order[:5]] for u in range(1000, 1045)})
    _write_lists(tmp_path, lists)
    return tmp_path, *_graded(lists, counts, 5)


@pytest.fixture()
def carousel(tmp_path: Path) -> tuple[Path, float, float]:
    """Every log user served a 5-item list with the most popular item first (QA "Served F2"), audited at
    K=10 (and the default 10, 100): graded at K=5, their length."""
    rng = np.random.default_rng(4)
    seen, counts = _log(tmp_path, rng)
    top = int(np.argmax(counts))
    lists = {u: [top] + [int(i) for i in rng.permutation(N_ITEMS) if int(i) not in seen[u] and int(i) != top][:4]
             for u in range(N_USERS)}
    _write_lists(tmp_path, lists)
    return tmp_path, *_graded(lists, counts, 5)


def _check(route: list[str], ks: list[str], gate: str) -> tuple[int, dict[str, object]]:
    result = CliRunner().invoke(cli, ["check", *route, "--recommendations", "recs.csv", "--interactions",
                                      "train.csv", *ks, "--no-probes", "--bootstrap", "0", "-q", "--fail-on", gate,
                                      "--json", "r.json"], catch_exceptions=False)
    return result.exit_code, json.loads(Path("r.json").read_text())


def _band(served: float, log: float) -> str:
    ratio, points = served / log, served - log
    return "high" if ratio >= 2 and points >= 0.05 else "moderate" if ratio >= 1.25 and points >= 0.02 else "low"


@pytest.mark.parametrize("route", list(ROUTES))
def test_lists_of_users_the_log_lacks_grade_on_every_route(
    newcomers: tuple[Path, float, float], monkeypatch: pytest.MonkeyPatch, route: str,
) -> None:
    folder, served, log = newcomers
    monkeypatch.chdir(folder)
    assert (round(served, 4), round(log, 4), _band(served, log)) == (0.12, 0.0714, "moderate")
    code, report = _check(ROUTES[route], ["-k", "5"], "severity_level>=2")
    verdict = report["verdict"]
    assert report["served"]["head_share_every_list"] == {"5": pytest.approx(served)}  # type: ignore[index]
    assert code == 3 and verdict["severity"] in ("moderate", "high")  # type: ignore[index]
    if route != "sampled":  # the model's own serving over 10 sampled users may grade as much: either is quoted
        assert (verdict["severity"], verdict["graded_by"]) == ("moderate", "served")  # type: ignore[index]
    if route in ("beside", "sampled"):  # the grade covers 45 lists the per-K figures leave out: the reason says so
        assert report["served"]["n_graded_apart"] >= 45  # type: ignore[index]
        assert "graded over all 75 lists of the file" in verdict["summary"]  # type: ignore[index]
        # the reference covers the queried users' lists only, and says so (QA "Served N2")
        assert "(the most-popular list over the queried users' lists: " in verdict["summary"]  # type: ignore[index]
        assert report["retrieval"]["at"]["5"]["served"]["head_share_1pct"] == 0.0  # type: ignore[index]


@pytest.mark.parametrize("ks", [["-k", "10"], []])
@pytest.mark.parametrize("route", list(ROUTES))
def test_lists_shorter_than_every_k_grade_at_their_length_on_every_route(
    carousel: tuple[Path, float, float], monkeypatch: pytest.MonkeyPatch, route: str, ks: list[str],
) -> None:
    folder, served, log = carousel
    monkeypatch.chdir(folder)
    assert _band(served, log) == "high"
    code, report = _check(ROUTES[route], ks, "severity_level>=3")
    verdict = report["verdict"]
    assert report["served"]["head_share_every_list"] == {"5": pytest.approx(served)}  # type: ignore[index]
    assert (verdict["severity"], verdict["graded_by"], code) == ("high", "served", 3)  # type: ignore[index]
    if route != "alone":
        assert "at K=5, their length, which no K asked fits" in verdict["summary"]  # type: ignore[index]


def test_batch_rows_grade_the_lists_alike_with_and_without_the_model(
    newcomers: tuple[Path, float, float], monkeypatch: pytest.MonkeyPatch,
) -> None:
    folder = newcomers[0]
    monkeypatch.chdir(folder)
    Path("man.csv").write_text("model,interactions,recommendations,k\n,train.csv,recs.csv,10\n"
                               "model.pt,train.csv,recs.csv,10\n")  # K=10 past the 5-item lists too
    result = CliRunner().invoke(cli, ["batch", "man.csv", "-o", "b.parquet", "-q", "--no-probes", "-j", "1"])
    assert result.exit_code == 0, result.output
    rows = pq.read_table("b.parquet").to_pylist()
    assert [(row["error"], row["severity_level"]) for row in rows] == [(None, 2.0), (None, 2.0)]  # old: 2.0, 0.0
