"""The queries as the model serves them, and which of them rank nothing (docs/measures.md,
"Query population"): one rule for every population, user rows, history means and query
files alike.

A bias model (:mod:`auditor.loading.item_bias`) serves a query q as [q, 1] ([q/|q|, 1] by
cosine), so a zero user row is served [0, 1]: it ranks by the items' bias, as the model's
own u·i + b_i (or cos(u,i) + b_i, F.normalize leaving 0 at 0) ranks it, and that user is
queried like any other. Only a query that is zero *as served* scores every item 0: it is
not queried, counted (``n_zero``), and its trained user stays a row served nothing.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from auditor.errors import QueryError
from auditor.loading.csr import take_csr
from auditor.loading.item_bias import is_biased, with_bias_column
from auditor.loading.served import ServedVectors
from auditor.model import QueryPopulation


def served_queries(population: QueryPopulation, what: str, served: ServedVectors | None = None) -> QueryPopulation:
    """``population`` with its queries as ``served`` serves them ([q, 1] for a bias model),
    less those that are zero as served (:func:`without_zero_queries`)."""
    if is_biased(served):
        assert served is not None
        population = with_bias_column(population, served)
    return without_zero_queries(population, what)


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
    keep, zero = np.flatnonzero(nonzero), np.flatnonzero(~nonzero)
    indptr, rows, unserved_seen = population.seen_indptr, population.seen_rows, None
    if indptr is not None and rows is not None:
        unserved_seen, (indptr, rows) = take_csr(indptr, rows, zero), take_csr(indptr, rows, keep)
    ids = population.raw_ids
    note = f"{n_zero:,} of {population.n_queries:,} query vectors are zero (they score every item 0) and were " + (
        "left out of retrieval" if ids is None else "not queried: those trained users are served nothing by the "
        "model's scorings (the most-popular list needs no vector), yet count in their user group, drawn among every "
        "trained user, and with a holdout as misses (NDCG 0)")
    return replace(
        population, vectors=np.ascontiguousarray(population.vectors[keep]), seen_indptr=indptr, seen_rows=rows,
        raw_ids=None if ids is None else ids[keep], unserved_ids=None if ids is None else ids[zero],
        unserved_seen=None if ids is None else unserved_seen,
        source_rows=None if population.source_rows is None else population.source_rows[keep], n_zero=n_zero,
        warnings=population.warnings + (note,),
    )


__all__ = ["served_queries", "without_zero_queries"]
