"""The exact scan on an accelerator (``--device cuda``): every score tile is scored
under every scoring and reduced to each query's K best keys on the device; only those
K keys per query and scoring come back to the host.

The CPU's scan (:func:`~auditor.retrieval.scoring_blocks.scan_block`) prunes each tile
by per-query thresholds and ranks the few passing entries on the host. On a GPU that
host work, one small tile at a time, cost more than the inner products saved: at
1,000,000 x 64 rows and 10,000 queries it ran 1.2x slower than 16 CPU cores. Here the
device does all of it, in large tiles sized to its free memory:

* each entry's exact score is the CPU's arithmetic: the float32 inner product times
  the row's float64 weight ``|k|^(a - 1)``, rounded once to float32 (dot: the inner
  product itself, its weight being exactly 1);
* scores and rows are packed into the host's keys
  (:func:`~auditor.retrieval.scoring_blocks.encode`) with the top bit flipped, so that
  they order as signed int64 (torch has no unsigned 64-bit ``topk``): a running
  ``topk`` of keys keeps the contract's order, ties by lower row, whatever the tiles;
* excluded entries are -inf before scoring and dropped on the host.

Lists therefore equal the CPU's except where the device's float32 inner product rounds
differently from the CPU's (near-ties).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from auditor.retrieval.scoring_blocks import (
    SEGMENT,
    BlockExclusions,
    PreparedShard,
    TopKBuffer,
    decode,
    exclude_entries,
    offer_zero_rows,
)

TOP_BIT = np.uint64(1 << 63)
"""Host key = device key with this bit flipped (the device's keys are signed)."""
ENTRY_BYTES = 48
"""Device memory per score-tile entry held at once (inner product, float64 product,
score, key and torch's top-K workspace), with slack."""
MAX_ENTRIES = 1 << 28
"""Most entries of one score tile (4,096 queries x 65,536 rows)."""
HOST_ENTRIES = 1 << 20
"""Entries of one score tile when the device is torch's CPU (the tests: several tiles)."""
MAX_QUERY_BLOCK = 4096
"""Most queries per device block."""


@dataclass(frozen=True)
class DeviceShard:
    """A :class:`PreparedShard`'s vectors, weights and rows on the device."""

    host: PreparedShard
    """The shard on the host, without its tiles (positions, zero rows)."""
    blocks: list[torch.Tensor]
    """Per tile, (dim, tile rows) float32."""
    weights: torch.Tensor
    """(scorings, positions) float64."""
    unit: tuple[bool, ...]
    """Per scoring: every weight is 1 (dot), so its score is the inner product."""
    low: torch.Tensor
    """(positions,) int64: the keys' low half, ``2**32 - 1 - table row``."""
    tiles: list[tuple[int, int]]


def to_device(shard: PreparedShard, device: str) -> DeviceShard:
    """``shard`` moved to ``device`` (the table's tiles, weights and rows, once)."""
    low = (np.int64((1 << 32) - 1) - shard.rows).astype(np.int64)
    return DeviceShard(
        host=replace(shard, blocks=[]),
        blocks=[block.to(device) for block in shard.blocks],
        weights=torch.from_numpy(shard.weights).to(device),
        unit=tuple(bool(np.all(w == 1.0)) for w in shard.weights),
        low=torch.from_numpy(low).to(device),
        tiles=shard.tiles,
    )


def device_blocks(device: str, n_queries: int) -> tuple[int, int]:
    """(query block, item block) for ``device``: tiles as large as a sixth of its free
    memory allows (:data:`ENTRY_BYTES` each), at most :data:`MAX_ENTRIES` entries (on
    torch's CPU, where only the tests run this scan, :data:`HOST_ENTRIES`)."""
    entries = HOST_ENTRIES
    if torch.device(device).type == "cuda":
        entries = MAX_ENTRIES
        free, _ = torch.cuda.mem_get_info(torch.device(device))
        entries = max(SEGMENT * 64, min(entries, free // (6 * ENTRY_BYTES)))
    query_block = max(1, min(MAX_QUERY_BLOCK, n_queries, entries // SEGMENT))
    item_block = SEGMENT
    while item_block * 2 * query_block <= entries:
        item_block *= 2
    return query_block, item_block


def device_keys(scores: torch.Tensor, low: torch.Tensor) -> torch.Tensor:
    """Signed int64 keys of float32 ``scores`` (queries x rows) and the rows' low
    halves: the host's key minus ``2**63``, so the same order."""
    bits = scores.add_(0.0).view(torch.int32)  # -0.0 -> +0.0, as the host does
    ordinal = bits >> 31  # all ones for a negative score: its magnitude bits flip
    ordinal &= 0x7FFFFFFF
    ordinal ^= bits
    keys = ordinal.to(torch.int64)
    keys *= 1 << 32
    keys += low
    return keys


def scan_on_device(
    queries: torch.Tensor,
    shard: DeviceShard,
    buffers: list[TopKBuffer],
    exclusions: BlockExclusions | None,
    k: int,
) -> None:
    """Rank every row of ``shard`` for one block of queries (on the shard's device)
    under every scoring; each scoring's K best keys go into its buffer."""
    best: list[torch.Tensor | None] = [None] * len(buffers)
    for t, (t0, t1) in enumerate(shard.tiles):
        dots = queries @ shard.blocks[t]
        if exclusions is not None:
            lo, hi = np.searchsorted(exclusions.position, (t0, t1))
            if hi > lo:
                exclude_entries(dots, exclusions.query[lo:hi], exclusions.position[lo:hi] - t0)
        for a in range(len(buffers)):
            if shard.unit[a]:
                scores = dots.clone()
            else:
                product = dots.double()
                scores = product.mul_(shard.weights[a, t0:t1]).float()
                del product  # before the keys: the tile's largest buffer
            keys = device_keys(scores, shard.low[t0:t1])
            tile_best = torch.topk(keys, min(k, t1 - t0), dim=1, sorted=False).values
            held = best[a]
            merged = tile_best if held is None else torch.cat([held, tile_best], dim=1)
            best[a] = torch.topk(merged, min(k, merged.shape[1]), dim=1, sorted=False).values
    for buffer, found in zip(buffers, best):
        if found is not None:
            _insert_best(buffer, found.cpu().numpy(), k)
    offer_zero_rows(buffers, shard.host, exclusions)


def _insert_best(buffer: TopKBuffer, device_best: np.ndarray, k: int) -> None:
    """Put one scoring's K best device keys per query into its buffer (scores of -inf,
    excluded entries, dropped) and raise the floors of the queries that now know K."""
    keys = device_best.view(np.uint64) ^ TOP_BIT
    scores, _ = decode(keys)
    query, slot = np.nonzero(scores > -np.inf)
    buffer.insert(query, keys[query, slot])
    if keys.shape[1] == k:  # a query with K scores knows a K-th best: a floor for zero rows
        known = np.all(scores > -np.inf, axis=1)
        buffer.floor[known] = np.maximum(buffer.floor[known], scores[known].min(axis=1))
