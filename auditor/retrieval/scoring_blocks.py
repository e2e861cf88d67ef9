"""The kernel of :mod:`auditor.retrieval.scorings`: one query block scanned over one
prepared table shard, every block of inner products ranked under every scoring.

Ranking scores
--------------
Per query, ``|q|^a |k|^a cos(q, k)`` ranks like ``s_a = (q . k) * w_a(k)`` with
``w_a(k) = |k|^(a - 1)`` (1 for dot), so one block of inner products serves every
scoring: the exact ``s_a`` is computed (in float64 from the float32 inner product,
rounded once to float32) only for the few candidates that pass one vectorised test.

Keys
----
A (float32 score, table row) pair is packed into one uint64 whose order is the top-K
contract of :func:`~auditor.retrieval.search.select_topk`: the score's order-preserving
bit pattern in the high half, ``2**32 - 1 - row`` in the low half, so a larger key is a
higher score, then a lower row; key 0 sorts below every real pair and marks an empty
slot. Ties are thereby settled by row whatever order the rows are scanned in.

Candidates
----------
Each query keeps, per scoring, a buffer of :func:`buffer_capacity` keys and a *floor*:
the K-th best score at the buffer's last compaction (-inf before K are known).
Floors only rise, so each is a safe lower bound of the final K-th score (a scan may
start from floors seeded by a sample of rows, :class:`~auditor.retrieval.one_tile.FloorSeed`). Inside a tile
of rows sorted by decreasing norm, ``w_a`` lies in ``[w_min, w_max]``, so no row can
reach a floor ``f`` unless its inner product is at least ``f / w_max`` (``f >= 0``)
or ``f / w_min`` (``f < 0``); the smallest of those over the scorings, rounded down,
is one threshold per query. The maxima of the tile's :data:`SEGMENT`-column segments
are tested against it first, only the segments that pass are compared entry by entry,
and only the entries that pass are scored exactly, a few tiles' worth at a time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

ROW_LIMIT = (1 << 32) - 2
"""Largest table row a key can hold."""
_LOW = np.uint64((1 << 32) - 1)
_SIGN = np.uint32(1 << 31)
CAPACITY_EXTRA = 64
"""Slots beyond K in each query's buffer: a compaction (a partition of the buffer) every
at most this many candidates keeps the floors fresh (fewer candidates pass); K + 64 ran
19% faster than 2K + 32 (200k x 64, 1k queries, K=100, five scorings, one core)."""


def buffer_capacity(k: int) -> int:
    """Keys each query's buffer holds per scoring."""
    return k + CAPACITY_EXTRA


SEGMENT = 128
"""Columns per segment of a score tile whose maximum is tested before its entries are."""
FLUSH_PER_QUERY = 8
"""Candidates are ranked once there are this many per query of the block (or at the end)."""
BOUND_MARGIN = 2.0**-20
"""Relative slack of the inner-product threshold: covers the float32 rounding of a score."""


def encode(scores: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """uint64 keys of float32 ``scores`` and table ``rows`` (see the module notes)."""
    bits = (np.asarray(scores, dtype=np.float32) + np.float32(0.0)).view(np.uint32)  # -0.0 -> +0.0
    # In place, on the fresh copy: negative scores get every bit flipped, the others the sign bit.
    bits ^= (bits.view(np.int32) >> 31).view(np.uint32) | _SIGN
    ordinal = bits.astype(np.uint64)
    ordinal <<= np.uint64(32)
    ordinal |= _LOW - rows.astype(np.uint64)
    return ordinal


def decode(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(float32 scores, int64 rows) of ``keys``; empty keys give -inf and -1."""
    ordinal = (keys >> np.uint64(32)).astype(np.uint32)
    bits = np.where(ordinal & _SIGN, ordinal & ~_SIGN, ~ordinal)
    scores = bits.view(np.float32).copy()
    rows = (_LOW - (keys & _LOW)).astype(np.int64)
    empty = keys == 0
    scores[empty] = -np.inf
    rows[empty] = -1
    return scores, rows


def floor_scores(keys: np.ndarray) -> np.ndarray:
    """Scores of ``keys`` as floors: -inf for an empty key (fewer than K known)."""
    return decode(keys)[0]


class TopKBuffer:
    """One scoring's running top-K of a block of queries (views into the call's arrays)."""

    def __init__(self, keys: np.ndarray, fill: np.ndarray, floor: np.ndarray, k: int) -> None:
        self.keys, self.fill, self.floor, self.k = keys, fill, floor, k

    def insert(self, query: np.ndarray, keys: np.ndarray) -> None:
        """Add candidate ``keys`` of block-local queries ``query`` (ascending); queries
        whose buffer would overflow are compacted to their K best, raising their floor."""
        if query.size == 0:
            return
        n, capacity = self.keys.shape
        counts = np.bincount(query, minlength=n)
        group_start = np.cumsum(counts) - counts
        slot = self.fill[query] + (np.arange(query.size) - group_start[query])
        over = counts > capacity - self.fill
        fits = ~over[query]
        self.keys[query[fits], slot[fits]] = keys[fits]
        if not over.any():
            self.fill += counts
            return
        self.fill += np.where(over, 0, counts)
        crowded = np.flatnonzero(over)
        width = max(int((self.fill[crowded] + counts[crowded]).max()), self.k)
        merged = np.zeros((crowded.size, width), dtype=np.uint64)
        merged[:, :capacity] = self.keys[crowded]
        late = ~fits
        merged[np.searchsorted(crowded, query[late]), slot[late]] = keys[late]
        best = np.partition(merged, width - self.k, axis=1)[:, width - self.k :]
        self.keys[crowded] = 0
        self.keys[crowded, : self.k] = best
        self.fill[crowded] = self.k
        self.floor[crowded] = floor_scores(best.min(axis=1))


@dataclass(frozen=True)
class PreparedShard:
    """Table rows ready to scan: non-zero rows by decreasing norm, with their weights."""

    blocks: list[torch.Tensor]
    """Per tile, its vectors transposed: (dim, tile rows) float32, contiguous; the rows
    by decreasing norm (ties: lower row first) across the tiles."""
    rows: np.ndarray
    """int64 table row of each vector."""
    weights: np.ndarray
    """(scorings, rows) float64: ``|k|^(a - 1)`` of each vector under each scoring."""
    tiles: list[tuple[int, int]]
    """[start, stop) positions of the tiles scanned one after the other."""
    w_min: np.ndarray
    w_max: np.ndarray
    """(scorings, tiles): the weights' range inside each tile."""
    position: np.ndarray
    """Position of each shard row in the tiles' order (-1: a zero row)."""
    zero_rows: np.ndarray
    """Table rows of the shard's zero vectors, ascending."""
    zero_served: tuple[bool, ...]
    """Per scoring: whether zero vectors compete (score 0, a > 0) or are never served (a = 0)."""
    start: int
    """Table row of the shard's first row."""


@dataclass(frozen=True)
class BlockExclusions:
    """One query block's excluded rows inside one shard."""

    query: np.ndarray
    """Block-local query of each excluded vector, ordered by ``position``."""
    position: np.ndarray
    """Position in the shard's tile order (:attr:`PreparedShard.position`), ascending."""
    zero_codes: np.ndarray
    """Sorted ``query * shard_rows + local row`` of excluded zero vectors."""


def block_exclusions(
    shard: PreparedShard, q0: int, q1: int, exclude: tuple[np.ndarray, np.ndarray] | None
) -> BlockExclusions | None:
    """The excluded rows of queries [q0, q1) that fall inside ``shard``."""
    if exclude is None:
        return None
    indptr, rows = exclude
    lo, hi = int(indptr[q0]), int(indptr[q1])
    local = rows[lo:hi] - shard.start
    query = np.repeat(np.arange(q1 - q0, dtype=np.int64), np.diff(indptr[q0 : q1 + 1]))
    inside = (local >= 0) & (local < shard.position.size)
    local, query = local[inside], query[inside]
    position = shard.position[local]
    vector = position >= 0
    order = np.argsort(position[vector], kind="stable")
    zero_codes = np.sort(query[~vector] * shard.position.size + local[~vector])
    return BlockExclusions(query[vector][order], position[vector][order], zero_codes)


def dot_threshold(floors: np.ndarray, w_min: np.ndarray, w_max: np.ndarray) -> np.ndarray:
    """Per query (columns of ``floors``, one row per scoring), the smallest inner product
    that can reach any scoring's floor inside a tile of weights [w_min, w_max], rounded
    down to float32."""
    f = floors.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        bound = np.where(
            f >= 0, f / w_max[:, None] * (1 - BOUND_MARGIN), f / w_min[:, None] * (1 + BOUND_MARGIN)
        )
    bound = np.where(np.isnan(f), -np.inf, bound).min(axis=0)
    return np.nextafter(bound.astype(np.float32), np.float32(-np.inf))


def scan_block(
    queries: torch.Tensor,
    shard: PreparedShard,
    buffers: list[TopKBuffer],
    exclusions: BlockExclusions | None,
    scratch: torch.Tensor,
) -> None:
    """Rank every row of ``shard`` for one block of queries under every scoring."""
    n = queries.shape[0]
    floors = np.stack([b.floor for b in buffers])
    pending: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    n_pending = 0
    for t, (t0, t1) in enumerate(shard.tiles):
        scores = scratch[: n * (t1 - t0)].view(n, t1 - t0)
        torch.mm(queries, shard.blocks[t], out=scores)  # on the device the tensors live on
        if exclusions is not None:
            lo, hi = np.searchsorted(exclusions.position, (t0, t1))
            if hi > lo:
                exclude_entries(scores, exclusions.query[lo:hi], exclusions.position[lo:hi] - t0)
        threshold = torch.from_numpy(dot_threshold(floors, shard.w_min[:, t], shard.w_max[:, t])).to(scores.device)
        seg = SEGMENT if (t1 - t0) % SEGMENT == 0 else t1 - t0
        segments = scores.view(n, (t1 - t0) // seg, seg)
        query, segment, column, dots = passing_entries(segments, threshold)
        if query.size == 0:
            continue
        pending.append((query, segment * seg + column + t0, dots))
        n_pending += query.size
        # Few candidates per tile once the floors have risen: rank several tiles' at once.
        if n_pending >= FLUSH_PER_QUERY * n:
            _offer(buffers, floors, pending, shard)
            floors = np.stack([b.floor for b in buffers])
            pending, n_pending = [], 0
    if pending:
        _offer(buffers, floors, pending, shard)
    offer_zero_rows(buffers, shard, exclusions)


def passing_entries(
    segments: torch.Tensor, threshold: torch.Tensor, host: bool | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(query, segment, column, inner product) of the entries of a score tile (viewed
    as segments) that reach their query's threshold, on the host, where they are ranked
    exactly. Segment maxima first: most segments hold no candidate and are never read
    again. On the CPU (``host``, by default) numpy finds and gathers them (faster than
    torch's nonzero); elsewhere torch does, on the device."""
    passed = torch.amax(segments, dim=2) >= threshold[:, None]
    if segments.device.type == "cpu" if host is None else host:
        query, segment = np.nonzero(passed.numpy())
        chosen = segments.numpy()[query, segment]
        flat = np.flatnonzero(chosen >= threshold.numpy()[query, None])
        pick = flat // chosen.shape[1]
        return query[pick], segment[pick], flat - pick * chosen.shape[1], chosen.ravel()[flat]
    query_t, segment_t = torch.nonzero(passed, as_tuple=True)
    chosen_t = segments[query_t, segment_t]
    pick_t, column_t = torch.nonzero(chosen_t >= threshold[query_t][:, None], as_tuple=True)
    query, segment = query_t[pick_t].cpu().numpy(), segment_t[pick_t].cpu().numpy()
    return query, segment, column_t.cpu().numpy(), chosen_t[pick_t, column_t].cpu().numpy()


def exclude_entries(scores: torch.Tensor, query: np.ndarray, column: np.ndarray) -> None:
    """Set the (query, column) entries of a score tile to -inf: through numpy on the CPU,
    by index tensors on another device."""
    if scores.device.type == "cpu":
        scores.numpy()[query, column] = -np.inf
    else:
        index = (torch.from_numpy(query).to(scores.device), torch.from_numpy(column).to(scores.device))
        scores.index_put_(index, torch.tensor(-np.inf, dtype=scores.dtype, device=scores.device))


def _offer(
    buffers: list[TopKBuffer],
    floors: np.ndarray,
    pending: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
    shard: PreparedShard,
) -> None:
    """Exact keys of the candidates (query, position, inner product) under every scoring;
    those reaching the scoring's floor go into its buffer."""
    if len(pending) == 1:
        query, position, dots = pending[0]
    else:
        order = np.argsort(np.concatenate([p[0] for p in pending]), kind="stable")  # merges sorted runs
        query, position, dots = (np.concatenate([p[i] for p in pending])[order] for i in range(3))
    products = dots.astype(np.float64)
    rows = shard.rows[position]
    for a, buffer in enumerate(buffers):
        scores = (products * shard.weights[a, position]).astype(np.float32)
        keep = np.flatnonzero((scores >= floors[a, query]) & (scores > -np.inf))
        buffer.insert(query[keep], encode(scores[keep], rows[keep]))  # only the kept are packed


def offer_zero_rows(buffers: list[TopKBuffer], shard: PreparedShard, exclusions: BlockExclusions | None) -> None:
    """Zero vectors score 0 under every scoring with a > 0 (the limit of |k|^a as |k|
    -> 0) and are never served by cosine (no direction). Per query only the lowest K
    rows it does not exclude can matter, and only while its floor is at most 0."""
    zero_buffers = [b for b, served in zip(buffers, shard.zero_served) if served]
    if shard.zero_rows.size == 0 or not zero_buffers:
        return
    open_floor = np.zeros(buffers[0].floor.size, dtype=bool)
    for buffer in zero_buffers:
        open_floor |= buffer.floor <= 0
    if not open_floor.any():
        return
    width = shard.position.size
    zero_codes = exclusions.zero_codes if exclusions is not None else np.empty(0, dtype=np.int64)
    excluded = np.bincount(zero_codes // width, minlength=open_floor.size) if zero_codes.size else open_floor * 0
    depth = min(shard.zero_rows.size, buffers[0].k + int(excluded.max(initial=0)))
    candidates = np.flatnonzero(open_floor)
    query = np.repeat(candidates, depth)
    row = np.tile(shard.zero_rows[:depth], candidates.size)
    if zero_codes.size:
        codes = query * width + (row - shard.start)
        at = np.minimum(np.searchsorted(zero_codes, codes), zero_codes.size - 1)
        kept = zero_codes[at] != codes
        query, row = query[kept], row[kept]
    keys = encode(np.zeros(row.size, dtype=np.float32), row)
    for buffer in zero_buffers:
        keep = buffer.floor[query] <= 0
        buffer.insert(query[keep], keys[keep])
