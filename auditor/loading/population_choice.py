"""The query population's users chosen (:func:`choose_users`): the eligible users of the
training log, their user-table rows (``users``; the one id rule of :func:`auditor.idmap.table_rows`)
and the sample drawn from them, finished into the :class:`~auditor.model.QueryPopulation`
(:meth:`Chosen.finish`) by :mod:`auditor.loading.population`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from auditor.errors import IdMappingError, QueryError, setting
from auditor.id_spelling import why_none_match
from auditor.idmap import table_rows
from auditor.loading.csr import mean_rows
from auditor.loading.history import rowless_users_note, untrained_rows_note, users_without_history, without_history_notes
from auditor.model import ModelBundle, QueryPopulation
from auditor.sampling import sample_indices
from auditor.values import RowIdPolicy


@dataclass(frozen=True)
class Chosen:
    """The eligible users, the sample drawn from them, and (users) their table rows."""

    source: str
    eligible_ids: np.ndarray
    picked_positions: np.ndarray
    """Positions in ``eligible_ids`` of the chosen users, in query order."""
    user_rows: np.ndarray | None
    """User-table row of each chosen user (``users`` only; -1: a trained user without a row, a zero query)."""
    n_untrained_rows: int | None
    n_unmatched: int
    sampled: bool
    seed: int
    no_history: tuple[int, int] = (0, 0)
    """:func:`~auditor.loading.history.users_without_history`: not queried, not untrained either."""
    order: np.ndarray | None = None
    """Position in the ids :func:`choose_users` was given of each eligible user (None: the same order)."""
    signals: tuple[str, ...] = ()
    """What the user ids' check would have refused, said where ``assume_row_ids`` took them as mapped
    (:func:`~auditor.idmap.table_rows`: the offset or id file that fits; QA12 logs verify-2 N4)."""

    @property
    def raw_ids(self) -> np.ndarray:
        return self.eligible_ids[self.picked_positions]

    @property
    def input_positions(self) -> np.ndarray:
        """Position in the ids :func:`choose_users` was given of each chosen user, in query order."""
        return self.picked_positions if self.order is None else self.order[self.picked_positions]

    def finish(
        self, bundle: ModelBundle, indptr: np.ndarray, seen: np.ndarray, where: str, seen_source: str
    ) -> QueryPopulation:
        n = int(self.picked_positions.size)
        sampled = f", {n:,} sampled with seed {self.seed}" if self.sampled else ""
        rowless = np.zeros(n, dtype=bool)
        if self.source == "users":
            assert self.user_rows is not None and bundle.user_table is not None
            rowless = self.user_rows < 0
            vectors = np.asarray(bundle.user_table[np.where(rowless, 0, self.user_rows)], dtype=np.float32)
            vectors[rowless] = 0.0  # a zero query: served as a zero row is (zero_queries.served_queries)
            without = f" ({self.n_unmatched:,} of them without a row: zero queries)" if self.n_unmatched else ""
            what = f"their user-table rows, for the {self.eligible_ids.size:,} users in {where}{without}{sampled}"
        else:
            vectors = mean_rows(bundle.item_table, indptr, seen)
            what = (f"the mean of their training items (each distinct item once), for the "
                    f"{self.eligible_ids.size:,} users in {where}{sampled}")
        warnings = list(self.signals)
        if self.n_untrained_rows:
            warnings.append(untrained_rows_note(self.n_untrained_rows, where))
        note, more = without_history_notes(self.no_history, where)
        warnings += [note] if note else []
        what += more
        if self.n_unmatched:
            warnings.append(rowless_users_note(self.n_unmatched, where, int(rowless.sum()) if self.sampled else None))
        population = QueryPopulation(
            vectors=vectors, source=self.source, description=f"{self.source}: {what}", raw_ids=self.raw_ids,
            source_rows=self.user_rows,
            seen_indptr=indptr, seen_rows=seen, seen_source=seen_source, n_eligible=int(self.eligible_ids.size),
            eligible_ids=self.eligible_ids, sampled=self.sampled,
            n_user_rows=None if bundle.user_table is None or self.source != "users" else int(bundle.user_table.shape[0]),
            n_untrained_rows=self.n_untrained_rows, n_unmatched_users=self.n_unmatched, warnings=tuple(warnings),
        )
        return population


def choose_users(
    bundle: ModelBundle, source: str, raw: np.ndarray, row_ids: RowIdPolicy, where: str, column: str | None,
    max_queries: int | None, seed: int, every: np.ndarray | None = None,
) -> Chosen:
    """The eligible users and the sample (``users``: those with a user-table row in row order,
    then the trained users without one, in the order given: they are served nothing, as a
    zero query is, so that a row missing from the table moves no other user's group)."""
    user_rows = order = None
    n_untrained, signals = None, list[str]()
    n_unmatched = 0
    no_history = (0, 0)
    if source == "users":
        assert bundle.user_table is not None
        n_rows = int(bundle.user_table.shape[0])
        items = None if bundle.item_ids is not None else ("item", None, bundle.n_items)  # --id-offset shifts them too
        rows = table_rows(raw, bundle.user_ids, n_rows, row_ids, "user", where, column, framework=bundle.format,
                          mapping=bundle.user_ids_source, other=items, signals=signals)
        matched = np.flatnonzero(rows >= 0)
        n_unmatched = int(raw.size - matched.size)
        no_history = users_without_history(bundle, raw, every, row_ids, where, column)  # rowless ones: n_unmatched
        order = np.concatenate([matched[np.argsort(rows[matched], kind="stable")], np.flatnonzero(rows < 0)])
        n_untrained = n_rows - int(np.unique(rows[matched]).size) - no_history[0]
        if matched.size == 0:
            named = f" (column {column!r})" if column else ""
            if bundle.user_ids is not None:
                raise IdMappingError(
                    f"none of the {n_unmatched:,} user ids of {where}{named} is among the raw ids of the user table's "
                    f"rows ({bundle.user_ids_source or setting('user_ids')}): "
                    + why_none_match(raw, bundle.user_ids, bundle.user_ids_source, "user")
                )
            raise QueryError(
                f"none of the users of {where}{named} has a row in the user table, so no user can be queried; pass "
                f"{setting('user_ids')} FILE with the raw user id of each user-table row"
            )
        raw, user_rows = raw[order], rows[order]
    picked = sample_indices(raw.size, max_queries, seed)
    positions = np.arange(raw.size) if picked is None else picked
    return Chosen(
        source=source, eligible_ids=raw, picked_positions=positions,
        user_rows=None if user_rows is None else user_rows[positions],
        n_untrained_rows=n_untrained, n_unmatched=n_unmatched, sampled=picked is not None, seed=seed,
        no_history=no_history if source == "users" else (0, 0), order=order, signals=tuple(signals),
    )
