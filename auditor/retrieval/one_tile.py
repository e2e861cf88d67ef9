"""The kernel of :mod:`auditor.retrieval.scorings` for a table that fits in one score tile.

A small table (an ML-100K-size model: 1,682 items) gives the tiled scan nothing to prune:
K is a large share of the rows, every scoring's floor is unknown until the only tile is
read, and most inner products would pass through the candidate buffers one by one. Here
each block of queries gets its whole row of inner products at once (one sgemm), and each
scoring selects its K best from that dense block:

1. a float32 estimate ``A = (q . k) * float32(w_a(k))`` of every score (one multiply);
2. per query, the K-th largest estimate ``v`` (a partial sort of the values);
3. candidates: the entries with ``A >= v`` less a relative margin that covers the
   estimate's rounding (``A`` and the exact score differ by a few float32 ulps), so
   every entry whose exact score reaches the K-th exact score is among them;
4. the candidates' exact scores, ``(q . k) * w_a(k)`` in float64 rounded once to float32
   (the tiled scan's definition, so both kernels give the same scores), packed into the
   contract-ordered keys of :mod:`~auditor.retrieval.scoring_blocks` and sorted per query.

Rows in table order; zero vectors score 0 where a > 0 and are never served by cosine;
rows with a NaN norm are never served; excluded rows are set to -inf before selection.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor, as_completed

import numpy as np
import torch

from auditor.alpha import norm_weights
from auditor.retrieval.scoring_blocks import decode, encode

MARGIN = 2.0**-19
"""Relative slack under the K-th estimate: the float32 estimate and the exact score each
lie within 2**-22 of the float64 product, so 2**-19 is safe with room to spare."""
SLACK = 2.0**-120
"""Absolute slack under the K-th estimate: covers the rounding of subnormal products."""
_LOWEST = np.float32(np.finfo(np.float32).min)


class OneTile:
    """A whole (small) table ready to score: its rows transposed, the weights of every
    scoring, and the rows each scoring never serves."""

    def __init__(self, table: np.ndarray, norms: np.ndarray, alphas: tuple[float, ...], shift: int) -> None:
        rows = np.asarray(table, dtype=np.float32)
        if shift:
            rows = np.ldexp(rows, np.int32(-shift)).astype(np.float32)
        self.block = torch.from_numpy(np.ascontiguousarray(rows.T))
        self.m = rows.shape[0]
        scaled = np.ldexp(norms, -shift)
        zero, invalid = scaled == 0, ~np.isfinite(scaled)
        self.invalid = np.flatnonzero(invalid)  # NaN or inf entries: never served
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            weights = np.stack([norm_weights(np.where(zero | invalid, 1.0, scaled), a) for a in alphas])
        # A zero vector's inner products are 0: weight 1 scores it 0 (a > 0; cosine never serves it).
        weights[:, zero] = 1.0
        self.weights = weights
        with np.errstate(over="ignore"):
            self.estimate_weights = weights.astype(np.float32)
        # The estimates' margin holds for normal float32 weights (a table of norms beyond
        # about 2**126 is left to the tiled scan).
        magnitude = np.abs(self.estimate_weights)
        self.fits = bool(np.all((magnitude >= np.finfo(np.float32).tiny) & np.isfinite(magnitude)))
        self.never = [np.flatnonzero(zero) if a == 0.0 else np.empty(0, dtype=np.int64) for a in alphas]
        self.dot_only = [a == 1.0 for a in alphas]


ONE_TILE_ROWS = 16_384
"""Tables of up to this many rows are ranked densely by default: one score tile per query
block, nothing pruned. Below about 20,000 rows that beats the tiled scan, whose pruning
pays only on larger tables (7,487 queries, K=100, five scorings, two cores, CPU time:
4,096 rows 0.84 s against 1.85 s tiled, 10,000 rows 1.49 s against 2.33 s; 3,000
queries: 20,000 rows 1.24 s against 1.30 s, 50,000 rows 2.96 s against 1.65 s)."""
DENSE_BLOCK_ENTRIES = 1 << 20
"""Scores in one query block's dense tile (4 MiB of float32): the ranking makes a few
passes of that size per scoring, which stay in cache (10,000 rows: 419 queries a block
at 16 MiB, 104 at 4 MiB, 14% less time for the same lists)."""


def dense_query_block(query_block: int, m: int, fewest: int) -> int:
    """Queries per block when ``m`` rows are ranked densely: ``query_block``, fewer when
    a block's tile would hold more than :data:`DENSE_BLOCK_ENTRIES` scores."""
    return max(fewest, min(query_block, DENSE_BLOCK_ENTRIES // max(m, 1)))


def scan_one_tile(
    queries: torch.Tensor,
    tile: OneTile,
    k: int,
    excluded: tuple[np.ndarray, np.ndarray] | None,
    scratch: torch.Tensor,
) -> list[np.ndarray]:
    """Per scoring, each query's K best keys in descending order (0: an empty slot).
    ``excluded``: (block-local query, table row) of the block's excluded entries."""
    n, m = queries.shape[0], tile.m
    dots_t = scratch[: n * m].view(n, m)
    torch.mm(queries, tile.block, out=dots_t)
    dots = dots_t.numpy()
    unusable = np.flatnonzero(~np.isfinite(queries.numpy()).all(axis=1))
    if unusable.size:  # a non-finite query: its inner products may be NaN; it is served nothing
        dots[unusable] = -np.inf
    if tile.invalid.size:
        dots[:, tile.invalid] = -np.inf
    if excluded is not None and excluded[0].size:
        dots[excluded[0], excluded[1]] = -np.inf
    spare = np.empty_like(dots)
    found = []
    for a, weights in enumerate(tile.weights):
        estimate = dots if tile.dot_only[a] else np.multiply(dots, tile.estimate_weights[a], out=spare)
        if tile.never[a].size:
            estimate[:, tile.never[a]] = -np.inf
        found.append(_best_keys(dots, estimate, weights, k))
    return found


def _best_keys(dots: np.ndarray, estimate: np.ndarray, weights: np.ndarray, k: int) -> np.ndarray:
    """Each query's K best exact keys, descending, from the dense block of estimates."""
    n, m = dots.shape
    threshold = np.full(n, _LOWEST, dtype=np.float32)
    if m > k:
        kth = _kth_largest(estimate, k).astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            lowered = np.nextafter((kth - np.abs(kth) * MARGIN - SLACK).astype(np.float32), np.float32(-np.inf))
        threshold = np.maximum(lowered, _LOWEST)  # -inf (fewer than K served) -> every finite entry
    flat = np.flatnonzero(estimate >= threshold[:, None])  # by query, then row
    query = flat // m
    row = flat - query * m
    scores = (dots.ravel()[flat].astype(np.float64) * weights[row]).astype(np.float32)
    return _ranked(query, encode(scores, row), n, k)


def _kth_largest(estimate: np.ndarray, k: int) -> np.ndarray:
    """Each row's K-th largest value (the block holds no NaN).

    Partitioned as int32 bit patterns, which order non-negative floats as their values
    and put every negative one below them (integers partition faster than floats): the
    answer for every row whose K-th largest is non-negative; the other rows (fewer than
    K non-negative estimates) are partitioned as floats."""
    m = estimate.shape[1]
    kth = np.partition(estimate.view(np.int32), m - k, axis=1)[:, m - k]
    negative = np.flatnonzero(kth < 0)
    values = kth.view(np.float32)
    if negative.size:
        values[negative] = np.partition(estimate[negative], m - k, axis=1)[:, m - k]
    return values


def _ranked(query: np.ndarray, keys: np.ndarray, n: int, k: int) -> np.ndarray:
    """(n, k) best ``keys`` of each query (``query`` ascending), descending, 0-padded."""
    counts = np.bincount(query, minlength=n)
    regular = counts == k  # almost every query after a partition: exactly K candidates
    if regular.all():
        return np.sort(keys.reshape(n, k), axis=1)[:, ::-1]
    best = np.zeros((n, k), dtype=np.uint64)
    in_regular = regular[query]
    best[regular] = np.sort(keys[in_regular].reshape(-1, k), axis=1)[:, ::-1]
    # The others: ties at the margin (more than K), or fewer than K rows served.
    irregular = np.flatnonzero(~regular)
    rest, rest_counts = np.searchsorted(irregular, query[~in_regular]), counts[irregular]
    width = max(int(rest_counts.max(initial=0)), k)
    packed = np.zeros((irregular.size, width), dtype=np.uint64)
    packed[rest, np.arange(rest.size) - (np.cumsum(rest_counts) - rest_counts)[rest]] = keys[~in_regular]
    if width > k:
        packed = np.partition(packed, width - k, axis=1)[:, width - k :]
    packed.sort(axis=1)
    best[irregular] = packed[:, ::-1]
    return best


def one_tile_topk(
    queries: np.ndarray,
    tile: OneTile,
    k: int,
    exclude: tuple[np.ndarray, np.ndarray] | None,
    query_block: int,
    pool: Executor | None,
    advance: Callable[[int], None],
) -> list[np.ndarray]:
    """Per scoring, the (n, k) best keys of every query, descending, query blocks on
    ``pool``'s threads when given (else in the calling thread)."""
    n = queries.shape[0]
    found = [np.zeros((n, k), dtype=np.uint64) for _ in tile.weights]

    def run(b0: int, b1: int) -> int:
        torch.set_num_threads(1)  # this thread's operations; the caller restores the setting
        scratch = torch.empty((b1 - b0) * tile.m, dtype=torch.float32)
        excluded = None
        if exclude is not None:
            indptr, rows = exclude
            query = np.repeat(np.arange(b1 - b0, dtype=np.int64), np.diff(indptr[b0 : b1 + 1]))
            excluded = (query, rows[indptr[b0] : indptr[b1]])
        for keys, best in zip(found, scan_one_tile(torch.from_numpy(queries[b0:b1]), tile, k, excluded, scratch)):
            keys[b0:b1] = best
        return b1 - b0

    blocks = [(b0, min(b0 + query_block, n)) for b0 in range(0, n, query_block)]
    if pool is None or len(blocks) == 1:
        for b0, b1 in blocks:
            advance(run(b0, b1))
    else:
        for done in as_completed([pool.submit(run, b0, b1) for b0, b1 in blocks]):
            advance(done.result())
    return found


SEED_ROWS = 2048
"""Rows of the sample whose K-th best scores seed the tiled scan's floors."""


class FloorSeed:
    """Floors for the tiled scan before its first tile: each scoring's K-th best score
    over a sample of rows spread over the table, lowered by a bound on how much a
    differently blocked sgemm can change an inner product (the scan recomputes them).

    Without it the first tiles pass nearly every entry (their floors are -inf until a
    buffer is cut), and for cosine a floor set by the highest-norm rows alone is low."""

    def __init__(self, table: np.ndarray, norms: np.ndarray, alphas: tuple[float, ...], shift: int, k: int) -> None:
        m, dim = table.shape
        self.rows = np.unique(np.linspace(0, m - 1, min(SEED_ROWS, m // 8)).astype(np.int64))
        self.k = k
        self.tile = OneTile(np.asarray(table[self.rows]), norms[self.rows], alphas, shift)
        self.usable = self.rows.size >= 4 * k and self.tile.fits
        scaled = np.ldexp(norms[self.rows], -shift)
        scaled = np.where(np.isfinite(scaled), scaled, 0.0)
        # |error| of an inner product <= dim u sum|q_i k_i| <= dim u |q| |k|, u = 2**-24 (4x margin)
        self.reach = dim * 2.0**-22 * np.array([np.max(scaled**a, initial=0.0) for a in alphas])

    def floors(
        self,
        queries: np.ndarray,
        query_norms: np.ndarray,
        exclude: tuple[np.ndarray, np.ndarray] | None,
        query_block: int,
        pool: Executor | None,
    ) -> list[np.ndarray]:
        """Per scoring, a float32 lower bound of each query's K-th best score (-inf: none);
        ``queries`` and their ``query_norms`` as the scan sees them (scaled)."""
        keys = one_tile_topk(queries, self.tile, self.k, self._columns(exclude), query_block, pool, lambda _: None)
        found = []
        for reach, best in zip(self.reach, keys):
            kth = decode(best[:, self.k - 1])[0].astype(np.float64)
            with np.errstate(invalid="ignore", over="ignore"):
                lowered = kth - np.abs(kth) * MARGIN - reach * query_norms - SLACK
                floor = np.nextafter(lowered.astype(np.float32), np.float32(-np.inf))
            floor[~np.isfinite(floor)] = -np.inf
            found.append(floor)
        return found

    def _columns(self, exclude: tuple[np.ndarray, np.ndarray] | None) -> tuple[np.ndarray, np.ndarray] | None:
        """The excluded rows that fall in the sample, as its columns (CSR)."""
        if exclude is None:
            return None
        indptr, rows = exclude
        at = np.minimum(np.searchsorted(self.rows, rows), self.rows.size - 1)
        hit = self.rows[at] == rows
        query = np.repeat(np.arange(indptr.size - 1), np.diff(indptr))
        counts = np.bincount(query[hit], minlength=indptr.size - 1)
        return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64), at[hit]
