"""The built-in measures, registered through ``popaudit_measures`` like any plugin's.

List measures (measured on the top-K lists of every scoring at every K; docs/measures.md):
head share of the 1/10/20% head, ARP, APLT, Gini, coverage, novelty, then the user- and
item-side measures of :mod:`auditor.metrics.group_measures` (ΔGAP, miscalibration and NDCG
per user group, PopRSP, PopREO, ACLT). Each is declared
once here, with its report label, display format and definition; flat names
(``gini_dot@10``, ``gini_ratio@10``), gates, batch columns and report tables follow. The
computations are the tested classes of :mod:`auditor.metrics.exposure`; head share, ARP
and APLT read the per-list counts every built-in measure shares
(:mod:`auditor.metrics.exposure_scorers`), to the bit those classes' numbers.

Audit measures (one value per audit):

* ``item_bias_spearman``: Spearman ρ between a model's per-item bias term and training
  frequency. Matrix-factorisation models (LightFM, cornac, implicit BPR) add a bias to
  every score, a second channel for popularity that norms do not show; None when the
  model has no bias term or no frequencies were counted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from auditor.hookspecs import hookimpl
from auditor.metrics.correlations import spearman
from auditor.metrics import exposure_scorers
from auditor.metrics.exposure import GiniIndex, ItemCoverage, Novelty
from auditor.metrics.group_measures import GROUP_MEASURES
from auditor.metrics.group_state import HEAD_PERCENTS
from auditor.plugin_api import DeclaredListMeasure, ListContext, ListMeasure, Measure, Scorer
from auditor.sections import BUILTIN_LIST_MEASURES

if TYPE_CHECKING:
    from auditor.model import ItemStats, ModelBundle
    from auditor.result import MeasuredSections



def _declared(name: str, definition: str, make: Callable[[ListContext], Scorer | None]) -> DeclaredListMeasure:
    """A built-in measure with the label and display the reports declare for it."""
    info = BUILTIN_LIST_MEASURES[name]
    return DeclaredListMeasure(name, info.label, info.display, definition, make)


def _head_share(percent: int) -> DeclaredListMeasure:
    name = f"head_share_{percent}pct"
    return _declared(
        name,
        f"{name}: share of all filled recommended slots taken by the head; with "
        f"c = max(1, floor({percent}/100 * n_items)) and f_c the popularity of the c-th most "
        "popular item, the head is every item with popularity >= f_c (ties at the cut all "
        "in); items with popularity 0 are never head",
        lambda context: exposure_scorers.head_share(context, percent),
    )  # fmt: skip


def _novelty(context: ListContext) -> Scorer | None:
    if context.user_counts is None or not context.n_users:
        return None  # the audit says why in not_measured (exposure.novelty_unmeasured)
    return Novelty(context.user_counts, context.n_users).measure


EXPOSURE_MEASURES: tuple[DeclaredListMeasure, ...] = (
    *(_head_share(percent) for percent in HEAD_PERCENTS),
    _declared(
        "arp",
        "arp: mean over queries of the mean popularity of the items in the list; items "
        "unseen in training count with popularity 0",
        exposure_scorers.arp,
    ),
    _declared(
        "aplt",
        "aplt: mean over queries of the share of long-tail items in the list; the short "
        "head is the most popular items that together hold 80% of the popularity mass "
        "(ties at the cut all in), everything else (cold items included) is long tail",
        exposure_scorers.aplt,
    ),
    _declared(
        "gini",
        "gini: Gini index of exposure counts over the whole catalogue (items never shown "
        "count 0), G = sum_i (2i - n - 1) x_(i) / (n sum x), x ascending",
        lambda context: GiniIndex(context.n_items).measure,
    ),
    _declared(
        "coverage",
        "coverage: distinct recommended items / catalogue size",
        lambda context: ItemCoverage(context.n_items).measure,
    ),
    _declared(
        "novelty",
        "novelty: mean over queries of the mean -log2(users(i)/n_users) of the list, where "
        "users(i) is the number of distinct training users of item i and n_users the number "
        "of distinct users in the training log (all of them, queried or not); items no "
        "training user saw count as seen by one user (the finite maximum)",
        _novelty,
    ),
)  # fmt: skip
"""The exposure measures, in report order."""

LIST_MEASURES: tuple[DeclaredListMeasure, ...] = (*EXPOSURE_MEASURES, *GROUP_MEASURES)
"""The report's list measures, in report order: the exposure measures, then the user- and
item-side measures (:mod:`auditor.metrics.group_measures`; null where the audit lacks
each user's training items or a holdout)."""


class ItemBiasSpearman:
    """Spearman ρ of item bias vs training frequency (a bias is a second popularity channel)."""

    name = "item_bias_spearman"
    description = (
        "Spearman rho between the model's per-item bias term and training frequency "
        "(null without a bias term): popularity served through the bias, not the norm"
    )

    def compute(self, bundle: ModelBundle, stats: ItemStats | None, result: MeasuredSections) -> float | None:
        biases = getattr(bundle, "item_biases", None)
        return None if biases is None or stats is None else bias_spearman(biases, stats.frequencies)


def bias_spearman(biases: np.ndarray, frequencies: np.ndarray) -> float | None:
    """Spearman ρ of per-item ``biases`` against training ``frequencies`` (None: the
    lengths differ, or either is constant and ρ undefined)."""
    if biases.shape[0] != frequencies.shape[0]:
        return None
    values = np.asarray(biases, dtype=np.float64)
    counts = np.asarray(frequencies, dtype=np.float64)
    if np.ptp(values) == 0 or np.ptp(counts) == 0:  # ρ is undefined for a constant
        return None
    rho = spearman(values, counts).statistic
    return rho if np.isfinite(rho) else None


@hookimpl
def popaudit_measures() -> list[Measure | ListMeasure]:
    """The built-in measures: the report's list measures, then the audit measures."""
    return [*LIST_MEASURES, ItemBiasSpearman()]
