"""What the audit hands the user- and item-side measures and the gain/lose table
(docs/measures.md, "Who pays and which items gain"): the holdout at every list row, and
the items dot serving raises and lowers most over cosine at every K, put in the
retrieval section."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from auditor.loading.csr import build_csr
from auditor.metrics.exposure_shift import exposure_shift
from auditor.model import HeldOutQueries, ItemStats
from auditor.sections import Retrieval
from auditor.values import ItemRows


def relevant_rows(
    heldout: HeldOutQueries | None, n_queries: int, n_items: int | None = None
) -> tuple[np.ndarray, np.ndarray] | None:
    """CSR ``(indptr, item_rows)`` of each list row's held-out items (rows without any
    empty), what the group NDCG and PopREO read; None without a holdout. ``n_items``: the
    catalogue, whose rows alone these measures read (a lists-only holdout numbers the items
    no list holds past it, for the accuracy's misses)."""
    if heldout is None:
        return None
    owner = np.repeat(np.asarray(heldout.positions, dtype=np.int64), np.diff(heldout.indptr))
    items = np.asarray(heldout.items, dtype=np.int64)
    queried = owner < n_queries  # the untrained users that accuracy alone ranks follow the queried ones
    owner, items = owner[queried], items[queried]
    if n_items is not None:
        inside = items < n_items
        owner, items = owner[inside], items[inside]
    return build_csr(owner, items, n_queries)


def with_exposure_shift(
    retrieval: Retrieval,
    exposure: Mapping[str, Mapping[int, np.ndarray]],
    stats: ItemStats,
    norms: np.ndarray,
    item_rows: ItemRows,
    n: int,
) -> Retrieval:
    """``retrieval`` with the gain/lose table of every K it measured (``n`` items a side;
    0: none), its items named by raw id through the audit's ``item_rows`` mapping.
    Frequencies are training interactions whatever the popularity setting."""
    if n == 0:
        return retrieval
    tables = {
        k: exposure_shift(exposure, k, stats.frequencies, norms, item_rows, n=n,
                          n_queries=retrieval.n_queries).to_dict()
        for k in retrieval.at
        if k in exposure.get("dot", {}) and k in exposure.get("cosine", {})
    }
    return replace(retrieval, exposure_shift=tables)
