"""The one rescaling rule of ``popaudit mitigate``, applied in row blocks.

Each item row k becomes k·‖k‖^(α−1) (the rule of :mod:`auditor.alpha`): its direction
is kept and its norm becomes ‖k‖^α, so the plain inner product q·k' over the rescaled
table equals (q·k)·‖k‖^(α−1), the norm-aware score ``alpha_<α>`` of ``check``. Rows are
read in float64 (every float dtype converts exactly), norms are the overflow-safe ones
of :func:`~auditor.metrics.frequency_norm.item_norms`; zero rows stay zero and α = 1
copies every row unchanged, bit for bit.

Writers (one per file format, :mod:`auditor.mitigation.tables`,
:mod:`auditor.mitigation.torch_file` and :mod:`auditor.mitigation.recbole_file`, and
plugins' writers; what they return, :class:`Written`, is part of the format table in
:mod:`auditor.loading.formats`) give :func:`rescale_blocks` two callables: one reads
rows [start, stop) as float64, the other stores float64 rows in the table's own dtype and
returns what was stored (as float64), from which the after-norms are taken.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from auditor.alpha import rescale_rows as alpha_rule
from auditor.plugin_api import RowNorms, Written
from auditor.memory import block_rows
from auditor.metrics.frequency_norm import item_norms
from auditor.progress import SILENT, Progress

ReadRows = Callable[[int, int], np.ndarray]
"""Rows [start, stop) of the source table as a float64 (rows, dim) array."""
WriteRows = Callable[[int, int, np.ndarray], np.ndarray]
"""Store float64 rows [start, stop) in the table's dtype; return the stored rows as float64."""


def rescale_rows(rows: np.ndarray, alpha: float, norms: np.ndarray | None = None) -> np.ndarray:
    """``rows`` (float64) rewritten by the α rule (:func:`auditor.alpha.rescale_rows`);
    ``norms``: their norms if known (else computed, overflow-safe)."""
    rows = np.asarray(rows, dtype=np.float64)
    if norms is None and alpha != 1.0:
        norms = item_norms(rows, block=max(1, rows.shape[0]))
    return rows if norms is None else alpha_rule(rows, alpha, norms)


def rescale_blocks(
    n_rows: int,
    dim: int,
    alpha: float,
    read: ReadRows,
    write: WriteRows,
    *,
    max_memory: int | None = None,
    progress: Progress = SILENT,
) -> RowNorms:
    """Rescale an (n_rows, dim) table block by block through ``read`` and ``write``.

    A block holds a few float64 copies of at most :func:`~auditor.memory.block_rows` rows
    (about a megabyte, less under ``max_memory``), whatever the table's size.
    """
    step = block_rows(dim, bytes_per_value=8, max_memory=max_memory)
    before = np.zeros(n_rows, dtype=np.float64)
    after = np.zeros(n_rows, dtype=np.float64)
    with progress.track("Rescaling the item table", total=n_rows) as advance:
        for start in range(0, n_rows, step):
            stop = min(n_rows, start + step)
            rows = read(start, stop)
            norms = item_norms(rows, block=max(1, stop - start))
            before[start:stop] = norms
            stored = write(start, stop, rescale_rows(rows, alpha, norms))
            after[start:stop] = item_norms(stored, block=max(1, stop - start))
            advance(stop - start)
    return RowNorms(before, after)


def numpy_io(source: np.ndarray, target: np.ndarray) -> tuple[ReadRows, WriteRows]:
    """``read``/``write`` over two (n, dim) numpy arrays (memory maps included) of one dtype."""

    def read(start: int, stop: int) -> np.ndarray:
        return np.asarray(source[start:stop], dtype=np.float64)

    def write(start: int, stop: int, rows: np.ndarray) -> np.ndarray:
        target[start:stop] = rows  # float64 -> the table's float dtype, rounded to nearest
        return np.asarray(target[start:stop], dtype=np.float64)

    return read, write


@dataclass(frozen=True)
class NormSummary:
    """Mean, median and maximum of the item norms, and how many rows are zero."""

    mean: float
    median: float
    max: float
    n_zero_rows: int

    @classmethod
    def of(cls, norms: np.ndarray) -> NormSummary:
        return cls(
            mean=float(np.mean(norms)),
            median=float(np.median(norms)),
            max=float(np.max(norms)),
            n_zero_rows=int(np.count_nonzero(norms == 0)),
        )


__all__ = ["NormSummary", "ReadRows", "RowNorms", "WriteRows", "Written", "numpy_io", "rescale_blocks", "rescale_rows"]
