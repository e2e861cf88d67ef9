"""The queries as the model serves them, and which of them rank nothing (docs/measures.md,
"Query population"): one rule for every population, user rows, history means and query
files alike.

A bias model (:mod:`auditor.loading.item_bias`) serves a query q as [q, 1] ([q/|q|, 1] by
cosine), so a zero user row is served [0, 1]: it ranks by the items' bias, as the model's
own u·i + b_i (or cos(u,i) + b_i, F.normalize leaving 0 at 0) ranks it, and that user is
queried like any other. Only a query that is zero *as served* scores every item 0: it is
not queried, counted (``n_zero``), and its trained user stays a row served nothing.

:func:`served_nothing` is the one way a trained user the model serves nothing stays in the
population, whatever the reason: a zero query here, or a training-log user the user table
has no row for (:mod:`auditor.loading.population`), which is a zero query too: served by a
bias model's bias as a zero row is, and nothing by any other model (:func:`served_queries`). Each stays a row after the queries,
with their training profile: in their user group, drawn among every trained user, and
with a holdout a miss.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from auditor.errors import QueryError, setting
from auditor.loading.csr import take_csr
from auditor.loading.item_bias import is_biased, with_bias_column
from auditor.loading.served import ServedVectors
from auditor.model import QueryPopulation


def served_queries(population: QueryPopulation, what: str, served: ServedVectors | None = None) -> QueryPopulation:
    """``population`` with its queries as ``served`` serves them ([q, 1] for a bias model),
    less those that are zero as served (:func:`without_zero_queries`). A training-log user
    without a user-table row (``source_rows`` −1) is a zero query, in every model: a bias model
    serves it [0, 1], by the items' bias, exactly as a zero row; any other model serves it
    nothing (:func:`served_nothing`), counted as rowless (``n_unmatched_users``), not again
    as a zero query."""
    rowless = rowless_queries(population)
    if is_biased(served):
        assert served is not None
        population = with_bias_column(population, served)
    elif rowless.size and rowless.all():  # an empty population stays the caller's to refuse, as before
        raise QueryError(
            f"none of the {rowless.size:,} users sampled from {population.seen_source or 'the log'} with seed "
            f"{population.seed} has a row in the user table, so none can be queried (a model without an item bias "
            f"serves them nothing); raise {setting('max_queries')} or pass another {setting('seed')}")
    elif rowless.any():
        population = served_nothing(population, rowless)
    return without_zero_queries(population, what)


def rowless_queries(population: QueryPopulation) -> np.ndarray:
    """bool, one per query: a training-log user without a user-table row (``source_rows`` −1),
    whose query is a zero vector."""
    if population.source != "users" or population.source_rows is None:
        return np.zeros(population.n_queries, dtype=bool)
    return np.asarray(population.source_rows) < 0


def queried_rows(vectors: np.ndarray) -> np.ndarray:
    """Which query vectors are queried: not one zero in every component, which scores every
    item 0 and ranks nothing (every population's rule; the training monitor's head shares too)."""
    return np.any(vectors, axis=1)


def without_zero_queries(population: QueryPopulation, what: str) -> QueryPopulation:
    """The population without its zero query vectors (they rank nothing), counted, their users
    kept as unserved (``unserved_ids``); a NaN or infinite vector is an error naming its row."""
    finite = np.isfinite(population.vectors).all(axis=1)
    if not finite.all():
        first = int(np.flatnonzero(~finite)[0])
        row = first if population.source_rows is None else int(population.source_rows[first])
        raise QueryError(f"{what} holds NaN or infinite values (first at row {row}, which is queried)")
    nonzero = queried_rows(population.vectors)
    if nonzero.all():
        return population
    if (n_zero := int((~nonzero).sum())) == population.n_queries:
        raise QueryError(f"all {n_zero:,} query vectors are zero; nothing can be retrieved")
    ids = population.raw_ids
    note = f"{n_zero:,} of {population.n_queries:,} query vectors are zero (they score every item 0) and were " + (
        "left out of retrieval" if ids is None else "not queried: those trained users are served nothing by the "
        "model's scorings (the most-popular list needs no vector), yet count in their user group, drawn among every "
        "trained user, and with a holdout as misses (NDCG 0)")
    return replace(served_nothing(population, ~nonzero), n_zero=n_zero, warnings=population.warnings + (note,))


def served_nothing(population: QueryPopulation, nothing: np.ndarray) -> QueryPopulation:
    """``population`` less the queries flagged in ``nothing`` (bool, one per query): their
    trained users move to the unserved rows (``unserved_ids``, after any already there),
    each with their training profile (``unserved_seen``); without user identity they are
    only dropped. The caller counts them and says why."""
    keep, dropped = np.flatnonzero(~nothing), np.flatnonzero(nothing)
    indptr, rows, moved_seen = population.seen_indptr, population.seen_rows, None
    if indptr is not None and rows is not None:
        moved_seen, (indptr, rows) = take_csr(indptr, rows, dropped), take_csr(indptr, rows, keep)
    ids, unserved_ids, unserved_seen = population.raw_ids, population.unserved_ids, population.unserved_seen
    if ids is not None:
        unserved_ids = ids[dropped] if unserved_ids is None else np.concatenate([unserved_ids, ids[dropped]])
        if moved_seen is not None and unserved_seen is not None:  # both known: one CSR, the earlier rows first
            before, before_rows = unserved_seen
            moved_seen = (np.concatenate([before, moved_seen[0][1:] + before[-1]]),
                          np.concatenate([before_rows, moved_seen[1]]))
        unserved_seen = moved_seen
    return replace(
        population, vectors=np.ascontiguousarray(population.vectors[keep]), seen_indptr=indptr, seen_rows=rows,
        raw_ids=None if ids is None else ids[keep], unserved_ids=unserved_ids, unserved_seen=unserved_seen,
        source_rows=None if population.source_rows is None else population.source_rows[keep],
    )


__all__ = ["queried_rows", "rowless_queries", "served_nothing", "served_queries", "without_zero_queries"]
