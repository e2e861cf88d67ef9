"""A training log shared by the served-lists group tests: 20 users over 30 items, half of
them drawing from a Zipf-like popularity and half uniformly (distinct popular ratios), every
item trained so that the catalogue is the 30 items."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

N_ITEMS, N_USERS = 30, 20


def served_groups_log(tmp_path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Writes ``log.parquet`` in ``tmp_path``; returns its (users, items)."""
    rng = np.random.default_rng(11)
    weights = 1.0 / np.arange(1, N_ITEMS + 1)
    users, items = [], []
    for u in range(N_USERS):
        p = np.ones(N_ITEMS) / N_ITEMS if u % 2 else weights / weights.sum()
        chosen = rng.choice(N_ITEMS, size=int(rng.integers(3, 9)), replace=False, p=p)
        users += [u] * chosen.size
        items += chosen.tolist()
    missing = sorted(set(range(N_ITEMS)) - set(items))  # every item trained: the catalogue is the 30 items
    users += [N_USERS - 1] * len(missing)
    items += missing
    pq.write_table(pa.table({"user_id": users, "item_id": items}), tmp_path / "log.parquet")
    return np.asarray(users), np.asarray(items)
