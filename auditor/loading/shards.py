"""Row shards of an item table: slices in this process, or file references a Dask
worker can read by itself.

A worker gets a shard by reference whenever the table is file-backed:

* a Parquet item table: (file, vector column, row range), read in record batches;
* a memory-mapped table (a ``.npy`` input, or a table spilled to a temporary ``.npy``):
  (file, byte offset, row range), memory-mapped read-only on the worker.

Workers therefore need the files under the same absolute paths (a shared file system;
for a spilled table, set ``TMPDIR`` to a shared folder).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow.parquet as pq

from auditor.errors import EmbeddingTableError
from auditor.loading.parquet_table import PARQUET_BATCH_ROWS, vector_matrix
from auditor.memory import table_file
from auditor.model import ModelBundle


def table_shards(table: np.ndarray, rows_per_shard: int) -> list[np.ndarray]:
    """Consecutive row slices of ``table`` (views; a memory-mapped table stays on disk)."""
    if rows_per_shard < 1:
        raise ValueError(f"rows_per_shard must be positive, got {rows_per_shard}")
    starts = range(0, table.shape[0], rows_per_shard)
    return [table[start : start + rows_per_shard] for start in starts]


@dataclass(frozen=True)
class MappedRows:
    """Rows [start, stop) of a C-contiguous float32 (rows, dim) matrix stored in a file
    from byte ``offset`` on (a ``.npy`` body or a spilled table)."""

    path: str
    offset: int
    dim: int
    start: int
    stop: int

    def read(self) -> np.ndarray:
        """The rows, memory-mapped read-only (pages are read as the search scans them)."""
        return np.asarray(
            np.memmap(
                self.path,
                dtype=np.float32,
                mode="r",
                offset=self.offset + self.start * self.dim * 4,
                shape=(self.stop - self.start, self.dim),
            )
        )


@dataclass(frozen=True)
class ParquetRows:
    """Rows [start, stop) of a list-of-float column of a Parquet file."""

    path: str
    column: str
    start: int
    stop: int

    def read(self) -> np.ndarray:
        """The rows as float32, decoded from the row groups that hold them only."""
        reader = pq.ParquetFile(self.path)
        groups: list[int] = []
        first = None  # table row of the first selected group's first row
        position = 0
        for index in range(reader.metadata.num_row_groups):
            size = reader.metadata.row_group(index).num_rows
            if position < self.stop and position + size > self.start:
                groups.append(index)
                first = position if first is None else first
            position += size
        parts: list[np.ndarray] = []
        width: int | None = None
        row = 0 if first is None else first
        what = f"{self.path} column {self.column!r}"
        for batch in reader.iter_batches(batch_size=PARQUET_BATCH_ROWS, row_groups=groups, columns=[self.column]):
            low, high = max(self.start, row), min(self.stop, row + batch.num_rows)
            if low < high:
                part = vector_matrix(batch.column(0).slice(low - row, high - low), what, first_row=low, width=width)
                width = part.shape[1]
                parts.append(part)
            row += batch.num_rows
            if row >= self.stop:
                break
        rows = np.concatenate(parts) if parts else np.zeros((0, 0), dtype=np.float32)
        if rows.shape[0] != self.stop - self.start:
            raise EmbeddingTableError(
                f"{what}: rows {self.start}-{self.stop} hold {rows.shape[0]} vectors; the file "
                "changed since it was loaded"
            )
        return rows


ShardSource = MappedRows | ParquetRows


def shard_sources(bundle: ModelBundle, bounds: Sequence[int]) -> list[ShardSource] | None:
    """How a worker can read each shard [bounds[j], bounds[j+1]) of ``bundle.item_table``
    from a file; None when the table lives only in this process's memory."""
    table = bundle.item_table
    pairs = list(zip(bounds[:-1], bounds[1:]))
    if bundle.format == "parquet" and bundle.item_key and bundle.source.is_file():
        path = str(bundle.source.resolve())
        return [ParquetRows(path, bundle.item_key, int(a), int(b)) for a, b in pairs]
    backing = table_file(table)
    if backing is not None:
        path, offset = backing
        return [MappedRows(path, offset, int(table.shape[1]), int(a), int(b)) for a, b in pairs]
    return None
