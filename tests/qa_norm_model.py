"""The QA's 200-user x 300-item model whose item norms grow with training popularity
(0.5 + sqrt(count)), its Zipf training log and a holdout drawn from popularity and each
user's affinity: model.pt (user and item tables), items.npy (the item table alone),
train.parquet and hold.parquet. Shared by the mitigate-output and history-query advice tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch


def write_norm_model(folder: Path) -> None:
    """The four files in ``folder``, the same on every call (seed 0)."""
    rng = np.random.default_rng(0)
    n_users, n_items, dim = 200, 300, 16
    weights = 1.0 / np.arange(1, n_items + 1)
    weights /= weights.sum()
    train = np.array([(u, int(i)) for u in range(n_users)
                      for i in rng.choice(n_items, size=rng.integers(5, 20), replace=False, p=weights)])
    counts = np.bincount(train[:, 1], minlength=n_items)
    directions = rng.normal(size=(n_items, dim))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    items = (directions * (0.5 + np.sqrt(counts))[:, None]).astype(np.float32)
    users = rng.normal(size=(n_users, dim)).astype(np.float32)
    held = []
    for u in range(n_users):
        score = users[u] @ items.T
        p = np.exp(score / score.std())
        held += [(u, int(i)) for i in rng.choice(n_items, size=rng.integers(1, 5), replace=False, p=p / p.sum())]
    hold = np.array(held)
    torch.save({"user_embedding.weight": torch.tensor(users), "item_embedding.weight": torch.tensor(items)},
               folder / "model.pt")
    np.save(folder / "items.npy", items)
    pq.write_table(pa.table({"user_id": train[:, 0], "item_id": train[:, 1]}), folder / "train.parquet")
    pq.write_table(pa.table({"user_id": hold[:, 0], "item_id": hold[:, 1]}), folder / "hold.parquet")
