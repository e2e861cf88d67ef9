"""How raw ids in a log become table rows, and when that evidently goes wrong.

A table row is found for a raw id in one of three ways: a list of raw ids, one per row
(``--item-ids``/``--user-ids``, ids stored in the model file); ``row = id − offset``
(an explicit offset, e.g. 1 for 1-based ids); or ``row = id``, *assumed* because nothing
else was given. Only the assumption can silently pair items with the wrong rows (a
1-based log against 0-based rows gave ρ = 0.73 instead of 0.998), so it is checked: a
log id that has no row under it is evidence the assumption is wrong, and the audit
stops with what to pass instead, unless the user says the rows are ids anyway.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from auditor.errors import IdMappingError, setting


@dataclass(frozen=True)
class RowIdPolicy:
    """What the user said about taking raw ids as table rows."""

    offset: int | None = None
    """row = raw id − offset (None: no offset given, rows assumed to be the ids)."""
    assume_row_ids: bool = False
    """Take ids as rows even when the log shows they evidently are not."""

    @property
    def shift(self) -> int:
        return self.offset or 0


def describe_mapping(what: str, ids_source: str | None, policy: RowIdPolicy) -> str:
    """One line for the report: how raw ``what`` ids were mapped to table rows."""
    if ids_source is not None:
        return f"{what} rows mapped through {ids_source}"
    if policy.offset is not None:
        return f"{what} table row = raw {what} id − {policy.offset} ({setting('id_offset')} {policy.offset})"
    told = f", {setting('assume_row_ids')}" if policy.assume_row_ids else ""
    return f"{what} table row = raw {what} id (assumed: no {setting(what + '_ids')} given{told})"


def check_assumed_rows(
    distinct_ids: np.ndarray,
    n_rows: int,
    policy: RowIdPolicy,
    what: str,
    source: object,
    n_unmapped_interactions: int | None = None,
) -> None:
    """Raise IdMappingError when taking ``distinct_ids`` (integers) as rows of an
    ``n_rows``-row table is evidently wrong: some id has no row.

    Ids beyond the table (or below 0) mean the log and the table do not share row
    numbering: ids shifted by a constant (1-based ids), a table of another catalogue,
    or rows in another order. The message says which fix fits: an offset when one
    constant shift puts every id on a row, else the raw id of each row. Does nothing
    when the user asked to assume row ids anyway.
    """
    if policy.assume_row_ids or distinct_ids.size == 0:
        return
    ids = np.asarray(distinct_ids, dtype=np.int64)
    rows = ids - policy.shift
    outside = int(np.count_nonzero((rows < 0) | (rows >= n_rows)))
    if outside == 0:
        return
    low, high = int(ids.min()), int(ids.max())
    interactions = (
        f" ({n_unmapped_interactions:,} interactions)" if n_unmapped_interactions else ""
    )
    shifted = f" minus {policy.shift}" if policy.shift else ""
    message = (
        f"{outside:,} of the {ids.size:,} distinct {what} ids in {source}{interactions} have no row "
        f"when taken{shifted} as rows of the {n_rows:,}-row {what} table (ids run from {low} to {high}), "
        f"so the {what} ids are evidently not the table's row numbers"
    )
    # Offsets c that put every id on a row: high − c <= n_rows − 1 and low − c >= 0.
    first, last = high - (n_rows - 1), low
    if first <= last and first >= 0 and (high - low + 1) >= n_rows // 2:
        offset = 1 if first <= 1 <= last else first
        message += (
            f". The ids look shifted: pass {setting('id_offset')} {offset} (row = id − {offset})"
            f"{' for 1-based ids' if offset == 1 else ''}, or {setting(what + '_ids')} FILE"
        )
    else:
        message += f". Pass {setting(what + '_ids')} FILE with the raw {what} id of each table row"
    message += f" (or {setting('assume_row_ids')} to audit with ids as rows anyway)"
    raise IdMappingError(message)
