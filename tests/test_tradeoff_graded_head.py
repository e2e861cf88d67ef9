"""The accuracy trade-off judges the head that graded the severity (QA measures F3): where
the top 10% graded it, a change that cuts their share by 4 points with an interval clear of
0 is recommended; judged on the top 1% (one item most users trained on, 1.14% under every
scoring) it read "no serving change is clearly better"."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from auditor.audit import run_audit
from auditor.config import AuditConfig
from auditor.report import accuracy as accuracy_view


def _model(folder: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The QA's 60-item model: Zipf-like training (35 of 40 users), 2 held-out items each,
    item norms growing with log frequency."""
    n_items, n_users, rng = 60, 40, np.random.default_rng(0)
    p = 1.0 / np.arange(1, n_items + 1) ** 1.1
    p /= p.sum()
    train = [(u, int(i)) for u in range(n_users - 5)
             for i in rng.choice(n_items, size=rng.integers(3, 10), replace=False, p=p)]
    pairs = np.array(train)
    held = []
    for u in range(n_users - 5):
        seen = set(pairs[pairs[:, 0] == u, 1])
        cand = [i for i in range(n_items) if i not in seen]
        weights = np.array([p[c] for c in cand])
        held += [(u, int(i)) for i in rng.choice(cand, size=2, replace=False, p=weights / weights.sum())]
    freq = np.bincount(pairs[:, 1], minlength=n_items)
    items = rng.normal(size=(n_items, 8))
    items = items / np.linalg.norm(items, axis=1, keepdims=True) * (
        0.5 + 0.3 * np.log1p(freq) + rng.uniform(0, 0.3, n_items))[:, None]
    users = rng.normal(size=(n_users, 8))
    torch.save({"user_embedding.weight": torch.tensor(users, dtype=torch.float32),
                "item_embedding.weight": torch.tensor(items, dtype=torch.float32)}, folder / "model.pt")
    for name, rows in (("train", pairs), ("test", np.array(held))):
        pq.write_table(pa.table({"user_id": rows[:, 0], "item_id": rows[:, 1]}), folder / f"{name}.parquet")
    return users.astype(np.float32).astype(np.float64), items.astype(np.float32).astype(np.float64), pairs


def _head_share(users: np.ndarray, items: np.ndarray, pairs: np.ndarray, alpha: float, percent: int) -> float:
    """The top-``percent``% head's share of the top-5 slots, each training user's items excluded."""
    queried = np.unique(pairs[:, 0])
    norms = np.linalg.norm(items, axis=1)
    scores = (users[queried] @ items.T) * norms ** (alpha - 1)
    for j, u in enumerate(queried):
        scores[j, pairs[pairs[:, 0] == u, 1]] = -np.inf
    top = np.argsort(-scores, axis=1, kind="stable")[:, :5]
    freq = np.bincount(pairs[:, 1], minlength=items.shape[0])
    cut = np.sort(freq)[::-1][max(1, math.floor(percent / 100 * freq.size)) - 1]
    return float(((freq >= cut) & (freq > 0))[top].mean())


def test_the_tradeoff_judges_the_top_10_percent_where_they_graded_the_severity(tmp_path: Path) -> None:
    users, items, pairs = _model(tmp_path)
    result = run_audit(AuditConfig(model=tmp_path / "model.pt", interactions=tmp_path / "train.parquet",
                                   holdout=tmp_path / "test.parquet", ks=(5,), seed=1, probes=False))
    assert result.verdict.severity == "moderate" and result.verdict.graded_head == 10
    accuracy = result.accuracy
    assert accuracy is not None and accuracy.head_percent == 10
    dot, alpha = _head_share(users, items, pairs, 1.0, 10), _head_share(users, items, pairs, 0.5, 10)
    assert round(dot, 4) == 0.1371 and round(alpha, 4) == 0.0971  # the QA's numpy figures
    # The top 1% cannot move: one item, at 1.14% under every scoring.
    assert _head_share(users, items, pairs, 1.0, 1) == _head_share(users, items, pairs, 0.5, 1)
    change = accuracy.changes["alpha_0.5"]
    assert math.isclose(change.head_share_delta, alpha - dot, rel_tol=1e-9)
    assert change.head_share_delta_ci is not None and change.head_share_delta_ci[1] < 0  # QA: [-6.86, -1.14] points
    assert accuracy.recommended == "alpha_0.5"  # was dot: "no serving change is clearly better"
    assert "the top-10% head share (the head that graded the severity) goes from 13.7% to 9.7%" in (
        accuracy.recommendation)
    table = accuracy_view.tradeoff_table(result, 5)
    assert "head share 10%" in table.headers
    assert result.to_dict()["accuracy"]["head_percent"] == 10
