"""popaudit plugin: measures of how concentrated the item norms are, and how much
dot-product serving favours long vectors.

Use it with ``--plugin plugins/norm_measures.py``; the audit measures appear under
``measures`` in the JSON report, the list measure beside the built-in ones in every
K's table, and all as flat metrics usable by ``--fail-on``::

    popaudit check model.pt --interactions log.parquet \
        --plugin plugins/norm_measures.py --fail-on 'head_norm_ratio_1pct>1.5' \
        --fail-on 'norm_percentile_ratio@10>1.2'

* ``norm_gini``: the Gini index of the item embedding norms (0: every item has the
  same norm; close to 1: a few items hold all the norm mass).
* ``head_norm_ratio_1pct``: mean norm of the head items divided by the mean norm of
  all items, the head being the 1% head of docs/measures.md (c = max(1, ⌊n/100⌋), every item whose
  frequency is at least that of the c-th most frequent item, ties included, never an
  item of frequency 0: :func:`auditor.metrics.exposure.head_mask`). 1 means
  popular items are no longer than the rest; above 1 is the bias of docs/theory.md.
  Needs item frequencies (``--interactions`` or a checkpoint that records them).
* ``norm_percentile`` (a list measure, measured for every scoring at every K): the mean
  norm percentile of the served items, 0 for the shortest vector of the catalogue and 1
  for the longest (ties share their mean rank). Dot-product lists well above cosine
  lists (``norm_percentile_ratio@K`` > 1) mean serving rewards the norm itself.

All three are of the vectors dot serving sees: for a RecBole graph model its served
(propagated or cached) item vectors, which popaudit hands audit and list measures alike,
not the stored table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from auditor.hookspecs import hookimpl
from auditor.metrics.exposure import ListContext, Slots, gini_index
from auditor.metrics.popularity_sets import head_mask
from auditor.model import ItemStats, ModelBundle


def gini(values: np.ndarray) -> float:
    """Gini index of non-negative values (:func:`auditor.metrics.exposure.gini_index`);
    0 when they sum to zero (equal norms, all 0)."""
    value = gini_index(values)
    return 0.0 if math.isnan(value) else value


def _norms(bundle: ModelBundle) -> np.ndarray:
    return np.linalg.norm(np.asarray(bundle.item_table, dtype=np.float64), axis=1)


@dataclass(frozen=True)
class NormGini:
    """Gini index of the item embedding norms."""

    name: str = "norm_gini"
    description: str = "Gini index of item embedding norms (0 = equal norms)"

    def compute(self, bundle: ModelBundle, stats: ItemStats | None, result: Any) -> float:
        return gini(_norms(bundle))


@dataclass(frozen=True)
class HeadNormRatio:
    """Mean norm of the 1% head items over the mean norm of all items."""

    name: str = "head_norm_ratio_1pct"
    description: str = "mean norm of the 1% most frequent items / mean norm of all items"
    percent: float = 1.0

    def compute(self, bundle: ModelBundle, stats: ItemStats | None, result: Any) -> float | None:
        if stats is None:
            return None  # no frequencies: reported as null, never guessed
        norms = _norms(bundle)
        head = head_mask(stats.frequencies, self.percent)
        mean = norms.mean()
        if mean == 0 or not head.any():  # no norm, or no item was ever seen: no head
            return None
        return float(norms[head].mean() / mean)


@dataclass(frozen=True)
class NormPercentile:
    """Mean norm percentile (0 shortest .. 1 longest) of the items a scoring serves."""

    name: str = "norm_percentile"
    label: str = "mean norm percentile of served items"
    display: str = "pct"
    definition: str = (
        "norm_percentile: mean over filled slots of the served item's norm percentile "
        "(rank among all item norms, 0 = shortest, 1 = longest, ties at their mean rank)"
    )

    def bind(self, context: ListContext) -> Any:
        from scipy.stats import rankdata

        if context.item_table is None or context.n_items < 2:
            return None
        norms = np.linalg.norm(np.asarray(context.item_table, dtype=np.float64), axis=1)
        percentile = (rankdata(norms) - 1.0) / (context.n_items - 1)

        def measure(slots: Slots) -> float:
            filled = slots.valid.sum()
            return float(percentile[slots.safe][slots.valid].sum() / filled) if filled else math.nan

        return measure


@hookimpl
def popaudit_measures() -> list[Any]:
    """The two norm-concentration measures and the served-norm list measure."""
    return [NormGini(), HeadNormRatio(), NormPercentile()]
