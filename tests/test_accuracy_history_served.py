"""Held-out accuracy of history queries and of served lists beside a model, recomputed in
numpy from docs/measures.md ("Query population", "Held-out accuracy") and
docs/served-lists.md ("Beside a model"): a history query is the mean of the user's
distinct training items' rows; served lists keep their training items, an item without a
row leaves its slot empty (the items after it keep their ranks), and a queried user
without a list is a miss. (QA accuracy re-check: popaudit matched to 1e-12.)"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from click.testing import CliRunner

from auditor.cli import cli

N_USERS, N_ITEMS, DIM = 80, 120, 8


def _data(folder: Path) -> tuple[np.ndarray, np.ndarray, list[set[int]], dict[int, set[int]]]:
    rng = np.random.default_rng(11)
    items = (rng.normal(size=(N_ITEMS, DIM)) * (0.5 + np.linspace(2, 0, N_ITEMS))[:, None]).astype(np.float32)
    users = rng.normal(size=(N_USERS, DIM)).astype(np.float32)
    seen = [set(rng.choice(N_ITEMS, size=rng.integers(3, 12), replace=False).tolist()) for _ in range(N_USERS)]
    log_u = [u for u in range(N_USERS) for _ in seen[u]] + [0]
    log_i = [i for u in range(N_USERS) for i in sorted(seen[u])] + [min(seen[0])]  # a repeat counts once
    held: dict[int, set[int]] = {}
    for u in range(N_USERS):
        held[u] = set(rng.choice([i for i in range(N_ITEMS) if i not in seen[u]], size=rng.integers(1, 4), replace=False).tolist())
    torch.save({"user_embedding.weight": torch.from_numpy(users), "item_embedding.weight": torch.from_numpy(items)},
               folder / "model.pt")
    pq.write_table(pa.table({"user_id": np.array(log_u), "item_id": np.array(log_i)}), folder / "train.parquet")
    pq.write_table(pa.table({"user_id": np.array([u for u in held for _ in held[u]]),
                             "item_id": np.array([i for u in held for i in sorted(held[u])])}), folder / "holdout.parquet")
    return users.astype(np.float64), items.astype(np.float64), seen, held


def _figures(lists: list[list[int]], held: dict[int, set[int]], k: int) -> dict[str, float]:
    """Recall, NDCG, hit rate and MRR@k (RecBole's definitions; -1: an empty slot)."""
    out = {"recall": 0.0, "ndcg": 0.0, "hit_rate": 0.0, "mrr": 0.0}
    for u, relevant in held.items():
        ranks = [r for r, i in enumerate(lists[u][:k], 1) if i in relevant]
        out["recall"] += len(ranks) / len(relevant)
        ideal = sum(1 / np.log2(r + 1) for r in range(1, min(len(relevant), k) + 1))
        out["ndcg"] += sum(1 / np.log2(r + 1) for r in ranks) / ideal
        out["hit_rate"] += bool(ranks)
        out["mrr"] += 1 / ranks[0] if ranks else 0.0
    return {name: value / len(held) for name, value in out.items()}


def _top(scores: np.ndarray, seen: list[set[int]], k: int) -> list[list[int]]:
    out = []
    for u, row in enumerate(scores):
        row = row.copy()
        row[list(seen[u])] = -np.inf
        out.append([int(i) for i in np.lexsort((np.arange(row.size), -row))[:k]])
    return out


def _check(folder: Path, *extra: str) -> dict:  # type: ignore[type-arg]
    res = CliRunner().invoke(cli, ["check", str(folder / "model.pt"), "--interactions", str(folder / "train.parquet"),
                                   "--holdout", str(folder / "holdout.parquet"), "--no-probes", "--bootstrap", "0",
                                   "-k", "5", "-k", "10", "-q", "--json", str(folder / "r.json"), *extra])
    assert res.exit_code == 0, res.output
    return json.loads((folder / "r.json").read_text())  # type: ignore[no-any-return]


def test_history_queries_score_as_the_means_of_the_distinct_training_items(tmp_path: Path) -> None:
    _users, items, seen, held = _data(tmp_path)
    report = _check(tmp_path, "--queries", "history")
    assert report["retrieval"]["population"]["source"] == "history"
    queries = np.stack([items[sorted(s)].mean(axis=0) for s in seen])
    norms = np.linalg.norm(items, axis=1)
    scorings = {"dot": queries @ items.T, "alpha_0.5": (queries @ items.T) * norms ** -0.5,
                "cosine": (queries @ items.T) / norms}
    for k in (5, 10):
        for name, scores in scorings.items():
            expected = _figures(_top(scores, seen, k), held, k)
            got = report["accuracy"]["at"][str(k)][name]
            assert all(abs(got[m] - v) < 1e-12 for m, v in expected.items()), (k, name, got, expected)


def test_served_lists_beside_a_model_keep_their_slots_and_training_items(tmp_path: Path) -> None:
    users, items, seen, held = _data(tmp_path)
    order = np.argsort(-(users @ items.T), axis=1, kind="stable")[:, :10]  # training items kept: served as they were
    served = {u: [int(i) for i in order[u]] for u in range(N_USERS) if u != 3}  # user 3: no list
    served[5][1] = 10_000  # no row: an empty slot, the items after it keep their ranks
    served[6] = served[6][:4]  # a short list
    rows = [(u, i, r) for u, lst in served.items() for r, i in enumerate(lst, 1)]
    pq.write_table(pa.table({"user_id": [u for u, _, _ in rows], "item_id": [i for _, i, _ in rows],
                             "rank": [r for _, _, r in rows]}), tmp_path / "recs.parquet")
    report = _check(tmp_path, "--recommendations", str(tmp_path / "recs.parquet"))
    lists = [served.get(u, []) for u in range(N_USERS)]
    for k in (5, 10):
        expected = _figures(lists, held, k)
        got = report["accuracy"]["at"][str(k)]["served"]
        assert all(abs(got[m] - v) < 1e-12 for m, v in expected.items()), (k, got, expected)
    assert report["served"]["n_queried_without_list"] == 1
