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


import numpy as np

from auditor.errors import IdMappingError, setting
from auditor.id_spelling import raw_ids_advice, spelled_apart, whole_decimals, whole_decimals_fix
from auditor.values import RowIdPolicy, lookup_rows


FRAMEWORK_ROWS: dict[str, str] = {
    "lightfm": (
        "LightFM numbers rows by lightfm.data.Dataset's own mapping (Dataset.mapping(): ids in order of first "
        "appearance when the dataset was fit), which the model's pickle does not hold"
    ),
    "implicit": (
        "implicit numbers rows by the columns of the user-item matrix it was fit on (often pandas.factorize or "
        "category codes, i.e. an order of appearance), which the model file does not hold"
    ),
    "cornac": "cornac numbers rows by its train set's iid_map, which this file does not hold",
}
"""How frameworks that number rows themselves did it, where their files do not say
(``ModelBundle.format`` -> the sentence the id error gives instead of guessing an offset)."""


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
    framework: str | None = None,
    other: OtherRows | None = None,
) -> None:
    """Raise IdMappingError when taking ``distinct_ids`` (integers) as rows of an
    ``n_rows``-row table is evidently wrong: some id has no row.

    Ids beyond the table (or below 0) mean the log and the table do not share row
    numbering: ids shifted by a constant (1-based ids), a table of another catalogue,
    or rows in another order. The message puts the raw id of each row first; it names
    the framework's own numbering where the file says which framework wrote it
    (``framework``, a ``ModelBundle.format`` in :data:`FRAMEWORK_ROWS`), and otherwise
    offers an offset whenever one constant shift puts every id on a row (ids covering
    fewer than :data:`DENSE_SHIFT` of the rows: as a possibility), plainly only where it
    also fits ``other``, the other table's ids taken as rows (the option shifts both).
    Does nothing when the user asked to assume row ids anyway.
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
    minus = f" minus {policy.shift}" if policy.shift else ""
    message = (
        f"{outside:,} of the {ids.size:,} distinct {what} ids in {source}{interactions} have no row "
        f"when taken{minus} as rows of the {n_rows:,}-row {what} table (ids run from {low} to {high}), "
        f"so the {what} ids are evidently not the table's row numbers"
    )
    message += f". Pass {setting(what + '_ids')} FILE with the raw {what} id of each table row"
    if framework in FRAMEWORK_ROWS:
        message += f" ({FRAMEWORK_ROWS[framework]})"
    elif (advice := _offset_advice(ids, n_rows, policy.shift, what, other)) is not None:
        message += f"; {advice}"
    message += f" (or {setting('assume_row_ids')} to audit with ids as rows anyway)"
    raise IdMappingError(message)


OtherRows = tuple[str, np.ndarray | None, int]
"""The other table's side ("item", "user"), its raw ids taken as rows (repeats allowed;
None where the caller does not hold them) and its row count: what an offered
``--id-offset`` shifts beside the ids refused."""


def _offset_advice(ids: np.ndarray, n_rows: int, given: int, what: str = "", other: OtherRows | None = None) -> str | None:
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
    """:func:`_offset_advice`'s words for one table."""
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


def table_rows(
    raw: np.ndarray,
    row_ids: np.ndarray | None,
    n_rows: int,
    policy: RowIdPolicy,
    what: str,
    source: object,
    column: str | None = None,
    *,
    check: bool = True,
    framework: str | None = None,
    other: OtherRows | None = None,
) -> np.ndarray:
    """Table row of each raw ``what`` id (-1: none): through ``row_ids`` (the raw id of
    each row), else ``row = id − offset`` (``check``: with :func:`check_assumed_rows`).

    Raises IdMappingError when ids taken as rows are not integers.
    """
    if row_ids is not None:
        return lookup_rows(raw, np.asarray(row_ids))
    if raw.size and raw.dtype.kind not in "iu":
        named = f" (column {column!r})" if column else ""
        raise IdMappingError(
            f"{what} ids of {source}{named} are not integers, so they cannot be {what}-table row numbers; "
            + (whole_decimals_fix(what) if whole_decimals(raw) else
               f"pass {setting(what + '_ids')} FILE with the raw {what} id of each {what}-table row")
        )
    if check:
        check_assumed_rows(raw, n_rows, policy, what, source, framework=framework, other=other)
    rows = raw.astype(np.int64) - policy.shift
    return np.where((rows >= 0) & (rows < n_rows), rows, -1)


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


def check_given_offset(
    distinct_ids: np.ndarray, counts: np.ndarray, n_rows: int, policy: RowIdPolicy, what: str, source: object,
    first_row: np.ndarray,
) -> None:
    """Raise IdMappingError when a given offset puts a trained id on row 0 while row 0 is
    all zeros and the ids taken as rows would each have a row of their own, leaving row 0
    alone: the table keeps a padding row (``nn.Embedding(n + 1, padding_idx=0)``) and its
    rows are the ids; the offset moved every id onto its neighbour's row (ρ 0.99 read as
    0.71). ``counts``: interactions per distinct id. Nothing when told to take the ids
    (shifted) as rows anyway."""
    offset = policy.offset
    if not offset or policy.assume_row_ids or distinct_ids.size == 0 or np.any(first_row):
        return
    ids = np.asarray(distinct_ids, dtype=np.int64)
    on_zero = ids == offset
    if not on_zero.any() or int(ids.min()) < 1 or int(ids.max()) >= n_rows:
        return
    trained = int(np.asarray(counts)[on_zero].sum())
    raise IdMappingError(
        f"with {setting('id_offset')} {offset}, {what} id {offset} ({_interactions(trained)} in {source}) lands on row 0 "
        f"of the {n_rows:,}-row {what} table, which is all zeros, as a padding row is (nn.Embedding(n + 1, "
        f"padding_idx=0)) and no trained {what} is; taken as rows without the offset, every id has a row of its own "
        f"and row 0 none: the rows are the ids. Drop {setting('id_offset')} (or pass {setting('assume_row_ids')} to "
        "audit with the offset anyway)"
    )


def check_mapped_shift(
    distinct_ids: np.ndarray, counts: np.ndarray, row_ids: np.ndarray, policy: RowIdPolicy, what: str, source: object,
    mapping: str,
) -> None:
    """Raise IdMappingError when integer ids mapped through ``row_ids`` (the raw id of each
    row: stored in the file, an id file, Keras's ``mask_zero`` ids) look shifted against
    them (:func:`evident_shift`, the rule rows taken as ids are held to): some id has no row,
    and every id moved by one constant has one, so the ids that do have a row are on their
    neighbours' rows (a 0-based log against rows numbered from 1, such as a Keras
    ``mask_zero`` table's; stored ids 0..n−1 against a 1-based log read ρ 0.47 for 0.86,
    QA12 Loaders F3). Refused as rows taken as ids are, whatever share of the interactions
    the ids without a row carry. ``counts``: interactions per distinct id. Nothing when told
    to audit the rows as mapped anyway."""
    ids, rows = np.asarray(distinct_ids), np.asarray(row_ids)
    if policy.assume_row_ids or ids.size == 0 or ids.dtype.kind not in "iu" or rows.dtype.kind not in "iu":
        return
    ids, rows = ids.astype(np.int64), rows.astype(np.int64)
    shift = evident_shift(ids, rows.size, rows)
    if shift is None:
        return
    missing = ~np.isin(ids, rows)
    lost = int(np.asarray(counts)[missing].sum())
    raise IdMappingError(
        f"{int(missing.sum()):,} of the {ids.size:,} distinct {what} ids in {source} ({_interactions(lost)}) have no "
        f"row under {mapping}, while every id {'minus' if shift > 0 else 'plus'} {abs(shift)} has one: {shifted(shift)}, "
        f"this mapping pairs each {what} with its neighbour's row. Pass {setting(what + '_ids')} FILE with the raw {what} id of each row "
        f"as {source} spells it (or {setting('assume_row_ids')} to audit the rows as mapped anyway)"
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


MAX_UNMAPPED_SHARE = 0.5
"""Share of a log's interactions whose ids may miss the rows named by an id map before the
audit stops: past it the frequencies (ρ, every figure and gate) would describe a minority
of the training signal (served lists with most slots unknown are refused alike)."""


def check_mapped_share(
    n_unmapped: int, n_interactions: int, n_unmapped_ids: int, policy: RowIdPolicy, what: str, source: object,
    mapping: str, log_ids: np.ndarray | None = None, row_ids: np.ndarray | None = None,
) -> None:
    """Raise IdMappingError when more than :data:`MAX_UNMAPPED_SHARE` of the interactions
    of ``source`` have no row under ``mapping`` (an id file or stored ids): the map and the
    log evidently disagree (another catalogue, another spelling). The spelling that keeps
    ``log_ids`` (distinct) and ``row_ids`` apart is named where :func:`spelled_apart` finds
    one, as when no id matches (QA12 logs N2: an id file writing 00..09 beside a log's 0..9).
    Nothing when told to audit the rows as mapped anyway (``assume_row_ids``)."""
    if policy.assume_row_ids or n_interactions == 0 or n_unmapped <= MAX_UNMAPPED_SHARE * n_interactions:
        return
    ids = f"{n_unmapped_ids:,} {what} id" + ("" if n_unmapped_ids == 1 else "s")
    advice = (None if log_ids is None else spelled_apart(log_ids, row_ids, mapping)) or raw_ids_advice(what, mapping, source)
    raise IdMappingError(
        f"{_interactions(n_unmapped)} of the {n_interactions:,} in {source} ({n_unmapped / n_interactions:.1%}) "
        f"reference {ids} with no row under {mapping}, so the frequencies would describe only the other "
        f"{1 - n_unmapped / n_interactions:.1%} of the log. {advice[:1].upper()}{advice[1:]} "
        f"(or {setting('assume_row_ids')} to audit the mapped interactions anyway)"
    )


def _interactions(n: int) -> str:
    return f"{n:,} interaction" + ("" if n == 1 else "s")


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
            f"{what} table ({setting('assume_row_ids')} took the ids as rows and left their interactions out), while "
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
    if outside == 0 or (advice := _offset_advice(ids, n_rows, policy.shift)) is None:
        return []
    return [
        f"{outside:,} of the {ids.size:,} distinct {what} ids of {source} have no row of the {n_rows:,}-row {what} "
        f"table taken{f' minus {policy.shift}' if policy.shift else ''} as rows ({setting('assume_row_ids')} took them as rows and left their "
        f"interactions out), while {advice}"
    ]
