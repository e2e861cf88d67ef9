"""Beside a model, the served lists over the lists-alone catalogue (QA13 harms F1, F2;
docs/served-lists.md, "One figure for one file").

The served scoring's figures describe a file: the lists, the training log and the holdout,
all by raw id. Read through the model's item rows, a listed item without a row leaves its
slot empty and a log item without one drops out of the popularity and of its users'
profiles, so the same lists would get other user groups, ΔGAP, PopRSP, ACLT... than alone.
:func:`served_catalogue` reads them as lists alone do (:func:`load_lists_inputs`: the
catalogue of the log's and the lists' items, their counts, the holdout over it) and lines
them up with the model's queried users; retrieval measures the served scoring over it, and
the model's own scorings (dot, cosine, popular, α) over its rows, as before.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from auditor.config import AuditConfig
from auditor.loading.csr import build_csr
from auditor.loading.served_inputs import load_lists_inputs, log_profiles
from auditor.loading.served_lists import lists_for
from auditor.loading.statistics import InputCache
from auditor.model import ItemStats
from auditor.progress import SILENT, Progress
from auditor.values import ItemRows, lookup_rows

Csr = tuple[np.ndarray, np.ndarray]


@dataclass(frozen=True)
class ServedCatalogue:
    """The served lists of the queried users over the lists-alone catalogue."""

    lists: np.ndarray
    """int64 (population rows, width): catalogue index per slot (-1: empty)."""
    stats: ItemStats
    """The training log's counts over the catalogue (items in the lists but never trained: 0)."""
    item_ids: np.ndarray
    """The catalogue's raw ids (sorted: ties break by id, as alone)."""
    profiles: Csr | None
    """Each population row's training items (catalogue indices); None: the log names no users."""
    population: Csr | None
    """Every log user's training items: the users the served scoring's groups are drawn among, as alone."""
    relevant: Csr | None
    """Each population row's held-out items in the catalogue (None: no ``holdout`` file; see :func:`mapped_relevant`)."""

    @property
    def n_items(self) -> int:
        return int(self.item_ids.shape[0])


def served_catalogue(config: AuditConfig, cache: InputCache, row_ids: np.ndarray,
                     progress: Progress = SILENT) -> ServedCatalogue:
    """The lists, log and holdout of ``config`` read as lists alone read them, at the rows of the model's
    population (``row_ids``: each row's raw user id; a user without a list: an empty one, as beside a model)."""
    alone = load_lists_inputs(config, cache, progress, beside_model=True)  # its warnings: the model route's
    served = alone.served
    assert served.items.item_ids is not None  # a lists' catalogue is named by its ids
    lists, _ = lists_for(served, np.asarray(row_ids))
    profiles, population = (None, None) if alone.profiles is None else log_profiles(config, served, row_ids, progress)
    relevant = None
    if alone.heldout is not None:
        held = alone.heldout
        at = lookup_rows(np.asarray(held.user_ids), np.asarray(row_ids))
        owner = np.repeat(at, np.diff(np.asarray(held.indptr)))
        items = np.asarray(held.items, dtype=np.int64)
        inside = (owner >= 0) & (items < served.items.n_items)  # the group NDCG reads the catalogue's rows only
        relevant = build_csr(owner[inside], items[inside], len(row_ids))
    return ServedCatalogue(lists=lists, stats=alone.stats, item_ids=np.asarray(served.items.item_ids),
                           profiles=profiles, population=population, relevant=relevant)


def mapped_relevant(relevant: Csr, mapping: ItemRows, catalogue: ServedCatalogue) -> Csr:
    """A holdout the model carries (no ``holdout`` file) over the catalogue: its item rows by raw id; an item the
    catalogue lacks (neither trained nor listed) is left out, as the group NDCG alone reads the catalogue only."""
    indptr, rows = (np.asarray(a, dtype=np.int64) for a in relevant)
    at = lookup_rows(mapping.raw_ids(rows), catalogue.item_ids)
    owner = np.repeat(np.arange(indptr.size - 1, dtype=np.int64), np.diff(indptr))
    return build_csr(owner[at >= 0], at[at >= 0].astype(np.int64), indptr.size - 1)


__all__ = ["ServedCatalogue", "mapped_relevant", "served_catalogue"]
