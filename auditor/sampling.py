"""The one seeded sample every sampler of popaudit draws (queries, recall checks, users)."""

from __future__ import annotations

import numpy as np


def sample_indices(n: int, max_n: int | None, seed: int) -> np.ndarray | None:
    """Sorted seeded sample of ``max_n`` of ``n`` indices without replacement; None: keep all."""
    if max_n is None or n <= max_n:
        return None
    return np.sort(np.random.default_rng(seed).choice(n, size=max_n, replace=False))
