"""The small table the gate tests audit: 60 items whose norms follow popularity exactly
(ρ = 1), written beside their training log."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def write_popular_table(folder: Path) -> None:
    """``items.npy`` (60 × 8, norm of item i = (i + 1) ** 0.25) and ``log.parquet`` (item i
    trained i + 1 times, by 40 users)."""
    rng = np.random.default_rng(0)
    freqs = np.arange(1, 61)
    directions = rng.normal(size=(60, 8))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    np.save(folder / "items.npy", (directions * freqs[:, None] ** 0.25).astype(np.float32))
    items = np.repeat(np.arange(60), freqs)
    pq.write_table(pa.table({"user_id": rng.integers(0, 40, items.size), "item_id": items}), folder / "log.parquet")
