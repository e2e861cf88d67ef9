"""A trained user whose query vector is zero (docs/measures.md, "Query population"): served
nothing by the model's scorings, yet in the population the user groups are drawn among
(their group is a property of their training profile) and, with a holdout, a miss. So a
model that zeroes a user's vector gets the groups, group figures and accuracy that the same
lists get alone as served lists, and its other users' figures do not move."""

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

N_USERS, N_ITEMS, DIM, K = 12, 30, 4, 5
ZERO = 0  # a trained niche-side user (most of their items from the tail), with held-out items


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """m1.pt, m6.pt (m1 with user 0's vector zeroed), the logs, and m6's dot lists as a file."""
    root = tmp_path_factory.mktemp("zero")
    rng = np.random.default_rng(0)
    items = rng.normal(size=(N_ITEMS, DIM)) * (1 + np.linspace(2, 0, N_ITEMS))[:, None]
    users = rng.normal(size=(N_USERS, DIM))
    weight = np.linspace(3, 0.2, N_ITEMS) ** 2
    train = []
    for u in range(N_USERS):
        p = weight ** (1 if u % 3 else 0.2)
        train += [(u, int(i)) for i in rng.choice(N_ITEMS, size=rng.integers(3, 8), replace=False, p=p / p.sum())]
    held = []
    for u in range(N_USERS):
        seen = {i for v, i in train if v == u}
        held += [(u, int(i)) for i in rng.choice([i for i in range(N_ITEMS) if i not in seen], 2, replace=False)]
    zeroed = users.copy()
    zeroed[ZERO] = 0
    for name, table in (("m1", users), ("m6", zeroed)):
        torch.save({"user_embedding.weight": torch.tensor(table, dtype=torch.float32),
                    "item_embedding.weight": torch.tensor(items, dtype=torch.float32)}, root / f"{name}.pt")
    for name, pairs in (("train", train), ("hold", held)):
        pq.write_table(pa.table({"user_id": [u for u, _ in pairs], "item_id": [i for _, i in pairs]}),
                       root / f"{name}.parquet")
    lists = _dot_lists(zeroed.astype(np.float32), items.astype(np.float32), train)
    rows = [(u, i, r + 1) for u, row in lists.items() for r, i in enumerate(row)]
    pq.write_table(pa.table({"user_id": [x[0] for x in rows], "item_id": [x[1] for x in rows],
                             "rank": [x[2] for x in rows]}), root / "recs_m6.parquet")
    np.save(root / "lists.npy", np.array([lists.get(u, [-1] * K) for u in range(N_USERS)]))
    return root


def _dot_lists(users: np.ndarray, items: np.ndarray, train: list[tuple[int, int]]) -> dict[int, list[int]]:
    """Each user's dot top-K without their training items (ties: lower row), none for a zero vector."""
    out = {}
    for u in range(N_USERS):
        if not users[u].any():
            continue
        scores = (items @ users[u]).astype(np.float64)
        scores[[i for v, i in train if v == u]] = -np.inf
        out[u] = [int(i) for i in np.lexsort((np.arange(N_ITEMS), -scores))[:K]]
    return out


def _check(files: Path, tmp_path: Path, *args: str) -> dict[str, Any]:
    out = tmp_path / f"r{len(list(tmp_path.iterdir()))}.json"
    ran = CliRunner().invoke(cli, ["check", *args, "--interactions", str(files / "train.parquet"), "--holdout",
                                   str(files / "hold.parquet"), "-k", str(K), "--no-probes", "--bootstrap", "0",
                                   "--json", str(out)])
    assert ran.exit_code in (0, 3), ran.output
    return json.loads(out.read_text())


def _ndcg(lists: np.ndarray, held: dict[int, set[int]]) -> float:
    """Mean NDCG@K over every held-out user, an empty list scoring 0."""
    values = []
    for u, relevant in held.items():
        gains = [1.0 / np.log2(r + 2) for r, i in enumerate(lists[u]) if i in relevant]
        values.append(sum(gains) / sum(1.0 / np.log2(r + 2) for r in range(min(len(relevant), K))))
    return float(np.mean(values))


def test_a_zero_vector_user_keeps_their_group_and_is_a_miss(files: Path, tmp_path: Path) -> None:
    m1 = _check(files, tmp_path, str(files / "m1.pt"))
    m6 = _check(files, tmp_path, str(files / "m6.pt"), "--recommendations", str(files / "recs_m6.parquet"))
    alone = _check(files, tmp_path, "--recommendations", str(files / "recs_m6.parquet"))
    sizes = {r["group"]: r["n_users"] for r in m1["retrieval"]["user_groups"][str(K)]["dot"]}
    # The groups are drawn among the 12 trained users, whatever their vectors (was 2/6/3 of 11 users).
    for scoring in ("dot", "served"):
        got = {r["group"]: r["n_users"] for r in m6["retrieval"]["user_groups"][str(K)][scoring]}
        assert got == sizes and sum(got.values()) == N_USERS, (scoring, got)
    drawn = alone["retrieval"]["definitions"]["user_group_sizes"]
    assert m6["retrieval"]["definitions"]["user_group_sizes"] == drawn == m1["retrieval"]["definitions"][
        "user_group_sizes"]
    assert drawn.startswith(f"user groups drawn: {sizes['niche']} niche") and f"of {N_USERS} users" in drawn
    # The same lists give the same group figures beside the model and alone.
    served, by_file = m6["retrieval"]["at"][str(K)]["served"], alone["retrieval"]["at"][str(K)]["served"]
    for group in ("niche", "diverse", "blockbuster"):
        for name in (f"gap_delta_{group}", f"miscalibration_{group}", f"ndcg_{group}"):
            assert served[name] == pytest.approx(by_file[name], abs=1e-12), name
            assert m6["retrieval"]["at"][str(K)]["dot"][name] == pytest.approx(by_file[name], abs=1e-12), name
    # Accuracy: user 0 is a miss, the mean over all 12 held-out users (was over the 11 queried).
    held: dict[int, set[int]] = {}
    for u, i in zip(*(pq.read_table(files / "hold.parquet").column(c).to_pylist() for c in ("user_id", "item_id"))):
        held.setdefault(u, set()).add(i)
    expected = _ndcg(np.load(files / "lists.npy"), held)
    for report, scoring in ((m6, "dot"), (m6, "served"), (alone, "served")):
        assert report["accuracy"]["at"][str(K)][scoring]["ndcg"] == pytest.approx(expected, abs=1e-9), scoring
    # The popular list reads no vector: it serves user 0 too, the same as beside m1.
    for section in ("retrieval", "accuracy"):
        theirs = m1[section]["at"][str(K)]["popular"]
        assert m6[section]["at"][str(K)]["popular"] == pytest.approx(theirs, abs=1e-12), section
    said = [w for w in m6["warnings"] if "query vectors are zero" in w]
    assert len(said) == 1 and "as misses (NDCG 0)" in said[0] and "user group" in said[0]
