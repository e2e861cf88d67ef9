"""Training users the user table has no row for (docs/measures.md, "Query population"):
served nothing by the model, exactly as a user whose vector is zero (one rule,
``loading/zero_queries.served_nothing``). They keep their group, drawn from their training
profile among every trained user, and with a holdout each is a miss. So the same lists give
the same group figures and accuracy alone and beside the model (QA "harms F1": leaving two
users out of the table redrew 9 other users' groups and flipped the niche ΔGAP from +6.5%
to −36.3%), and naming a badly served user's row as someone else's gains nothing.

The data are the QA's (their build.py, seed 0, and f_unmatched2.py); every figure checked
is recomputed here with numpy."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from click.testing import CliRunner

from auditor.cli import cli

N_USERS, N_ITEMS, DIM, K = 20, 30, 4, 5
ROWLESS = {20: [20, 22, 25], 21: [21, 24, 27, 1]}
"""Two tail-heavy (niche) users of the log who joined after the user table was exported."""
ROWLESS_HELD = {20: 9, 21: 4}


def _pairs(path: Path, pairs: list[tuple[int, int]]) -> None:
    pq.write_table(pa.table({"user_id": [u for u, _ in pairs], "item_id": [i for _, i in pairs]}), path)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("rowless")
    rng = np.random.default_rng(0)
    items = rng.normal(size=(N_ITEMS, DIM)) * (1 + np.linspace(2, 0, N_ITEMS))[:, None]
    users = rng.normal(size=(N_USERS, DIM))
    weight = np.linspace(3, 0.2, N_ITEMS) ** 2
    train: list[tuple[int, int]] = []
    for u in range(N_USERS):
        n = rng.integers(3, 8)
        p = weight ** (1 if u % 3 else 0.1)
        train += [(u, int(i)) for i in rng.choice(N_ITEMS, size=n, replace=False, p=p / p.sum())]
    held: list[tuple[int, int]] = []
    for u in range(N_USERS - 2):  # users 18 and 19 hold nothing out
        seen = {i for v, i in train if v == u}
        held += [(u, int(i)) for i in rng.choice([i for i in range(N_ITEMS) if i not in seen], 2, replace=False)]
    users32, items32 = users.astype(np.float32), items.astype(np.float32)
    zeroed = users32.copy()
    zeroed[0] = 0
    for name, table in (("m", users32), ("m_zero0", zeroed)):
        torch.save({"user_embedding.weight": torch.tensor(table), "item_embedding.weight": torch.tensor(items32)},
                   root / f"{name}.pt")
    _pairs(root / "train.parquet", train)
    _pairs(root / "hold.parquet", held)
    _pairs(root / "train22.parquet", train + [(u, i) for u, its in ROWLESS.items() for i in its])
    _pairs(root / "hold22.parquet", held + list(ROWLESS_HELD.items()))
    (root / "ids20.txt").write_text("".join(f"{u}\n" for u in range(N_USERS)))
    (root / "ids_row0_999.txt").write_text("999\n" + "".join(f"{u}\n" for u in range(1, N_USERS)))
    lists = {u: _top(users32[u], items32, {i for v, i in train if v == u}) for u in range(N_USERS)}
    np.save(root / "lists.npy", np.array([lists[u] for u in range(N_USERS)]))
    recs = [(u, i, r + 1) for u, row in lists.items() for r, i in enumerate(row)]
    pq.write_table(pa.table({"user_id": [x[0] for x in recs], "item_id": [x[1] for x in recs],
                             "rank": [x[2] for x in recs]}), root / "recs.parquet")
    return root


def _top(user: np.ndarray, items: np.ndarray, seen: set[int]) -> list[int]:
    """Dot top-K without the training items (ties: the lower row)."""
    scores = (items.astype(np.float64) @ user.astype(np.float64))
    scores[sorted(seen)] = -np.inf
    return [int(i) for i in np.lexsort((np.arange(N_ITEMS), -scores))[:K]]


def _check(files: Path, tmp_path: Path, train: str, hold: str, *args: str) -> dict[str, Any]:
    out = tmp_path / f"r{len(list(tmp_path.iterdir()))}.json"
    ran = CliRunner().invoke(cli, ["check", *args, "--interactions", str(files / train), "--holdout",
                                   str(files / hold), "-k", str(K), "--no-probes", "--bootstrap", "0",
                                   "--json", str(out)])
    assert ran.exit_code == 0, ran.output
    return json.loads(out.read_text())


def _expected(files: Path, train: str, hold: str) -> tuple[dict[int, str], float, float]:
    """Independently: each trained user's group (popular items: the top 20% by interactions;
    ⌊0.2n⌋ lowest shares niche, from position ⌊0.8n⌋ blockbuster, ties joining the cut, a
    user tied with both niche), the niche ΔGAP of the dot lists, and the mean NDCG@K over
    every held-out trained user (a user without a list scores 0)."""
    t, h = pq.read_table(files / train), pq.read_table(files / hold)
    tu, ti = t.column("user_id").to_numpy(), t.column("item_id").to_numpy()
    pop = np.bincount(ti, minlength=N_ITEMS).astype(float)
    popular = (pop >= np.sort(pop)[::-1][int(0.2 * N_ITEMS) - 1]) & (pop > 0)
    trained = sorted(set(tu.tolist()))
    ratio = np.array([popular[ti[tu == u]].mean() for u in trained])
    n, ordered = len(trained), np.sort(ratio)
    group = np.array(["diverse"] * n, dtype=object)
    group[ratio >= ordered[int(np.floor(0.8 * n + 1e-9))]] = "blockbuster"
    group[ratio <= ordered[int(np.floor(0.2 * n + 1e-9)) - 1]] = "niche"
    groups = dict(zip(trained, group))
    lists = np.load(files / "lists.npy")
    niche = [u for u in trained if groups[u] == "niche" and u < N_USERS]  # only those with a list
    gap_profile = np.mean([pop[ti[tu == u]].mean() for u in niche])
    gap_list = np.mean([pop[lists[u]].mean() for u in niche])
    relevant: dict[int, set[int]] = {}
    for u, i in zip(h.column("user_id").to_pylist(), h.column("item_id").to_pylist()):
        relevant.setdefault(u, set()).add(i)
    ndcg = []
    for u, rel in relevant.items():
        listed = lists[u] if u < N_USERS else []
        dcg = sum(1 / np.log2(r + 2) for r, i in enumerate(listed) if i in rel)
        ndcg.append(dcg / sum(1 / np.log2(r + 2) for r in range(min(len(rel), K))))
    return groups, float((gap_list - gap_profile) / gap_profile), float(np.mean(ndcg))


def _sizes(groups: dict[int, str]) -> str:
    count = {g: sum(v == g for v in groups.values()) for g in ("niche", "diverse", "blockbuster")}
    return f"{count['niche']} niche ({count['niche'] / len(groups):.1%}), {count['diverse']} diverse"


def test_rowless_log_users_give_the_same_figures_beside_the_model_as_the_lists_alone(
        files: Path, tmp_path: Path) -> None:
    recs = ("--recommendations", str(files / "recs.parquet"))
    alone = _check(files, tmp_path, "train22.parquet", "hold22.parquet", *recs)
    beside = _check(files, tmp_path, "train22.parquet", "hold22.parquet", str(files / "m.pt"), "--user-ids",
                    str(files / "ids20.txt"), *recs)
    groups, gap_niche, ndcg = _expected(files, "train22.parquet", "hold22.parquet")
    assert (groups[20], groups[21]) == ("niche", "niche") and round(gap_niche, 4) == 0.0654 and round(ndcg, 4) == 0.1996
    for report in (alone, beside):  # beside was 10 niche of 20 users, ΔGAP -0.3634, NDCG 0.2218 over 18 users
        assert report["retrieval"]["definitions"]["user_group_sizes"].startswith(
            f"user groups drawn: {_sizes(groups)}") and "of 22 users" in report["retrieval"]["definitions"][
            "user_group_sizes"]
        assert report["retrieval"]["at"][str(K)]["served"]["gap_delta_niche"] == pytest.approx(gap_niche, abs=1e-9)
        assert report["accuracy"]["at"][str(K)]["served"]["ndcg"] == pytest.approx(ndcg, abs=1e-9)
        assert report["accuracy"]["n_users_evaluated"] == 20
    for name, value in alone["retrieval"]["at"][str(K)]["served"].items():
        if name.startswith(("gap_delta_", "miscalibration_", "ndcg_")):
            assert beside["retrieval"]["at"][str(K)]["served"][name] == pytest.approx(value, abs=1e-12), name
    # The model's dot lists are the served lists: the same figures under its own scoring.
    assert beside["retrieval"]["at"][str(K)]["dot"]["gap_delta_niche"] == pytest.approx(gap_niche, abs=1e-9)
    population = beside["retrieval"]["population"]
    assert (population["n_queries"], population["n_eligible"], population["n_unmatched_log_users"]) == (20, 22, 2)
    assert "(2 of them without a row: zero queries)" in population["description"]
    said = [w for w in beside["warnings"] if "no row in the user table" in w]
    assert len(said) == 1 and said[0].startswith("2 users of the training log") and "as misses (NDCG 0)" in said[0]
    # Harms N3: the two users without a list are no queried users (n_queries 20; was "2 of the 22 queried users")
    no_list = [w for w in beside["warnings"] if "have no list in" in w]
    assert len(no_list) == 1 and no_list[0].startswith(
        "2 of the 22 users of the population (20 queried; 2 the model cannot query: no user-table row or a zero "
        "vector), 2 of them not queried, have no list in "), no_list


def test_naming_a_users_row_as_another_id_equals_zeroing_that_users_vector(files: Path, tmp_path: Path) -> None:
    """Trained user 0's row given the id 999: the log's user 0 has no row, and the row is
    untrained. The model then serves user 0 exactly what zeroing their vector serves them:
    nothing, in their group, a miss (was: user 0 dropped, groups 3/12/4, NDCG up 0.2218 -> 0.2348)."""
    zeroed = _check(files, tmp_path, "train.parquet", "hold.parquet", str(files / "m_zero0.pt"))
    renamed = _check(files, tmp_path, "train.parquet", "hold.parquet", str(files / "m.pt"), "--user-ids",
                     str(files / "ids_row0_999.txt"))
    groups, _, _ = _expected(files, "train.parquet", "hold.parquet")
    assert renamed["retrieval"]["definitions"]["user_group_sizes"] == zeroed["retrieval"]["definitions"][
        "user_group_sizes"]
    assert renamed["retrieval"]["definitions"]["user_group_sizes"].startswith(f"user groups drawn: {_sizes(groups)}")
    for scoring in ("dot", "cosine", "popular"):
        for name, value in zeroed["retrieval"]["at"][str(K)][scoring].items():
            assert renamed["retrieval"]["at"][str(K)][scoring][name] == pytest.approx(value, abs=1e-12, nan_ok=True), (
                scoring, name)
        assert renamed["accuracy"]["at"][str(K)][scoring] == pytest.approx(zeroed["accuracy"]["at"][str(K)][scoring],
                                                                           abs=1e-12), scoring
    lists = np.load(files / "lists.npy")
    lists[0] = -1  # served nothing
    relevant: dict[int, set[int]] = {}
    for u, i in zip(*(pq.read_table(files / "hold.parquet").column(c).to_pylist() for c in ("user_id", "item_id"))):
        relevant.setdefault(u, set()).add(i)
    ndcg = np.mean([sum(1 / np.log2(r + 2) for r, i in enumerate(lists[u]) if i in rel)
                    / sum(1 / np.log2(r + 2) for r in range(min(len(rel), K))) for u, rel in relevant.items()])
    assert renamed["accuracy"]["n_users_evaluated"] == 18
    assert renamed["accuracy"]["at"][str(K)]["dot"]["ndcg"] == pytest.approx(ndcg, abs=1e-9)
    population = renamed["retrieval"]["population"]
    assert (population["n_queries"], population["n_untrained_user_rows"], population["n_unmatched_log_users"],
            population["n_zero_queries"]) == (19, 1, 1, 0)
