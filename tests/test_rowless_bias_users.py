"""A log user without a user-table row is a zero query, in every model (QA measures F3;
docs/measures.md, "Query population"). An item-bias model serves a zero row [0, 1], ranked by
the bias, so it serves a rowless user the same way: the same lists, counts and accuracy
whether the exporter dropped the users' rows or zeroed them. Before, rowless users were served
nothing (QA: dot top-10% share 0.2533 and NDCG@5 0.0933, against 0.3257 and 0.1461 as zero
rows). Without a bias, both are served nothing, as before. Every figure checked is
recomputed here with numpy."""

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

N_USERS, N_ROWLESS, N_ITEMS, DIM, K = 12, 3, 30, 4, 5


def _data() -> tuple[np.ndarray, np.ndarray, np.ndarray, list[set[int]], np.ndarray]:
    """Users, items, item bias (0.5·(log1p f − mean)), each user's training items, and one
    held-out item each (unseen)."""
    rng = np.random.default_rng(9)  # 2 of the 3 rowless users hold an item their bias list has
    p = 1 / np.arange(1, N_ITEMS + 1)
    seen = [set(rng.choice(N_ITEMS, size=4, replace=False, p=p / p.sum()).tolist()) for _ in range(N_USERS)]
    held = np.array([rng.choice(sorted(set(range(N_ITEMS)) - s)) for s in seen])
    freq = np.bincount([i for s in seen for i in s], minlength=N_ITEMS)
    bias = (0.5 * (np.log1p(freq) - np.log1p(freq).mean())).astype(np.float32)
    return (rng.normal(size=(N_USERS, DIM)).astype(np.float32), rng.normal(size=(N_ITEMS, DIM)).astype(np.float32),
            bias, seen, held)


def _run(root: Path, name: str, rowless: bool, with_bias: bool) -> dict[str, Any]:
    users, items, bias, seen, held = _data()
    folder = root / name
    folder.mkdir()
    kept = N_USERS - N_ROWLESS if rowless else N_USERS  # the last users: no row, or a zero row
    table = users[:kept].copy()
    table[N_USERS - N_ROWLESS:] = 0.0
    state = {"user_embedding.weight": torch.tensor(table), "item_embedding.weight": torch.tensor(items)}
    if with_bias:
        state["item_bias.weight"] = torch.tensor(bias)
    torch.save(state, folder / "model.pt")
    (folder / "uids.txt").write_text("".join(f"{u}\n" for u in range(kept)))
    pairs = [(u, i) for u in range(N_USERS) for i in sorted(seen[u])]
    pq.write_table(pa.table({"user_id": [u for u, _ in pairs], "item_id": [i for _, i in pairs]}), folder / "train.parquet")
    pq.write_table(pa.table({"user_id": np.arange(N_USERS), "item_id": held}), folder / "test.parquet")
    result = CliRunner().invoke(cli, [
        "check", str(folder / "model.pt"), "--interactions", str(folder / "train.parquet"), "--holdout",
        str(folder / "test.parquet"), "--user-ids", str(folder / "uids.txt"), "-k", str(K), "--seed", "1",
        "--no-probes", "-q", "--json", str(folder / "r.json")])
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads((folder / "r.json").read_text())
    return report


def _dot_ndcg(with_bias: bool, zero_served: bool = True) -> float:
    """NDCG@K of dot over every trained user, one held-out item each (IDCG 1): a zero query
    ranks by the bias alone with a bias (``zero_served``), and is served nothing (a miss) without."""
    users, items, bias, seen, held = _data()
    users[N_USERS - N_ROWLESS:] = 0.0
    gains = []
    for u in range(N_USERS):
        if not (with_bias and zero_served) and not users[u].any():
            gains.append(0.0)
            continue
        scores = items.astype(np.float64) @ users[u].astype(np.float64) + (bias if with_bias else 0.0)
        candidates = [i for i in range(N_ITEMS) if i not in seen[u]]
        top = sorted(candidates, key=lambda i: (-scores[i], i))[:K]
        gains.append(1.0 / np.log2(top.index(held[u]) + 2) if held[u] in top else 0.0)
    return float(np.mean(gains))


def _figures(report: dict[str, Any]) -> dict[str, Any]:
    at = report["retrieval"]["at"][str(K)]
    return {"n_queries": report["retrieval"]["n_queries"], "n_zero": report["retrieval"]["n_zero_queries"],
            "shares": {name: at[name]["head_share_10pct"] for name in ("dot", "cosine", "popular")},
            "accuracy": {name: report["accuracy"]["at"][str(K)][name] for name in ("dot", "cosine", "popular")},
            "severity": report["verdict"]["severity"]}


@pytest.mark.parametrize("with_bias", [True, False])
def test_a_rowless_log_user_is_served_as_a_zero_row(tmp_path: Path, with_bias: bool) -> None:
    no_row, zero_row = _run(tmp_path, "a", True, with_bias), _run(tmp_path, "b", False, with_bias)
    assert no_row["retrieval"]["population"]["n_unmatched_log_users"] == N_ROWLESS
    assert zero_row["retrieval"]["population"]["n_unmatched_log_users"] == 0
    ndcg = no_row["accuracy"]["at"][str(K)]["dot"]["ndcg"]
    assert ndcg == pytest.approx(_dot_ndcg(with_bias), abs=1e-12)
    if with_bias:  # served [0, 1]: queried (was 9 queries, the 3 served nothing), no zero query counted
        assert no_row["retrieval"]["n_queries"] == zero_row["retrieval"]["n_queries"] == N_USERS
        assert no_row["retrieval"]["n_zero_queries"] == zero_row["retrieval"]["n_zero_queries"] == 0
        assert _figures(no_row) == _figures(zero_row)
        assert ndcg > _dot_ndcg(with_bias, zero_served=False) + 0.01  # what serving them nothing gave
        assert any("a model with an item bias ranks the items for them by the bias alone" in w
                   for w in no_row["warnings"])
    else:  # served nothing both ways: counted as rowless, or as zero queries (the documented equivalents)
        assert no_row["retrieval"]["n_queries"] == zero_row["retrieval"]["n_queries"] == N_USERS - N_ROWLESS
        assert (no_row["retrieval"]["n_zero_queries"], zero_row["retrieval"]["n_zero_queries"]) == (0, N_ROWLESS)
        assert {**_figures(no_row), "n_zero": 0} == {**_figures(zero_row), "n_zero": 0}
