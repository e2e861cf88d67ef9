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
from auditor.id_shifts import OtherRows, evident_shift, fitting_shift, offset_advice, offset_signals, rowless_fate, shifted
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

IN_ORDER_CLAUSE = " (the rows audited hold the ids {first}..{last} in order: row = raw {what} id − {first})"
"""What :func:`describe_mapping` adds where the ids a table's rows hold are N..last in row
order: the rule of rows taken as ids (``--id-offset N``) for every id, whatever the size."""


def describe_mapping(what: str, ids_source: str | None, policy: RowIdPolicy,
                     in_order: tuple[int, int] | None = None) -> str:
    """One line for the report: how raw ``what`` ids were mapped to table rows; ``in_order``:
    the ids N..last the table's rows hold, in row order (the rule row = id − N, which
    ``diff`` compares as rows taken as ids are compared: :data:`IN_ORDER_CLAUSE`)."""
    if ids_source is not None:
        clause = "" if in_order is None else IN_ORDER_CLAUSE.format(what=what, first=in_order[0], last=in_order[1])
        return f"{what} rows mapped through {ids_source}{clause}"
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
        f" ({_interactions(n_unmapped_interactions)})" if n_unmapped_interactions else ""
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
    elif (advice := offset_advice(ids, n_rows, policy.shift, what, other)) is not None:
        message += f"; {advice}"
    message += f" (or {setting('assume_row_ids')} to audit with ids as rows anyway)"
    raise IdMappingError(message)


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
    mapping: str | None = None,
    other: OtherRows | None = None,
    signals: list[str] | None = None,
) -> np.ndarray:
    """Table row of each raw ``what`` id (-1: none): through ``row_ids`` (the raw id of
    each row, ``mapping`` in words), else ``row = id − offset``; ``check``: with
    :func:`check_mapped_shift` or :func:`check_assumed_rows`, one rule for both routes,
    whose findings ``assume_row_ids`` turns into warnings appended to ``signals`` (the
    item counts' alike: :func:`mapped_shift_signals`, :func:`offset_signals`).

    Raises IdMappingError when ids taken as rows are not integers.
    """
    if row_ids is not None:
        if check:  # stored user ids shifted against a log were used silently (QA12 Loaders N1)
            mapped = (raw, None, np.asarray(row_ids), policy, what, source, mapping or f"the {what} ids given")
            check_mapped_shift(*mapped)
            if signals is not None:
                signals += mapped_shift_signals(*mapped)
        return lookup_rows(raw, np.asarray(row_ids))
    if raw.size and raw.dtype.kind not in "iu":
        named = f" (column {column!r})" if column else ""
        raise IdMappingError(
            f"{what} ids of {source}{named} are not integers, so they cannot be {what}-table row numbers; "
            + (whole_decimals_fix(what) if whole_decimals(raw) else
               f"pass {setting(what + '_ids')} FILE with the raw {what} id of each {what}-table row")
        )
    rows = raw.astype(np.int64) - policy.shift
    inside = (rows >= 0) & (rows < n_rows)
    if check:
        check_assumed_rows(raw, n_rows, policy, what, source, framework=framework, other=other)
        if signals is not None and policy.assume_row_ids and not inside.all():  # what the check would have said
            signals += offset_signals(raw, n_rows, policy, what, source, np.ones(1), framework)  # row 0 unread: ids past
    return np.where(inside, rows, -1)


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
    distinct_ids: np.ndarray, counts: np.ndarray | None, row_ids: np.ndarray, policy: RowIdPolicy, what: str,
    source: object, mapping: str,
) -> None:
    """Raise IdMappingError when integer ids mapped through ``row_ids`` (the raw id of each
    row: stored in the file, an id file, Keras's ``mask_zero`` ids) look shifted against
    them (:func:`evident_shift`, the rule rows taken as ids are held to): some id has no row,
    and every id moved by one constant has one, so the ids that do have a row are on their
    neighbours' rows (a 0-based log against rows numbered from 1, such as a Keras
    ``mask_zero`` table's; stored ids 0..n−1 against a 1-based log read ρ 0.47 for 0.86,
    QA12 Loaders F3). Refused as rows taken as ids are, whatever share of the interactions
    the ids without a row carry; item ids and user ids alike. ``counts``: interactions per
    distinct id (None: not counted). Told to audit the rows as mapped anyway, nothing here:
    :func:`mapped_shift_signals` warns."""
    if policy.assume_row_ids or (found := _mapped_shift(distinct_ids, counts, row_ids, what, source, mapping)) is None:
        return
    finding, shift = found
    raise IdMappingError(
        f"{finding}, this mapping pairs each {what} with its neighbour's row. Pass {setting(what + '_ids')} FILE with the "
        f"raw {what} id of each row as {source} spells it (if they are shifted: each row's id {shift:+d}, in row order; "
        f"or {setting('assume_row_ids')} to audit the rows as mapped anyway)"
    )


def mapped_shift_signals(
    distinct_ids: np.ndarray, counts: np.ndarray | None, row_ids: np.ndarray, policy: RowIdPolicy, what: str,
    source: object, mapping: str,
) -> list[str]:
    """The warning, when ``assume_row_ids`` audits rows mapped through ``row_ids`` anyway, of
    what :func:`check_mapped_shift` refuses otherwise, with the id file that fixes it (as
    :func:`offset_signals` warns of ids taken as rows with the offset; QA12 Loaders N2)."""
    if not policy.assume_row_ids or (found := _mapped_shift(distinct_ids, counts, row_ids, what, source, mapping)) is None:
        return []
    finding, shift = found
    return [
        f"{finding}, {setting('assume_row_ids')} audited each {what} on its neighbour's row and "
        f"{'left the ones without a row out' if what == 'item' else rowless_fate(what)}; pass {setting(what + '_ids')} FILE holding each row's id under {mapping} {shift:+d}, in row order, "
        f"to audit each {what} on its own row"
    ]


def _mapped_shift(
    distinct_ids: np.ndarray, counts: np.ndarray | None, row_ids: np.ndarray, what: str, source: object, mapping: str,
) -> tuple[str, int] | None:
    """The finding of :func:`check_mapped_shift` in words, and the shift; None without one."""
    ids, rows = np.asarray(distinct_ids), np.asarray(row_ids)
    if ids.size == 0 or ids.dtype.kind not in "iu" or rows.dtype.kind not in "iu":
        return None
    ids, rows = ids.astype(np.int64), rows.astype(np.int64)
    shift = evident_shift(ids, rows.size, rows)
    if shift is None:
        return None
    missing = ~np.isin(ids, rows)
    lost = "" if counts is None else f" ({_interactions(int(np.asarray(counts)[missing].sum()))})"
    return (f"{int(missing.sum()):,} of the {ids.size:,} distinct {what} ids in {source}{lost} have no row under "
            f"{mapping}, while every id {'minus' if shift > 0 else 'plus'} {abs(shift)} has one: {shifted(shift)}"), shift


def check_holdout_shift(held_ids: np.ndarray, known_ids: np.ndarray, what: str, source: object, known: str) -> list[str]:
    """The warning, where the held-out ``what`` ids fit ``known_ids`` (the ids the training side
    maps: the training log's users, the item table's raw ids; ``known`` in words) only moved by
    one constant, by the rule the training log's ids are held to (:func:`evident_shift`; a shift
    of one where it only fits, :func:`fitting_shift`). Never a refusal: ids alone cannot tell a
    shifted holdout from one with new ids beside training ids without held-out interactions (a
    time split: the earliest users churned, the newest joined, QA13 accuracy F1), so the holdout
    is used as numbered and the warning gives both readings, with the fix of the first (QA12
    Loaders verify-2 A: users 1..40 against a log's 0..39 read recall@10 0.2564 for 1.0, unsaid)."""
    ids, rows = np.asarray(held_ids), np.asarray(known_ids)
    if ids.size == 0 or rows.size == 0 or ids.dtype.kind not in "iu" or rows.dtype.kind not in "iu":
        return []
    ids, rows = np.unique(ids.astype(np.int64)), np.unique(rows.astype(np.int64))
    evident = evident_shift(ids, rows.size, rows)
    shift = evident if evident is not None else fitting_shift(ids, rows.size, rows)
    if shift is None or (evident is None and abs(shift) != 1):  # k new ids beside k ids absent fit a shift of k
        return []
    n_new, n_without = int(np.count_nonzero(~np.isin(ids, rows))), int(np.count_nonzero(~np.isin(rows, ids)))
    misread = (f"each held-out {what} was evaluated on its neighbour's list" if what == "user" else
               f"each held-out {what} was looked for as its neighbour")
    return [
        f"{n_new:,} of the {ids.size:,} distinct {what} ids of {source} {'is' if n_new == 1 else 'are'} not among "
        f"{known}, while every id {'minus' if shift > 0 else 'plus'} {abs(shift)} is: the holdout was used as "
        f"numbered. If its {what} ids are shifted by {shift:+d} against them, {misread}: write them as the training "
        f"log numbers them (each id {-shift:+d}); if {'it is a new ' + what if n_new == 1 else f'they are new {what}s'}"
        f" (left out and counted) beside {n_without:,} {what}{'' if n_without == 1 else 's'} among them without held-out "
        f"{'items' if what == 'user' else 'interactions'}, nothing is wrong"
    ]


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


