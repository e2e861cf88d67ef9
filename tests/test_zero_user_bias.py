"""Loaders F1: a bias model serves a zero user row as [0, 1] (u·i + b_i = b_i; by cosine,
F.normalize(0) = 0, so cos + b_i = b_i): its trained users are queried and served the
items by bias, like every other user (auditor/loading/zero_queries.py). They were left
out as "served nothing" (scoring every item 0) and, with a holdout, counted as misses.

Known answer: numpy's own ranking of the model's score over every trained user (training
items excluded, ties to the lower row): the dot head share at K, the hit rate of a holdout
drawn from those lists (1.0), and the mean list popularity the user groups split.
"""

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
from test_cosine_bias import _keras_h5

N_USERS, N_ITEMS, DIM, K = 40, 60, 8, 10
ZERO = [0, 5, 10, 15, 20, 25, 30, 35]


def _log() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """8 Zipf-drawn training items a user; the frequencies."""
    rng = np.random.default_rng(0)
    p = 1.0 / np.arange(1, N_ITEMS + 1) ** 1.1
    items = np.concatenate([rng.choice(N_ITEMS, 8, replace=False, p=p / p.sum()) for _ in range(N_USERS)])
    return np.repeat(np.arange(N_USERS), 8), items, np.bincount(items, minlength=N_ITEMS)


def _model(freq: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    items = (rng.normal(size=(N_ITEMS, DIM)) * (0.3 + np.log1p(freq))[:, None]).astype(np.float32)
    users = rng.normal(size=(N_USERS, DIM)).astype(np.float32)
    users[ZERO] = 0
    return users, items, (1.6 * np.log1p(freq) + 0.4 * rng.normal(size=N_ITEMS)).astype(np.float32)


def _lists(scores: np.ndarray, users: np.ndarray, items: np.ndarray) -> np.ndarray:
    scores = scores.astype(np.float64).copy()
    scores[users, items] = -np.inf
    return np.argsort(-scores, axis=1, kind="stable")[:, :K]


def _head_share(lists: np.ndarray, freq: np.ndarray) -> float:
    threshold = np.sort(freq)[::-1][N_ITEMS // 10 - 1]  # c = 10% of the catalogue, ties in
    return float(((freq >= threshold) & (freq > 0))[lists].mean())


def _unit(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)


def _check(tmp_path: Path, model: Path, scores: np.ndarray) -> tuple[dict[str, Any], np.ndarray, np.ndarray]:
    users, items, freq = _log()
    pq.write_table(pa.table({"user_id": users, "item_id": items}), tmp_path / "log.parquet")
    lists = _lists(scores, users, items)
    held = lists[np.arange(N_USERS), np.arange(N_USERS) % 3]  # each user's 1st, 2nd or 3rd item
    pq.write_table(pa.table({"user_id": np.arange(N_USERS), "item_id": held}), tmp_path / "hold.parquet")
    out = CliRunner().invoke(cli, ["check", str(model), "--interactions", str(tmp_path / "log.parquet"),
                                   "--holdout", str(tmp_path / "hold.parquet"), "-k", str(K), "-q", "--format",
                                   "json", "--no-probes", "--bootstrap", "0"])
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout), lists, freq


def _assert_served_to_all(report: dict[str, Any], lists: np.ndarray, freq: np.ndarray) -> None:
    retrieval = report["retrieval"]
    assert (retrieval["n_queries"], retrieval["n_zero_queries"]) == (N_USERS, 0)
    assert retrieval["at"][str(K)]["dot"]["head_share_10pct"] == pytest.approx(_head_share(lists, freq), abs=1e-9)
    assert report["accuracy"]["at"][str(K)]["dot"]["hit_rate"] == pytest.approx(1.0)
    groups = retrieval["user_groups"][str(K)]["dot"]
    assert sum(g["n_users"] for g in groups) == sum(g["n_evaluated"] for g in groups) == N_USERS
    mean_gap = sum(g["gap_list"] * g["n_users"] for g in groups) / N_USERS
    assert mean_gap == pytest.approx(freq[lists].mean(axis=1).mean(), rel=1e-6)
    assert not any("score every item 0" in w or "query vectors are zero" in w for w in report["warnings"])


def test_zero_user_rows_of_a_bias_model_are_served_by_the_bias(tmp_path: Path) -> None:
    users, items, bias = _model(_log()[2])
    torch.save({"user_embedding.weight": torch.tensor(users), "item_embedding.weight": torch.tensor(items),
                "item_bias.weight": torch.tensor(bias[:, None])}, tmp_path / "m.pt")
    report, lists, freq = _check(tmp_path, tmp_path / "m.pt", users @ items.T + bias)
    assert _head_share(lists[ZERO], freq) > _head_share(np.delete(lists, ZERO, axis=0), freq)  # the bias's users
    assert report["retrieval"]["at"][str(K)]["dot"]["head_share_10pct"] == pytest.approx(0.195, abs=0.03)
    _assert_served_to_all(report, lists, freq)


def test_zero_user_rows_of_a_cosine_bias_model_are_served_by_the_bias(tmp_path: Path) -> None:
    users, items, bias = _model(_log()[2])
    model = _keras_h5(tmp_path / "m.h5", users, items, bias)
    report, lists, freq = _check(tmp_path, model, _unit(users) @ _unit(items).T + bias)
    assert report["served_vectors"]["score"] == "cos(u,i) + b_i"
    _assert_served_to_all(report, lists, freq)


def test_zero_user_rows_without_a_bias_still_rank_nothing(tmp_path: Path) -> None:
    """Without a bias the served query is the zero row itself: not queried, counted, a miss."""
    users, items, _ = _model(_log()[2])
    torch.save({"user_embedding.weight": torch.tensor(users), "item_embedding.weight": torch.tensor(items)},
               tmp_path / "m.pt")
    report, _, _ = _check(tmp_path, tmp_path / "m.pt", users @ items.T)
    assert (report["retrieval"]["n_queries"], report["retrieval"]["n_zero_queries"]) == (N_USERS - 8, 8)
    assert any(w.startswith("8 of 40 query vectors are zero (they score every item 0)") for w in report["warnings"])
