"""Table shards ready for :func:`~auditor.retrieval.scorings.multi_scoring_topk`'s scan:
row ranges that fit the memory ceiling, their non-zero rows in decreasing norm, cut into
tiles that start small and double (the floors are unknown at first)."""

from __future__ import annotations

from concurrent.futures import Executor

import numpy as np
import torch

from auditor.alpha import norm_weights
from auditor.memory import MIN_BLOCK_ROWS, memory_budget
from auditor.retrieval.scoring_blocks import SEGMENT, PreparedShard, buffer_capacity

FIRST_TILE = 256
"""Rows of a shard's first tile; tiles then double up to :data:`ITEM_BLOCK` (the floors
are unknown at first, so the first tiles are small to keep their candidates few)."""

def shard_bounds(m: int, dim: int, max_memory: int | None) -> list[tuple[int, int]]:
    """Row ranges read at once: the whole table, or shards that fit the memory ceiling
    twice (the rows as read, and their copy in norm order)."""
    budget = memory_budget(max_memory)
    rows = m
    if budget is not None and 2 * m * dim * 4 > budget:
        rows = max(MIN_BLOCK_ROWS, budget // (2 * 4 * max(dim, 1)))
    return [(s, min(s + rows, m)) for s in range(0, m, max(rows, 1))]


def prepare_shard(
    table: np.ndarray,
    start: int,
    stop: int,
    norms: np.ndarray,
    alphas: tuple[float, ...],
    shift: int,
    item_block: int,
    k: int,
    pool: Executor | None = None,
) -> PreparedShard:
    """Rows [start, stop) of ``table`` ready to scan: non-zero rows in decreasing norm
    (ties by row), divided by ``2**shift``, with their weights and tiles (gathered on
    ``pool``'s threads when given)."""
    local = norms[start:stop]
    order = np.argsort(-local, kind="stable")
    vector_local = order[local[order] > 0]  # NaN rows drop out here too
    rows = np.asarray(table[start:stop], dtype=np.float32)
    tiles = _tiles(vector_local.size, item_block, k)
    gather = pool.map if pool is not None else map
    blocks = [torch.from_numpy(b) for b in gather(lambda t: _tile_block(rows, vector_local[t[0] : t[1]], shift), tiles)]
    sorted_norms = np.ldexp(local[vector_local], -shift)
    weights = np.stack([norm_weights(sorted_norms, a) for a in alphas]) if vector_local.size else np.zeros(
        (len(alphas), 0)
    )
    starts = [t0 for t0, _ in tiles]
    if tiles:
        w_min, w_max = np.minimum.reduceat(weights, starts, axis=1), np.maximum.reduceat(weights, starts, axis=1)
    else:
        w_min = w_max = np.zeros((len(alphas), 0))
    position = np.full(stop - start, -1, dtype=np.int64)
    position[vector_local] = np.arange(vector_local.size)
    return PreparedShard(
        blocks=blocks,
        rows=vector_local.astype(np.int64) + start,
        weights=weights,
        tiles=tiles,
        w_min=w_min,
        w_max=w_max,
        position=position,
        zero_rows=np.flatnonzero(local == 0).astype(np.int64) + start,
        zero_served=tuple(a > 0 for a in alphas),
        start=start,
    )


def _tile_block(rows: np.ndarray, picked: np.ndarray, shift: int) -> np.ndarray:
    """The ``picked`` rows transposed, contiguous, divided by ``2**shift`` (exact)."""
    block = np.ascontiguousarray(rows[picked].T)
    return np.ldexp(block, np.int32(-shift)).astype(np.float32) if shift else block


def _tiles(n_rows: int, item_block: int, k: int) -> list[tuple[int, int]]:
    """Tile bounds: :data:`FIRST_TILE` rows (at least the buffer's capacity), doubling
    up to ``item_block``."""
    first = max(FIRST_TILE, buffer_capacity(k) + 1)
    size = min(item_block, -(-first // SEGMENT) * SEGMENT)  # whole segments
    tiles, start = [], 0
    while start < n_rows:
        tiles.append((start, min(start + size, n_rows)))
        start += size
        size = min(item_block, 2 * size)
    return tiles
