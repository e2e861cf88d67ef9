"""The loaders QA's small world (round 12): 40 users with 8 distinct training items each out of
60 (Zipf 1.1, seed 0), an item table whose norms grow with log1p of the frequency, a user
table and an item bias that follows the frequency, shared by the tests of recorded configs
and of shifted stored user ids."""

from __future__ import annotations

import numpy as np

N_USERS, N_ITEMS, DIM, K = 40, 60, 8, 10


def loader_world() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(log users, log items, item frequencies, user table, item table, item bias)."""
    g = np.random.default_rng(0)
    p = 1.0 / np.arange(1, N_ITEMS + 1) ** 1.1
    p /= p.sum()
    items = np.concatenate([g.choice(N_ITEMS, size=8, replace=False, p=p) for _ in range(N_USERS)])
    users = np.repeat(np.arange(N_USERS), 8)
    freq = np.bincount(items, minlength=N_ITEMS)
    item_table = (g.normal(size=(N_ITEMS, DIM)) * (0.3 + np.log1p(freq))[:, None]).astype(np.float32)
    user_table = g.normal(size=(N_USERS, DIM)).astype(np.float32)
    bias = (8 * (0.2 * np.log1p(freq) + 0.05 * g.normal(size=N_ITEMS))).astype(np.float32)
    return users, items, freq, user_table, item_table, bias
