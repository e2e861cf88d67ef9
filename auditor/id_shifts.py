"""Ids that one constant would put on the table's rows: which constant (``fitting_shift``),
when that is evident enough to refuse (``evident_shift``), the ``--id-offset`` advice that
goes with it (never ``--assume-row-ids`` alone) and the warnings when ids taken as rows fit
the table only by chance (``offset_signals``)."""

from __future__ import annotations

import numpy as np

from auditor.errors import setting
from auditor.values import RowIdPolicy


OtherRows = tuple[str, np.ndarray | None, int]
"""The other table's side ("item", "user"), its raw ids taken as rows (repeats allowed;
None where the caller does not hold them) and its row count: what an offered
``--id-offset`` shifts beside the ids refused."""


def offset_advice(ids: np.ndarray, n_rows: int, given: int, what: str = "", other: OtherRows | None = None) -> str | None:
    """The offset that puts every id on a row where ``given`` (the offset passed, 0 for
    none) does not (:func:`fitting_shift` relative to it), in words: drop the option where
    the ids fit unshifted, else pass another (an offset is never negative); "look shifted"
    where the ids cover :data:`DENSE_SHIFT` of the rows, else as a possibility. None when
    no offset fits (QA12 logs N1: 0-based ids under a wrong --id-offset 1 were offered
    only --assume-row-ids, ρ 0.066 'none' for 0.8455 'moderate')."""
    offset = fitting_shift(ids, n_rows, given=given)
    if offset is None or offset < 0:
        return None
    covered = np.unique(ids).size
    option = setting("id_offset")
    if other is not None and other[1] is not None and other[1].size and not _fits(other[1], other[2], offset):
        return _offset_beside(offset, given, what, n_rows, other[0])
    advice = _plain_offset_advice(offset, given, covered, n_rows)
    if other is not None and other[1] is None:  # unknown here: the option's reach said, not guessed
        advice += (f" ({option} applies to the {other[0]} ids taken as rows too: where they lack rows under it, "
                   f"pass {setting(other[0] + '_ids')} FILE for the {other[0]}s)" if offset else
                   f" (where the {other[0]} ids taken as rows need {option} {given}, keep it and pass "
                   f"{setting(what + '_ids')} FILE for the {what}s instead: it applies to every id taken as a row)")
    return advice


def _plain_offset_advice(offset: int, given: int, covered: int, n_rows: int) -> str:
    """:func:`offset_advice`'s words for one table."""
    option = setting("id_offset")
    if offset == 0:
        rows = "" if covered >= DENSE_SHIFT * n_rows else f", though the ids cover only {covered:,} of the {n_rows:,} rows"
        return f"every id has a row without {option} {given} (row = id){rows}: if the rows are the ids, drop {option}"
    if covered >= DENSE_SHIFT * n_rows:
        return f"{shifted(offset)}, pass {option} {offset} instead"
    return (
        f"every id has a row if the rows are the ids minus {offset}{' (1-based ids)' if offset == 1 else ''}, "
        f"though the ids cover only {covered:,} of the {n_rows:,} rows: if they are, pass {option} {offset}"
    )


def _fits(ids: np.ndarray, n_rows: int, offset: int) -> bool:
    """Whether every id minus ``offset`` is a row of an ``n_rows``-row table."""
    return int(np.min(ids)) - offset >= 0 and int(np.max(ids)) - offset < n_rows


def _offset_beside(offset: int, given: int, what: str, n_rows: int, other: str) -> str:
    """The offset that fits the refused ids but not the ``other`` table's ids taken as rows,
    in words: one table needs its id file, since the option shifts every id taken as a row
    (QA12 logs N3: users 3..12 were offered --id-offset 1, which the 0-based items then failed)."""
    option, shift_note = setting("id_offset"), f"{setting('id_offset')} shifts every id taken as a row"
    if offset == 0:
        return (
            f"every id has a row without {option} {given} (row = id), but the {other} ids need it and {shift_note}: "
            f"keep it and pass {setting(what + '_ids')} FILE for the {what}s (0..{n_rows - 1} one per line where the "
            f"rows are the ids)"
        )
    return (
        f"every id has a row if the rows are the ids minus {offset}, but {shift_note} and some {other} id then has "
        f"none: pass {option} {offset} with {setting(other + '_ids')} FILE for the {other}s (the raw {other} id of "
        "each row)"
    )


DENSE_SHIFT = 0.9
"""Share of the rows the ids must cover for a constant shift to be evident (a dense
numbering off by a constant): the stored ids' refusal, and the rows-as-ids refusal's
"look shifted"; below it the rows-as-ids refusal offers the offset as a possibility (a
1-based log that leaves a quarter of a Zipf catalogue cold is still 1-based)."""


def fitting_shift(ids: np.ndarray, n_rows: int, row_ids: np.ndarray | None = None, given: int = 0) -> int | None:
    """The constant c that puts every integer id on a row when some id has none: ``id − c``
    is a row number 0..n_rows−1, or with ``row_ids`` an id one of the ``n_rows`` rows
    holds. c = 1 or −1 where it fits, else the smallest fit; None when no shift fits (or
    none is needed). However few rows the ids cover: an escape that takes the ids as rows
    is never offered without it (QA12 logs F1). ``given``: the offset already applied to
    rows taken as ids; where it does not fit and no shift does (c = 0), 0 (QA12 logs N1)."""
    ids = np.unique(np.asarray(ids, dtype=np.int64))
    if ids.size == 0:
        return None
    if row_ids is None:
        first, last = int(ids.max()) - (n_rows - 1), int(ids.min())  # the c with 0 <= id - c < n_rows for every id
        if first > last or first <= given <= last:
            return None
        if first <= 0 <= last:
            return 0
        return next((c for c in (1, -1) if first <= c <= last), first if first > 0 else last)
    rows = np.asarray(row_ids, dtype=np.int64)
    if rows.size == 0 or np.isin(ids, rows).all():
        return None
    candidates = (1, -1, int(ids.min()) - int(rows.min()), int(ids.max()) - int(rows.max()))
    return next((c for c in candidates if c and np.isin(ids - c, rows).all()), None)


def evident_shift(ids: np.ndarray, n_rows: int, row_ids: np.ndarray | None = None) -> int | None:
    """The shift of :func:`fitting_shift` where it is evident, one rule for rows taken as
    ids and for rows mapped through ids: the ids also cover at least :data:`DENSE_SHIFT` of
    the rows (a dense numbering off by a constant, such as 1-based ids against 0-based rows)."""
    if np.unique(np.asarray(ids)).size < DENSE_SHIFT * n_rows:
        return None
    return fitting_shift(ids, n_rows, row_ids)


def shifted(shift: int) -> str:
    """The words for ids that look shifted by ``shift`` (:func:`evident_shift`): row = id − shift."""
    if shift > 0:
        return f"the ids look shifted: if the rows are the ids minus {shift}{' (1-based ids)' if shift == 1 else ''}"
    return f"the ids look shifted: if the rows are the ids plus {-shift}{' (0-based ids, 1-based rows)' if shift == -1 else ''}"


def offset_signals(
    distinct_ids: np.ndarray, n_rows: int, policy: RowIdPolicy, what: str, source: object, first_row: np.ndarray,
    framework: str | None = None,
) -> list[str]:
    """Warnings when ids taken as rows fit the table by chance (no id beyond it, so
    :func:`check_assumed_rows` passed) but the evidence points at 1-based ids, or at a
    padding row: row 0 never occurs while every other row does, or (``assume_row_ids``)
    the last id is the only one beyond the table, or some ids are beyond it and one shift
    (:func:`fitting_shift`) puts every id on a row. For a Keras table (``framework``) whose
    file does not record ``mask_zero`` (a weights file without its config), row 0 may
    be the mask index instead, where the offset would be wrong."""
    if policy.offset is not None:
        return _given_offset_signal(distinct_ids, n_rows, policy, what, source)
    if distinct_ids.size == 0 or n_rows < 3:
        return []
    ids = np.unique(np.asarray(distinct_ids, dtype=np.int64))
    inside = ids[(ids >= 0) & (ids < n_rows)]
    outside = ids[(ids < 0) | (ids >= n_rows)]
    rest_all_there = inside.size == n_rows - 1 and (inside.size == 0 or inside[0] == 1)
    if policy.assume_row_ids and outside.tolist() == [n_rows] and rest_all_there:
        return [
            f"only the largest {what} id of {source} ({n_rows}) has no row of the {n_rows:,}-row {what} table and row 0 "
            f"never occurs: the ids look 1-based; pass {setting('id_offset')} 1 (row = id − 1) unless the rows are "
            f"the ids ({setting('assume_row_ids')} took them as rows)"
        ]
    if policy.assume_row_ids and outside.size and (offset := fitting_shift(ids, n_rows)) is not None and offset > 0:
        return [
            f"{outside.size:,} of the {ids.size:,} distinct {what} ids of {source} have no row of the {n_rows:,}-row "
            f"{what} table ({setting('assume_row_ids')} took the ids as rows and {rowless_fate(what)}), while "
            f"every id has a row if the rows are the ids minus {offset}: if they are, pass {setting('id_offset')} "
            f"{offset} (row = id − {offset})"
        ]
    if outside.size or not rest_all_there:
        return []
    if not np.any(first_row):
        return [
            f"row 0 of the {what} table is all zeros and never occurs in {source} while every other row does: a "
            f"padding row (as nn.Embedding(n + 1, padding_idx=0) keeps); it is audited as a cold {what} with norm 0"
        ]
    return [
        f"row 0 of the {what} table never occurs in {source} while every other row does: if the {what} ids are "
        f"1-based, the rows are off by one; pass {setting('id_offset')} 1 (row = id − 1), or "
        f"{setting(what + '_ids')} FILE"
        + (", unless the layer is an Embedding(mask_zero=True), whose row 0 is the mask index and whose rows are the "
           "ids (this file does not record mask_zero; a .keras archive does)" if framework == "keras" else "")
    ]


def _given_offset_signal(distinct_ids: np.ndarray, n_rows: int, policy: RowIdPolicy, what: str, source: object) -> list[str]:
    """The warning when ``assume_row_ids`` took ids as rows under a given offset that leaves
    some id without a row while another offset (none included) puts every id on one: the
    refusal's advice, never to be lost by passing the escape (QA12 logs N1)."""
    if not policy.assume_row_ids or distinct_ids.size == 0:
        return []
    ids = np.unique(np.asarray(distinct_ids, dtype=np.int64))
    outside = int(np.count_nonzero((ids - policy.shift < 0) | (ids - policy.shift >= n_rows)))
    if outside == 0 or (advice := offset_advice(ids, n_rows, policy.shift)) is None:
        return []
    return [
        f"{outside:,} of the {ids.size:,} distinct {what} ids of {source} have no row of the {n_rows:,}-row {what} "
        f"table taken{f' minus {policy.shift}' if policy.shift else ''} as rows ({setting('assume_row_ids')} took them as rows and "
        f"{rowless_fate(what)}), while {advice}"
    ]


def rowless_fate(what: str) -> str:
    """What became of the ids left without a row, in words: an item's interactions are left
    out of the counts; a user is a zero query (loading/zero_queries.py), not left out."""
    return "left their interactions out" if what == "item" else "made each without one a zero query"
