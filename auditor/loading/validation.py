"""What an item or user table must hold before anything is measured on it.

Whatever loader produced a table (built-in or plugin), these checks run on it, in row
blocks so a memory-mapped or spilled table stays on disk.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from auditor.errors import EmbeddingTableError
from auditor.memory import block_rows

if TYPE_CHECKING:
    from auditor.model import ModelBundle

_FIRST_ROWS = 5


def first_rows(rows: np.ndarray) -> str:
    """The first few offending rows for a message: ``3, 8, 9, 12, 40, ...``."""
    shown = ", ".join(str(int(r)) for r in rows[:_FIRST_ROWS])
    return shown + (", ..." if len(rows) > _FIRST_ROWS else "")


def validate_item_table(table: np.ndarray, source: str) -> list[str]:
    """Check an item table; return warnings (all-zero rows), raise on fatal problems.

    Fatal: not 2-D, no rows, no columns, NaN/inf values, every row all-zero (no norm, no
    direction to retrieve by). One or two items are audited: retrieval and accuracy are
    defined, and the frequency-norm correlations are null with their reason
    (:func:`auditor.metrics.frequency_norm.undefined_reason`).
    """
    if table.ndim != 2:
        raise EmbeddingTableError(
            f"item table in {source} must be 2-D (items x dim), got shape {list(table.shape)}"
        )
    n, d = table.shape
    if n == 0:
        raise EmbeddingTableError(f"item table in {source} is empty (0 rows)")
    if d == 0:
        raise EmbeddingTableError(f"item table in {source} has {n} rows but 0 dimensions")
    bad, zero = _row_checks(table)
    if bad.size:
        raise EmbeddingTableError(
            f"item table in {source} has {bad.size} row{'s' if bad.size != 1 else ''} with NaN or "
            f"infinite values (rows {first_rows(bad)})"
        )
    if zero.size == n:
        raise EmbeddingTableError(
            f"item table in {source} is all zeros: every one of its {n} item vectors is zero, "
            "so there are no norms to correlate and nothing to retrieve (an untrained or blanked table?)"
        )
    if zero.size:
        return [
            f"item table in {source} has {zero.size} all-zero row{'s' if zero.size != 1 else ''} "
            f"(rows {first_rows(zero)}); their norm is 0: cosine never serves them, dot scores them 0, and so "
            "does dot over a table mitigate writes at alpha 0, which keeps them zero"
        ]
    return []


def validate_user_table(table: np.ndarray, source: str, dim: int) -> np.ndarray:
    """Check a user table: 2-D, non-empty, of the item table's dimension; return the rows
    holding NaN or infinite values (int64, sorted).

    Such rows are recorded rather than refused: a row no figure uses (a user absent from
    the log is never queried) changes nothing, and each reader of user rows refuses the
    ones it would use (the queries, RecBole's evaluated users, graph propagation, probes).
    """
    if table.ndim != 2 or table.shape[0] == 0:
        raise EmbeddingTableError(f"user table in {source} must be a non-empty 2-D array, got {list(table.shape)}")
    if table.shape[1] != dim:
        raise EmbeddingTableError(
            f"user table in {source} has dimension {table.shape[1]} but the item table has {dim}"
        )
    return _row_checks(table)[0]


def nonfinite_users_note(rows: np.ndarray, source: str) -> str:
    """The warning for user-table ``rows`` holding NaN or infinite values."""
    return (
        f"user table in {source} has {rows.size:,} row{'s' if rows.size != 1 else ''} with NaN or infinite values "
        f"(rows {first_rows(rows)}): no figure uses them unless they are queried, evaluated or propagated, which "
        "stops the audit naming the row (a diverged or never-initialised user?)"
    )


def refuse_nonfinite_users(bundle: ModelBundle, rows: np.ndarray, use: str) -> None:
    """EmbeddingTableError when any user-table row of ``rows`` holds NaN or infinite
    values (:attr:`ModelBundle.nonfinite_user_rows`); ``use`` says what needs them."""
    if bundle.nonfinite_user_rows is None:
        return
    hit = np.intersect1d(bundle.nonfinite_user_rows, rows)
    if hit.size:
        raise EmbeddingTableError(
            f"user table in {bundle.source} has NaN or infinite values in row{'s' if hit.size != 1 else ''} "
            f"{first_rows(hit)}, which {use}"
        )


def _row_checks(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows with a NaN or infinite value, all-zero rows) of ``table``, in row blocks so a
    memory-mapped table stays on disk."""
    n, d = table.shape
    bad_parts: list[np.ndarray] = []
    zero_parts: list[np.ndarray] = []
    step = block_rows(d, bytes_per_value=1)  # np.isfinite's bool scratch is the largest
    for start in range(0, n, step):
        block = np.asarray(table[start : start + step])
        bad_parts.append(np.flatnonzero(~np.isfinite(block).all(axis=1)) + start)
        zero_parts.append(np.flatnonzero(~block.any(axis=1)) + start)
    return np.concatenate(bad_parts).astype(np.int64), np.concatenate(zero_parts).astype(np.int64)


def validate_frequencies(frequencies: object, n_items: int, source: str, model_format: str) -> None:
    """A loader's ``ModelBundle.item_frequencies`` must give one count per item-table row
    (the measures pair them row by row): refused here, naming the file, the format and the
    field, rather than deep in a measure."""
    if frequencies is None:
        return
    shape = tuple(np.asarray(frequencies).shape)
    if len(shape) == 1 and shape[0] == n_items:
        return
    held = f"{shape[0]:,} counts" if len(shape) == 1 else f"an array of shape {list(shape)}"
    raise EmbeddingTableError(
        f"the item frequencies of the {model_format!r} model read from {source} (ModelBundle.item_frequencies, "
        f"as its loader returned them) hold {held}, but its item table has {n_items:,} rows: one count per row "
        "is needed"
    )
