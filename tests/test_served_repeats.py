"""One repeats convention for every accuracy row (docs/measures.md, "Held-out accuracy";
docs/served-lists.md): served lists that re-serve training items are scored as served, but
a held-out repeat of a training pair is a miss there as for a model's lists, unless
--keep-seen, which makes repeats hittable for every row. Figures recomputed in numpy
(QA accuracy F1: the served row counted repeats as hits under a header saying they never hit)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from click.testing import CliRunner

from auditor.cli import cli

N_USERS, N_ITEMS, DIM, K = 60, 90, 8, 10


def _data(folder: Path) -> tuple[list[set[int]], dict[int, set[int]], list[list[int]]]:
    """A model, a log, a holdout where about a third of the pairs repeat a training pair,
    and served lists: each user's dot top-K with the training items kept (they re-serve them)."""
    rng = np.random.default_rng(5)
    items = (rng.normal(size=(N_ITEMS, DIM)) * (0.3 + np.linspace(2, 0, N_ITEMS))[:, None]).astype(np.float32)
    users = rng.normal(size=(N_USERS, DIM)).astype(np.float32)
    seen = [set(rng.choice(N_ITEMS, size=rng.integers(4, 12), replace=False).tolist()) for _ in range(N_USERS)]
    scores = users.astype(np.float64) @ items.astype(np.float64).T
    served = [[int(i) for i in np.lexsort((np.arange(N_ITEMS), -row))[:K]] for row in scores]
    held: dict[int, set[int]] = {}
    for u in range(N_USERS):
        unseen = [i for i in range(N_ITEMS) if i not in seen[u]]
        reserved = sorted(seen[u] & set(served[u])) or sorted(seen[u])  # a repeat the list re-serves, where one is
        held[u] = set(rng.choice(unseen, size=2, replace=False).tolist()) | {int(rng.choice(reserved))}
    torch.save({"user_embedding.weight": torch.from_numpy(users), "item_embedding.weight": torch.from_numpy(items)},
               folder / "model.pt")
    pq.write_table(pa.table({"user_id": np.array([u for u in range(N_USERS) for _ in seen[u]]),
                             "item_id": np.array([i for u in range(N_USERS) for i in sorted(seen[u])])}),
                   folder / "train.parquet")
    pq.write_table(pa.table({"user_id": np.array([u for u in held for _ in held[u]]),
                             "item_id": np.array([i for u in held for i in sorted(held[u])])}), folder / "holdout.parquet")
    pq.write_table(pa.table({"user_id": np.repeat(np.arange(N_USERS), K), "item_id": np.array(served).ravel(),
                             "rank": np.tile(np.arange(1, K + 1), N_USERS)}), folder / "recs.parquet")
    return seen, held, served


def _figures(lists: list[list[int]], held: dict[int, set[int]], hittable: dict[int, set[int]]) -> dict[str, float]:
    """Recall, NDCG, hit rate and MRR@K (RecBole's): |H_u| from ``held``, hits only on ``hittable``."""
    out = {"recall": 0.0, "ndcg": 0.0, "hit_rate": 0.0, "mrr": 0.0}
    for u, relevant in held.items():
        ranks = [r for r, i in enumerate(lists[u][:K], 1) if i in hittable[u]]
        out["recall"] += len(ranks) / len(relevant)
        out["ndcg"] += sum(1 / np.log2(r + 1) for r in ranks) / sum(1 / np.log2(r + 1) for r in range(1, min(len(relevant), K) + 1))
        out["hit_rate"] += bool(ranks)
        out["mrr"] += 1 / ranks[0] if ranks else 0.0
    return {name: value / len(held) for name, value in out.items()}


@pytest.mark.parametrize("with_model", [True, False])
@pytest.mark.parametrize("keep_seen", [False, True])
def test_served_lists_count_repeats_as_every_row_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, with_model: bool, keep_seen: bool
) -> None:
    seen, held, served = _data(tmp_path)
    hittable = held if keep_seen else {u: h - seen[u] for u, h in held.items()}
    expected = _figures(served, held, hittable)
    repeats_hit = sum(1 for u in held for i in served[u] if i in held[u] and i in seen[u])
    assert repeats_hit > 10  # the lists do re-serve held-out repeats: the two conventions differ
    common = ["--interactions", "train.parquet", "--holdout", "holdout.parquet", "--recommendations", "recs.parquet",
              "-k", str(K), "-q", *(["--keep-seen"] if keep_seen else [])]
    args = ["check", *(["model.pt"] if with_model else []), *common, "--json", "r.json"]
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code in (0, 3), result.output
    accuracy = json.loads((tmp_path / "r.json").read_text())["accuracy"]
    got = accuracy["at"][str(K)]["served"]
    for name, value in expected.items():
        assert got[name] == pytest.approx(value, abs=1e-9), name
    assert ("hittable" if keep_seen else "misses for every row") in accuracy["repeats"]
    # The group NDCG of the served lists follows the same convention: over the groups' evaluated
    # users (every user here has a profile and held-out items) it averages to the served NDCG.
    report = json.loads((tmp_path / "r.json").read_text())
    if with_model:
        rows = report["retrieval"]["user_groups"][str(K)]["served"]
        weighted = sum(g["ndcg"] * g["n_evaluated"] for g in rows) / sum(g["n_evaluated"] for g in rows)
        assert weighted == pytest.approx(expected["ndcg"], abs=1e-9)
    else:  # alone, the same group figures as beside a model (docs/measures.md)
        beside = CliRunner().invoke(cli, ["check", "model.pt", *common, "--json", "m.json"], catch_exceptions=False)
        assert beside.exit_code in (0, 3), beside.output
        model_served = json.loads((tmp_path / "m.json").read_text())["retrieval"]["at"][str(K)]["served"]
        alone = report["retrieval"]["at"][str(K)]["served"]
        for group in ("niche", "diverse", "blockbuster"):
            assert alone[f"ndcg_{group}"] == pytest.approx(model_served[f"ndcg_{group}"], abs=1e-12), group
    report = json.loads((tmp_path / "r.json").read_text())
    cost = [w for w in report["warnings"] if "held-out repeats of a training pair; the accuracy" in w]
    if keep_seen:
        assert cost == []
    else:  # the warning says what the re-served repeats cost: the count and the figures as hits
        counted = _figures(served, held, held)
        assert len(cost) == 1 and f"@{K}: {repeats_hit:,} slots" in cost[0]
        assert f"NDCG {expected['ndcg']:.4f}" in cost[0] and f"({counted['ndcg']:.4f} and" in cost[0]
