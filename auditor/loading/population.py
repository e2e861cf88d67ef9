"""Who retrieval serves: the query population, defined once for every audit (docs/measures.md,
"Query population").

A deployed recommender serves the users it was trained on, each the top-K of the items
they have not interacted with. So, whatever the other options:

* **users** (a user table): the users who appear in the training log, each by their
  user-table row. Rows of users who never appear in it (initial, untrained vectors)
  are not queried; they are counted. Users of the log without a row are zero queries, served
  as a zero row is (:func:`~auditor.loading.zero_queries.served_queries`), and counted.
* **history** (no user table, or asked for): the same users, each by the mean vector of
  the distinct items in their training history.
* **file** (``queries`` PATH): the file's rows; nothing identifies their users, so no
  training item can be excluded.

The population is sampled to ``max_queries`` with ``seed`` (users in user-row order;
histories in order of first appearance in the log), queries that are zero as the model
serves them are not queried (their users stay as unserved rows after the queries; a bias
model serves a zero row as [0, 1], :mod:`auditor.loading.zero_queries`), and each query carries its training item
rows (CSR) to exclude from every scoring's candidates unless ``keep_seen``. Without the training log (counts from
``frequencies``) the users of the log are unknown: every user-table row is queried and
nothing is excluded, with a warning. A popaudit checkpoint's recorded pairs stand in for
the log.

The log is streamed twice: the distinct users first (memory: the users), then only the
chosen users' interactions (memory: their training items).
"""

from __future__ import annotations

from dataclasses import replace

from pathlib import Path
from typing import Protocol

import numpy as np

from auditor.errors import InteractionsError, QueryError, setting
from auditor.loading.alignment import mapped_pairs
from auditor.values import ItemRows, RowLookup
from auditor.loading.history import eligible_users
from auditor.sampling import sample_indices
from auditor.loading.csr import build_csr
from auditor.loading.holdout import plain_ids
from auditor.values import RowIdPolicy
from auditor.loading.ids import ids_to_numpy
from auditor.loading.log_memo import LogMemo, ids_identity, log_identity, mapping_identity
from auditor.loading.logs import Log, TypeDrift, maybe_int, open_log, read_ids
from auditor.loading.population_choice import choose_users
from auditor.values import LogSpec
from auditor.loading.queries import sample_query_file
from auditor.loading.served import ServedVectors
from auditor.loading.zero_queries import served_queries
from auditor.model import InteractionPairs, ModelBundle, QueryPopulation
from auditor.progress import SILENT, Progress

SOURCES = ("users", "history", "file")


class PopulationSettings(Protocol):
    """The settings a population is defined by (an :class:`~auditor.config.AuditConfig` has them all)."""

    @property
    def queries(self) -> str | Path: ...
    @property
    def max_queries(self) -> int | None: ...
    @property
    def seed(self) -> int: ...
    @property
    def keep_seen(self) -> bool: ...
    @property
    def training_log(self) -> LogSpec | None: ...
    @property
    def row_ids(self) -> RowIdPolicy: ...
    def item_rows(self, bundle: ModelBundle) -> ItemRows: ...


def population_of(
    bundle: ModelBundle, settings: PopulationSettings, progress: Progress = SILENT, memo: LogMemo | None = None,
    served: ServedVectors | None = None,
) -> QueryPopulation:
    """The query population ``settings`` define for ``bundle`` (:func:`load_population`)."""
    return load_population(
        bundle, queries=settings.queries, log=settings.training_log, mapping=settings.item_rows(bundle),
        row_ids=settings.row_ids, max_queries=settings.max_queries, seed=settings.seed,
        keep_seen=settings.keep_seen, progress=progress, memo=memo, served=served,
    )


def load_population(
    bundle: ModelBundle,
    *,
    queries: str | Path,
    log: LogSpec | None,
    mapping: ItemRows,
    row_ids: RowIdPolicy,
    max_queries: int | None,
    seed: int,
    keep_seen: bool,
    progress: Progress = SILENT,
    memo: LogMemo | None = None,
    served: ServedVectors | None = None,
) -> QueryPopulation:
    """The audit's query population (module docstring) for the ``queries`` setting
    (``auto``, ``users``, ``history`` or a path), from the training ``log`` (items mapped
    by ``mapping``, users by ``bundle.user_ids`` or ``row_ids``), else the checkpoint's pairs.
    ``memo`` keeps what the log gave for the next audit of the same log and mapping; the
    queries are those ``served`` serves ([q, 1] for a bias model), zero ones left out
    (:mod:`auditor.loading.zero_queries`)."""
    source = _source(bundle, queries, log)
    if source == "users" and bundle.user_ids is None and bundle.user_rows_unknown is not None:
        population = _every_user_row(bundle, max_queries, seed, bundle.user_rows_unknown,
                                     f"pass {setting('user_ids')} to query the training users only")
    elif source == "file":
        population = _from_file(bundle, Path(queries), max_queries, seed, has_log=log is not None)
    elif log is not None:
        population = _from_log(bundle, source, log, mapping, row_ids, max_queries, seed, progress, memo or LogMemo())
    elif bundle.train_pairs is not None and len(bundle.train_pairs):
        population = _from_pairs(bundle, source, bundle.train_pairs, max_queries, seed)
    elif source == "users":
        population = _every_user_row(bundle, max_queries, seed, "without the training log the users it holds are "
                                     "unknown", f"pass it as {setting('interactions')} to query them only")
    else:
        raise QueryError(
            f"{setting('queries')} history needs {setting('interactions')} (each user's training items)"
        )
    table = " ".join(filter(None, ("the user table", bundle.user_key, f"in {bundle.source}")))
    what = population.what or {"users": table}.get(source, "history")
    return served_queries(replace(population, keep_seen=keep_seen, seed=seed), what, served)


def _source(bundle: ModelBundle, queries: str | Path, log: LogSpec | None) -> str:
    flag = setting("queries")
    if queries == "auto":
        if bundle.user_table is not None:
            return "users"
        if log is None and (bundle.train_pairs is None or not len(bundle.train_pairs)):
            raise QueryError(
                f"retrieval needs queries: the model has no user table, so pass {flag} PATH "
                f"(a .npy or Parquet file of query vectors) or {setting('interactions')} (history queries)"
            )
        return "history"
    if queries == "users" and bundle.user_table is None:
        raise QueryError(
            f"{flag} users: {bundle.source} has no user table (use {setting('user_key')}, "
            f"{flag} history with {setting('interactions')}, or {flag} PATH)"
        )
    return queries if queries in ("users", "history") else "file"


def _from_file(bundle: ModelBundle, path: Path, max_queries: int | None, seed: int, *, has_log: bool) -> QueryPopulation:
    vectors, rows, n_rows = sample_query_file(path, bundle.dim, max_queries, seed)
    sampled = f", {rows.size:,} sampled with seed {seed}" if rows.size < n_rows else ""
    note = (f"the query vectors of {path} carry no user identity, so training items could not be excluded from the "
            "candidates (every scoring may serve items a user already has)")
    return QueryPopulation(
        vectors=vectors, source="file", description=f"file: query file {path} ({n_rows:,} rows{sampled})",
        what=f"query file {path}", source_rows=rows, n_eligible=n_rows, sampled=rows.size < n_rows,
        warnings=(note,) if has_log else (),
    )


def _every_user_row(bundle: ModelBundle, max_queries: int | None, seed: int, why: str, remedy: str) -> QueryPopulation:
    """Every user-table row, when ``why`` the training users cannot be told apart (no log,
    or rows a framework numbered beyond reproduction)."""
    assert bundle.user_table is not None
    n_rows = int(bundle.user_table.shape[0])
    picked = sample_indices(n_rows, max_queries, seed)
    rows = np.arange(n_rows) if picked is None else picked
    sampled = f", {rows.size:,} sampled with seed {seed}" if picked is not None else ""
    return QueryPopulation(
        vectors=np.asarray(bundle.user_table[rows], dtype=np.float32),
        source="users",
        source_rows=rows,
        description=f"users: every row of the user table ({n_rows:,} rows{sampled}); the training users are unknown",
        n_eligible=n_rows, sampled=picked is not None, n_user_rows=n_rows,
        warnings=(
            f"{why}: every row of the user table was queried (untrained rows included) and training items could "
            f"not be excluded ({remedy})",
        ),
    )


def _from_log(
    bundle: ModelBundle, source: str, spec: LogSpec, mapping: ItemRows, row_ids: RowIdPolicy,
    max_queries: int | None, seed: int, progress: Progress, memo: LogMemo,
) -> QueryPopulation:
    log = open_log(spec)
    if log.user_col is None:
        raise InteractionsError(
            f"retrieval queries the users of the training log, but no user id column was found in {log.path}; "
            f"{log.columns_found()}. Pass {setting('user_col')} NAME"
        )
    base = (log_identity(spec), mapping_identity(mapping))

    def read(as_strings: bool) -> QueryPopulation:
        raw = _eligible(memo, base, log, mapping, as_strings, progress)
        every = memo.peek(("every user", *base, as_strings))  # None: evicted, the rows then count as untrained
        chosen = choose_users(bundle, source, raw, row_ids, f"the training log {log.path}", log.user_col, max_queries, seed,
                         every)
        indptr, seen = memo.get(
            ("seen", *base, as_strings, ids_identity(chosen.raw_ids)),
            lambda: _seen_rows(log, mapping, chosen.raw_ids, as_strings, progress),
        )
        return chosen.finish(bundle, indptr, seen, f"the training log {log.path}", str(log.path))

    return read_ids(log, read)


def _eligible(
    memo: LogMemo, base: tuple[object, ...], log: Log, mapping: ItemRows, as_strings: bool, progress: Progress
) -> np.ndarray:
    """The raw ids of the log's users with an interaction on a table row (first appearance
    order), from ``memo`` when this log and mapping were read before; a log known to drift
    to other id types is read as strings at once."""
    if not as_strings and memo.peek(("drifts", *base)):
        raise TypeDrift

    def read() -> np.ndarray:
        import pyarrow as pa  # loaded already: the log is being read
        import pyarrow.compute as pc

        batches: list[pa.Array] = []
        users = eligible_users(log, mapping, as_strings, progress, batches)
        column = f"user column {log.user_col!r} of {log.path}"
        if len(users) == 0:  # the users' cells all empty, or no item with a row: say which
            why = f"the {column} is empty in every row" if not any(map(len, batches)) else f"no interaction in {log.path} maps onto a row of the item table"
            raise InteractionsError(f"{why}, so no user can be queried")
        every = pc.unique(pa.chunked_array(batches)) if batches else users
        memo.get(("every user", *base, as_strings), lambda: ids_to_numpy(maybe_int(every) if as_strings else every, column))
        return ids_to_numpy(maybe_int(users) if as_strings else users, column)

    try:
        raw: np.ndarray = memo.get(("users", *base, as_strings), read)
    except TypeDrift:
        memo.get(("drifts", *base), lambda: True)
        raise
    return raw


def _seen_rows(
    log: Log, mapping: ItemRows, raw_ids: np.ndarray, as_strings: bool, progress: Progress
) -> tuple[np.ndarray, np.ndarray]:
    """(indptr, item rows) CSR of the training items of the users ``raw_ids`` (in that order)."""
    key = RowLookup(raw_ids)
    owners, rows = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
    with progress.track(f"Queried users' training items: {log.path.name}", total=log.total_rows) as advance:
        for items, batch_users in log.batches(as_strings):
            assert batch_users is not None
            found, item_rows = mapped_pairs(items, batch_users, mapping, log)
            if len(item_rows):
                at = key(plain_ids(found))
                keep = at >= 0
                owners.append(at[keep])
                rows.append(item_rows[keep])
            advance(len(items))
    return build_csr(np.concatenate(owners), np.concatenate(rows), raw_ids.shape[0])


def _from_pairs(
    bundle: ModelBundle, source: str, pairs: InteractionPairs, max_queries: int | None, seed: int
) -> QueryPopulation:
    """The same population from the (user, item-row) pairs a popaudit checkpoint recorded."""
    present = np.flatnonzero(np.bincount(pairs.user_index, minlength=len(pairs.user_ids)) > 0)
    raw = np.asarray(pairs.user_ids)[present]
    chosen = choose_users(bundle, source, raw, RowIdPolicy(), str(bundle.source), None, max_queries, seed)
    position = np.full(len(pairs.user_ids), -1, dtype=np.int64)
    position[present[chosen.input_positions]] = np.arange(chosen.raw_ids.shape[0])
    owner = position[pairs.user_index]
    keep = owner >= 0
    indptr, seen = build_csr(owner[keep], pairs.item_rows[keep], chosen.raw_ids.shape[0])
    population = chosen.finish(bundle, indptr, seen, f"the training pairs recorded in {bundle.source}",
                               f"{bundle.source} (recorded training pairs)")
    recorded = int(np.asarray(bundle.item_frequencies).sum()) if bundle.item_frequencies is not None else 0
    if recorded > len(pairs):
        note = (f"{bundle.source} records {len(pairs):,} of its {recorded:,} training interactions: the others stay "
                f"among the candidates (pass {setting('interactions')} to exclude them all)")
        population = replace(population, warnings=population.warnings + (note,))
    return population


__all__ = ["PopulationSettings", "QueryPopulation", "SOURCES", "load_population", "population_of"]
