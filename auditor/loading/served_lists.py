"""Served lists as input: a table of the lists a recommender served (user id, item id, and a
rank or a score per row; Parquet or CSV/TSV with a header) into the (users, K) matrix of
item rows that every list measure takes (:class:`ServedLists`).

The file is read as the interaction logs are (:func:`~auditor.loading.logs.open_log`,
record batches, ids typed as :mod:`auditor.loading.ids` types them, user and item
columns found by :mod:`auditor.loading.sniff`); the rank or score column is found and
checked by :mod:`auditor.loading.served_order`, and the lists built by
:mod:`auditor.loading.served_matrix`. Policies, each counted in the value and worded in
its ``warnings`` where something was changed or left out:

* **users**: one list per distinct user id, in sorted raw-id order (numbers numerically,
  text as text), whatever the file's row order. Users absent from the training log
  (``log_users``) are kept and counted: their lists were served and are measured.
* **items**: with a model (``items``, the audit's :class:`ItemRows`), an item without a
  row in the item table cannot be measured: its slot is left empty (-1) and the items
  after it keep their positions (moving them up would put into the top K items users
  never saw there); counted, and an error when no item has a row. The lists' grade counts
  such an item by raw id all the same (:attr:`ServedLists.rowless`). Without a model the
  reader builds the catalogue: the distinct item ids of the training log
  (``log_items``) and of the lists, sorted, row r being the r-th (:attr:`ServedLists.items`,
  through which the log's counts are aligned). Listed items the log never saw are kept
  as cold items (popularity 0, as the measures already treat cold items); counted, in
  either case, when ``log_items`` is given. Without a model, when no listed item is an item
  of the log the ids evidently do not line up (``i460`` against ``460``) and the reader
  refuses (:class:`IdMappingError` naming the column and one id of each side), as it does
  when no item has a table row; on either route it refuses when more than
  :data:`~auditor.loading.served_ids.UNMATCHED_SLOTS_FLOOR` of the served slots name items the log never saw (the
  exposure figures would describe mostly the spelling, not the service), with a model only those
  that have no table row either; below that the share is a warning, listed first, and ``ServedSection.cold_slot_share``
  (every slot of an item the log never saw, with a row or not, on both routes).
* **order**: rank (lower first; 0- or 1-based, from the file's lowest rank) or score
  (higher first). Ties are broken by the file's item ids (lower first: numbers
  numerically, text as text), not by item row, so one file gives one top K with or
  without a model (a RecBole table numbers items by first appearance, a catalogue by
  sorted id); lists with ties are counted. Ranks
  are compacted (1, 2, 4 fill slots 1, 2, 3; lists with gaps counted): only their order
  counts, so no rank value sizes anything.
* **lengths**: K is the longest list (or ``max_k``, the largest cut-off to be measured);
  shorter lists are padded with -1 and counted; measures at K count filled slots only.
* **refused** (errors naming file, column and data row): an item twice in one list, an
  empty/negative/fractional/non-numeric rank, an empty/NaN/non-numeric score, a file
  without a header, rows or a user column, a matrix beyond the memory budget.
* **left out**: rows with an empty user or item id (counted, as logs count them).

Memory: the rows' codes and keys (about 24 bytes a row) and the matrix.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from auditor.errors import IdMappingError, InteractionsError, ServedListsError, setting
from auditor.io import require_regular_file
from auditor.loading.alignment import rows_of
from auditor.values import ItemRows, lookup_rows
from auditor.loading.ids import ids_to_numpy
from auditor.loading.logs import Log, maybe_int, open_log, read_ids
from auditor.values import LogSpec
from auditor.loading.served_ids import refuse_unmatched_items
from auditor.loading.served_matrix import Matrix, Records, build_lists
from auditor.loading.served_order import OrderColumn, choose_order, order_keys
from auditor.loading.served_rowless import RowlessItems, listed_rowless, union_ids
from auditor.progress import SILENT, Progress

FORMATS = ("auto", "parquet", "csv", "tsv")
"""Formats a served-lists file may be given in (``auto``: Parquet by name or magic bytes, else delimited text)."""


@dataclass(frozen=True)
class ServedLists:
    """The served lists of one file, as item rows (module docstring for the policies)."""

    source: Path
    user_ids: np.ndarray
    """Raw id of each list's user, sorted (int64, or str objects for text ids)."""
    lists: np.ndarray
    """int64 (n_users, K): item rows best first, -1 for an empty slot."""
    items: ItemRows
    """How item ids became rows: the model's mapping, or the catalogue built (``catalogue``)."""
    catalogue: bool
    """True: ``items`` is the catalogue the reader built (no model)."""
    order: OrderColumn
    user_col: str
    item_col: str
    matrix: Matrix
    n_rows: int
    """Data rows of the file."""
    n_empty_ids: int = 0
    """Rows left out for an empty user or item id."""
    n_unknown_items: int = 0
    """With a model: distinct listed items without a row in the item table."""
    n_unknown_rows: int = 0
    """Rows naming those items (their slots left empty)."""
    n_cold_items: int = 0
    """Distinct listed items with a row but absent from ``log_items`` (kept, popularity 0)."""
    n_cold_rows: int = 0
    n_unknown_users: int | None = None
    """Users absent from ``log_users`` (kept); None: the log's users were not given."""
    cold_slot_share: float | None = None
    """Share of the served slots (rows) naming items absent from ``log_items`` (None: not given); beside a model
    those without a table row too, as the lists' grade reads their slots and lists alone count them."""
    warnings: tuple[str, ...] = ()
    rowless: RowlessItems | None = None
    """With a model: the items without a row in its item table, which the lists' grade counts by raw id as lists
    alone do (the listed ones and the slots they leave empty; the log's, :func:`~auditor.loading.served_rowless.
    with_log_counts`); None alone, where the catalogue numbers every item."""

    @property
    def n_users(self) -> int:
        return int(self.lists.shape[0])

    @property
    def k(self) -> int:
        """Slots per list: the longest list (or ``max_k``)."""
        return int(self.lists.shape[1])

    def cutoffs(self, ks: Iterable[int]) -> tuple[int, ...]:
        """The cut-offs the lists are graded at, with a model or without: each of ``ks``, a K
        past their length at their length (so lists shorter than every K asked are graded too)."""
        return tuple(sorted({min(int(k), self.k) for k in ks}))

    @property
    def description(self) -> str:
        """Who was served what, in one sentence (for a report's population statement)."""
        how = (f"{self.order.kind} column {self.order.name!r}"
               + (f", {self.matrix.rank_base}-based" if self.matrix.rank_base is not None else ", higher first"))
        return (f"served lists: the {self.n_users:,} users of {self.source}, lists of up to "
                f"{self.matrix.longest:,} items ordered by {how}")


def read_served_lists(
    spec: LogSpec,
    *,
    rank_col: str | None = None,
    score_col: str | None = None,
    items: ItemRows | None = None,
    log_items: np.ndarray | None = None,
    log_users: np.ndarray | None = None,
    max_k: int | None = None,
    max_memory: int | None = None,
    progress: Progress = SILENT,
    beside_model: bool = False,
) -> ServedLists:
    """The served lists in ``spec``'s file (``spec.user_col``/``item_col`` as for a log).

    ``items``: the audit's item mapping (with a model); None builds the catalogue from
    ``log_items`` (distinct raw item ids of the training log, e.g.
    :attr:`~auditor.loading.counting.IdCounts.ids`) and the lists' items; given with
    ``items`` too, it counts the listed items the log never saw. ``log_users``:
    distinct raw user ids of the training log, to count the served users it lacks.
    ``max_k``: cut every list to this many slots. ``beside_model``: the catalogue read of lists a model's item
    rows already read (:mod:`auditor.loading.served_catalogue`), whose share of unmatched items they judged. Raises
    :class:`ServedListsError` (or
    :class:`IdMappingError` for ids that cannot be rows) naming the file, column and row.
    """
    if max_k is not None and max_k < 1:
        raise ServedListsError(f"max_k must be at least 1, got {max_k}")
    log, order = open_served(spec, rank_col, score_col)
    read = read_ids(log, lambda as_strings: _read(log, order, as_strings, progress))
    if items is None:
        if not beside_model:  # beside a model its item rows decided (the served scoring read as lists alone)
            refuse_unmatched_items(log.path, log.item_col, read.item_ids, read.records.item_codes, log_items)
        catalogue = union_ids(log_items, read.item_ids)
        mapping = ItemRows(catalogue, int(catalogue.size))
        code_rows = lookup_rows(read.item_ids, catalogue)
    else:
        mapping = items
        code_rows = rows_of(pa.array(read.item_ids), items, log)
        if not (code_rows >= 0).any():
            raise _no_item_has_a_row(log, items, int(read.item_ids.size))
        refuse_unmatched_items(log.path, log.item_col, read.item_ids, read.records.item_codes, log_items, code_rows)
    matrix = build_lists(read.records, code_rows, log.path, user_ids=read.user_ids, item_ids=read.item_ids,
                         max_k=max_k, max_memory=max_memory)
    served = ServedLists(
        source=log.path, user_ids=read.user_ids, lists=matrix.lists, items=mapping, catalogue=items is None,
        order=order, user_col=str(log.user_col), item_col=log.item_col, matrix=matrix, n_rows=read.n_rows,
        n_empty_ids=int(read.records.dropped.size),
        rowless=None if items is None else listed_rowless(matrix.rowless, code_rows, read.item_ids),
    )
    return _counted(served, read, code_rows, log_items, log_users)


@dataclass(frozen=True)
class _Read:
    user_ids: np.ndarray
    item_ids: np.ndarray
    records: Records
    n_rows: int


def open_served(spec: LogSpec, rank_col: str | None, score_col: str | None) -> tuple[Log, OrderColumn]:
    """The file opened as a log (format, columns) and its order column, or ServedListsError."""
    path = require_regular_file(spec.path, "recommendations file", error=ServedListsError)
    if spec.fmt not in FORMATS:
        raise ServedListsError(f"served lists are read as {', '.join(FORMATS)}, not {spec.fmt!r}")
    try:
        log = open_log(spec)
    except InteractionsError as exc:  # worded for a log: say what a served-lists file should be
        raise ServedListsError(_reworded(str(exc))) from exc
    if log.kind == "dat":
        raise ServedListsError(f"{path} is a '::'-separated MovieLens file; served lists are Parquet or CSV/TSV")
    if not log.header:
        raise ServedListsError(
            f"{path} has no header: name its columns (user id, item id, and a rank or a score) in a first line"
        )
    if log.user_col is None:
        raise ServedListsError(
            f"cannot find a user id column in {path}; {log.columns_found()}. Pass {setting('user_col')} NAME"
        )
    return log, choose_order(log.columns, path, rank_col, score_col, (log.item_col, log.user_col))


def _reworded(text: str) -> str:
    text = text.replace("no interactions in", "no served lists in")
    if "text interaction log" in text:
        hint = "name it .parquet" if "like a Parquet file" in text else "pass a Parquet or CSV/TSV file of served lists"
        text = text.replace("text interaction log", "text recommendations file").split("; ")[0] + f"; {hint}"
    return text


class _Distinct:
    """The distinct values of a streamed column and each row's code among them: per-batch
    dictionaries, unified once at the end (memory: the codes and the batch dictionaries)."""

    def __init__(self) -> None:
        self.values: list[pa.Array] = []
        self.codes: list[np.ndarray] = []

    def add(self, column: pa.Array) -> None:
        encoded = pc.dictionary_encode(column)
        self.values.append(encoded.dictionary)
        self.codes.append(np.asarray(encoded.indices.to_numpy(zero_copy_only=False)))

    def finish(self) -> tuple[pa.Array, np.ndarray]:
        """(distinct values, int64 code of each row): one hash pass over the dictionaries."""
        if not self.values:
            return pa.array([], pa.int64()), np.empty(0, dtype=np.int64)
        if len({v.type for v in self.values}) > 1:
            self.values = [v.cast(pa.string()) for v in self.values]
        every = pa.concat_arrays(self.values)
        distinct = pc.unique(every)
        where = np.asarray(pc.index_in(every, value_set=distinct).to_numpy(zero_copy_only=False), dtype=np.int64)
        bounds = np.cumsum([0] + [len(v) for v in self.values])
        codes = [where[bounds[i]:bounds[i + 1]][c] for i, c in enumerate(self.codes)]
        return distinct, np.concatenate(codes)


def _read(log: Log, order: OrderColumn, as_strings: bool, progress: Progress) -> _Read:
    users, items = _Distinct(), _Distinct()
    keys: list[np.ndarray] = []
    dropped: list[np.ndarray] = [np.empty(0, dtype=np.int64)]
    n_rows = 0
    with progress.track(f"Served lists: {log.path.name}", total=log.total_rows) as advance:
        for batch_items, batch_users, values in log.value_batches(order.name, as_strings):
            assert batch_users is not None
            batch_keys = order_keys(values, order, log.path, n_rows + 1)
            if batch_items.null_count or batch_users.null_count:
                valid = pc.and_(pc.is_valid(batch_items), pc.is_valid(batch_users))
                kept = np.asarray(valid.to_numpy(zero_copy_only=False), dtype=bool)
                dropped.append(np.flatnonzero(~kept) + n_rows)
                batch_items, batch_users, batch_keys = batch_items.filter(valid), batch_users.filter(valid), batch_keys[kept]
            users.add(batch_users)
            items.add(batch_items)
            keys.append(batch_keys)
            n_rows += len(values)
            advance(len(values))
    where = log.path
    if n_rows == 0:
        raise ServedListsError(f"no served lists in {where}: it has {'a header but ' * (log.kind != 'parquet')}no rows")
    user_ids, user_codes = _typed(users, as_strings, f"user column {log.user_col!r} of {where}")
    item_ids, item_codes = _typed(items, as_strings, f"item column {log.item_col!r} of {where}")
    if user_codes.size == 0:
        raise ServedListsError(f"no served lists in {where}: every row has an empty user or item id")
    records = Records(user_codes=user_codes, item_codes=item_codes, keys=np.concatenate(keys), kind=order.kind,
                      n_users=int(user_ids.size), dropped=np.concatenate(dropped))
    return _Read(user_ids, item_ids, records, n_rows)


def _typed(column: _Distinct, as_strings: bool, what: str) -> tuple[np.ndarray, np.ndarray]:
    """(distinct raw ids, typed as ids are and sorted; each row's code among them)."""
    distinct, codes = column.finish()
    typed = ids_to_numpy(maybe_int(distinct) if as_strings else distinct, what)
    order = np.argsort(typed, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return typed[order], rank[codes].astype(np.int64)


def _no_item_has_a_row(log: Log, items: ItemRows, n: int) -> IdMappingError:
    remedy = (
        "the lists do not name the model's items (check the item column)" if items.item_ids is not None
        else f"pass {setting('item_ids')} FILE with the raw id of each table row"
    )
    return IdMappingError(
        f"none of the {n:,} items in {log.path} (column {log.item_col!r}) has a row in the item table "
        f"({items.n_items:,} rows); {remedy}"
    )


NOT_MEASURED = ("are in none of the served scoring's per-K figures (the model's lists are lined up with the users it "
                "queries, the log's) but grade the severity, as lists alone grade them")
"""Beside a model, the lists of users absent from the training log (RecBole's route:
:data:`auditor.loading.served_inputs.NOT_QUERIED` instead)."""


def _counted(served: ServedLists, read: _Read, code_rows: np.ndarray, log_items: np.ndarray | None,
             log_users: np.ndarray | None) -> ServedLists:
    """``served`` with what was left out, changed or kept counted and worded."""
    path, m, n_users = served.source, served.matrix, served.n_users
    item_codes = read.records.item_codes
    notes: list[str] = []
    if served.n_empty_ids:
        notes.append(f"{_count(served.n_empty_ids, 'row')} of {path} {_has(served.n_empty_ids)} an empty user or item id: left out")
    unknown = np.zeros(code_rows.size, dtype=bool) if served.catalogue else code_rows < 0
    n_unknown, n_unknown_rows = int(unknown.sum()), int(unknown[item_codes].sum())
    if n_unknown_rows:
        notes.append(
            f"{n_unknown_rows:,} of the {item_codes.size:,} served items in {path} ({n_unknown:,} distinct) have no "
            "row in the item table: the served scoring's figures and the lists' grade (the severity) count them by "
            "their raw ids all the same, as lists alone do; only the overlaps with the model's lists and the held-out "
            "accuracy (whose held-out items need a row) read their slots as empty, the items after them keeping "
            "their positions"
        )
    never = np.zeros(code_rows.size, dtype=bool)
    if log_items is not None and len(log_items):  # items the log never saw, with a table row or not
        never = lookup_rows(read.item_ids, np.asarray(log_items)) < 0
    cold = never & ~unknown  # those with a row (every one alone): kept in the measures, popularity 0
    n_never, n_never_rows, n_rowless = int(never.sum()), int(never[item_codes].sum()), int((never & unknown).sum())
    share = n_never_rows / item_codes.size if item_codes.size else 0.0  # as the grade reads their slots: row or not
    if n_never:  # first: the share of slots that do not line up with the log is what to read first
        notes.insert(0,
            f"{n_never:,} of the {read.item_ids.size:,} distinct items in {path} never appear in the training log "
            f"({_count(n_never_rows, 'row')}, {share:.1%} of the served slots): kept as items without training "
            "interactions (popularity 0)" + (f"; {n_rowless:,} of them are also without a row in the item table, "
                                             "counted by raw id all the same" if n_rowless else "")
        )
    absent = None if log_users is None else int((lookup_rows(served.user_ids, np.asarray(log_users)) < 0).sum())
    if absent:
        fate = "are measured all the same" if served.catalogue else NOT_MEASURED
        notes.append(f"{absent:,} of the {n_users:,} users in {path} do not appear in the training log: their lists {fate}")
    if m.n_gap_lists:
        notes.append(f"{m.n_gap_lists:,} of the {n_users:,} lists in {path} skip ranks (as 1, 2, 4): only the order of "
                     "ranks counts, so their items fill consecutive slots")
    if m.n_tied_lists:
        notes.append(f"{m.n_tied_lists:,} of the {n_users:,} lists in {path} give several items the same "
                     f"{served.order.kind}: tied items are ordered by their item id in {path} (lower first: "
                     "numbers numerically, text as text), with or without a model")
    if m.n_short_lists:
        beside = "" if served.catalogue else (
            "; the queried users' lists short of each K are counted apart (served.short_lists)")
        notes.append(f"{m.n_short_lists:,} of the {n_users:,} lists in {path} hold fewer than {served.k:,} items as the "
                     f"file gives them (every user's rows): their empty slots are not counted by any measure at K{beside}")
    return replace(served, warnings=tuple(notes), n_unknown_items=n_unknown, n_unknown_rows=n_unknown_rows,
                   n_cold_items=int(cold.sum()), n_cold_rows=int(cold[item_codes].sum()), n_unknown_users=absent,
                   cold_slot_share=share if log_items is not None and len(log_items) else None)


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'s' * (n != 1)}"


def _has(n: int) -> str:
    return "has" if n == 1 else "have"


def lists_for(served: ServedLists, raw_ids: np.ndarray) -> tuple[np.ndarray, int]:
    """The served lists of the users ``raw_ids`` (an audit population's, in its query
    order): row q is user q's list, all -1 when the file has none for that user; and how
    many users have none."""
    at = lookup_rows(np.asarray(raw_ids), served.user_ids)
    out = np.full((len(at), served.k), -1, dtype=np.int64)
    have = at >= 0
    out[have] = served.lists[at[have]]
    return out, int((~have).sum())


__all__ = ["FORMATS", "NOT_MEASURED", "ServedLists", "lists_for", "open_served", "read_served_lists"]
