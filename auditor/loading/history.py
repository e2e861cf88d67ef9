"""History queries: each sampled user's mean item vector, streamed from the log.

Reading every (user, item) pair of a 100M-row log to average a few thousand users'
histories took about 60 bytes per log row. Here the log is streamed twice instead:

1. the users with at least one interaction on a table row, in order of first
   appearance (memory: the distinct users);
2. a seeded sample of at most ``max_users`` of them (the same sample the in-memory path
   draws), then the sum and count of each sampled user's item vectors, batch by batch
   (memory: the sample's sums).

Peak memory is O(distinct users + max_users × dim), whatever the log's length.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from auditor.errors import InteractionsError, setting
from auditor.loading.alignment import ItemRows, mapped_pairs
from auditor.loading.logs import Log, LogSpec, open_log, read_ids
from auditor.loading.merging import Merger
from auditor.loading.messages import columns_found
from auditor.model import InteractionPairs
from auditor.progress import SILENT, Progress

GATHER_ROWS = 1 << 16
"""Item vectors gathered (as float64) per step while summing histories."""


@dataclass(frozen=True)
class HistoryQueries:
    """Query vectors built from users' histories, and how they were chosen."""

    vectors: np.ndarray
    """float32 (n_users, dim): the mean item vector of each chosen user's history."""
    n_eligible: int
    """Users with at least one interaction on a table row."""
    sampled: bool
    """True when ``vectors`` holds a seeded sample of the eligible users."""
    seed: int

    def describe(self) -> str:
        picked = f", {self.vectors.shape[0]} sampled with seed {self.seed}" if self.sampled else ""
        return f"history: mean item vector of each user's history ({self.n_eligible} users{picked})"


def sample_indices(n: int, max_n: int | None, seed: int) -> np.ndarray | None:
    """Sorted seeded sample of ``max_n`` of ``n`` indices without replacement; None: keep all."""
    if max_n is None or n <= max_n:
        return None
    return np.sort(np.random.default_rng(seed).choice(n, size=max_n, replace=False))


def history_from_pairs(
    pairs: InteractionPairs, table: np.ndarray, max_users: int | None, seed: int
) -> HistoryQueries:
    """History queries from pairs held in memory (a checkpoint's recorded pairs)."""
    if len(pairs) == 0:
        raise InteractionsError("no interaction maps onto a row of the item table, so no history query exists")
    n_users = int(pairs.user_index.max()) + 1
    eligible = np.flatnonzero(np.bincount(pairs.user_index, minlength=n_users) > 0)
    picked = sample_indices(eligible.shape[0], max_users, seed)
    users = eligible if picked is None else eligible[picked]
    position = np.full(n_users, -1, dtype=np.int64)
    position[users] = np.arange(users.shape[0])
    chosen = position[pairs.user_index]
    keep = chosen >= 0
    sums = np.zeros((users.shape[0], table.shape[1]), dtype=np.float64)
    counts = np.zeros(users.shape[0], dtype=np.int64)
    _accumulate(sums, counts, chosen[keep], pairs.item_rows[keep], table)
    return HistoryQueries(_means(sums, counts), int(eligible.shape[0]), picked is not None, seed)


def history_from_log(
    spec: LogSpec,
    mapping: ItemRows,
    *,
    table: np.ndarray,
    max_users: int | None,
    seed: int = 0,
    progress: Progress = SILENT,
) -> HistoryQueries:
    """History queries streamed from the log ``spec`` names (module docstring): at most
    ``max_users`` users, sampled with ``seed`` among those with a mapped interaction.

    Items map to rows of ``table`` through ``mapping`` (its ``n_items`` must be the
    table's row count).
    """
    if mapping.n_items != table.shape[0]:
        raise ValueError(f"the item mapping is for {mapping.n_items} rows, the table has {table.shape[0]}")
    log = open_log(spec)
    if log.user_col is None:
        raise InteractionsError(
            f"history queries need the user of each interaction, but no user id column was found in "
            f"{log.path}; {columns_found(log.columns)}. Pass {setting('user_col')} NAME"
        )

    def queries(as_strings: bool) -> HistoryQueries:
        eligible = _eligible_users(log, mapping, as_strings, progress)
        if len(eligible) == 0:
            raise InteractionsError(
                f"no interaction in {log.path} maps onto a row of the item table, so no history query exists"
            )
        picked = sample_indices(len(eligible), max_users, seed)
        chosen = eligible if picked is None else eligible.take(pa.array(picked))
        sums, counts = _stream_sums(log, chosen, mapping, table, as_strings, progress)
        return HistoryQueries(_means(sums, counts), len(eligible), picked is not None, seed)

    return read_ids(log, queries)


def _first_appearance(t: pa.Table) -> pa.Table:
    return t.group_by("u").aggregate([("p", "min")]).rename_columns(["u", "p"])


def _eligible_users(log: Log, mapping: ItemRows, as_strings: bool, progress: Progress) -> pa.Array:
    """Distinct users with a mapped interaction, in order of first appearance."""
    merger = Merger(_first_appearance)
    seen = 0
    with progress.track("History queries: finding users", total=log.total_rows) as advance:
        for items, users in log.batches(as_strings):
            assert users is not None
            batch_users, _ = mapped_pairs(items, users, mapping, log)
            unique = pc.unique(batch_users)  # first-appearance order within the batch
            merger.add(pa.table({"u": unique, "p": pa.array(np.arange(seen, seen + len(unique)))}))
            seen += len(unique)
            advance(len(items))
    merged = merger.flush()
    if merged is None or merged.num_rows == 0:
        return pa.array([], pa.int64())
    return merged.sort_by("p").column("u").combine_chunks()


def _stream_sums(
    log: Log,
    chosen: pa.Array,
    mapping: ItemRows,
    table: np.ndarray,
    as_strings: bool,
    progress: Progress,
) -> tuple[np.ndarray, np.ndarray]:
    """Sum and count of the item vectors of each ``chosen`` user's history."""
    sums = np.zeros((len(chosen), table.shape[1]), dtype=np.float64)
    counts = np.zeros(len(chosen), dtype=np.int64)
    with progress.track("History queries: averaging histories", total=log.total_rows) as advance:
        for items, users in log.batches(as_strings):
            assert users is not None
            batch_users, rows = mapped_pairs(items, users, mapping, log)
            position = pc.index_in(batch_users, value_set=chosen)
            keep = np.flatnonzero(position.is_valid().to_numpy(zero_copy_only=False))
            if keep.size:
                pos = position.take(pa.array(keep)).to_numpy(zero_copy_only=False).astype(np.int64)
                _accumulate(sums, counts, pos, rows[keep], table)
            advance(len(items))
    return sums, counts


def _accumulate(sums: np.ndarray, counts: np.ndarray, positions: np.ndarray, rows: np.ndarray, table: np.ndarray) -> None:
    """Add table[rows] to sums[positions] (float64, in bounded gathers) and count them."""
    counts += np.bincount(positions, minlength=counts.shape[0])
    for start in range(0, positions.shape[0], GATHER_ROWS):
        stop = start + GATHER_ROWS
        np.add.at(sums, positions[start:stop], np.asarray(table[rows[start:stop]], dtype=np.float64))


def _means(sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
    means: np.ndarray = sums / np.maximum(counts, 1)[:, None]
    return means.astype(np.float32)
