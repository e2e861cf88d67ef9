"""The registered list measures bound to one audit's statistics: what retrieval measures
every scoring's top-K lists with.

The measures come through ``popaudit_measures`` (built-ins from
:mod:`auditor.metrics.builtin_measures`, then plugins'); each is built once per audit
(``bind``) and then called once per scoring and K on the same prepared
:class:`~auditor.metrics.exposure.Slots`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from auditor.config import GroupPolicy
from auditor.metrics.builtin_measures import LIST_MEASURES
from auditor.metrics.exposure import id_order, popular_order
from auditor.plugin_api import ListContext, Slots, as_slots
from auditor.result import ListMeasureInfo, ListMeasures

if TYPE_CHECKING:
    from auditor.hookspecs import ListMeasure


def measure_info(measures: Sequence[ListMeasure]) -> dict[str, ListMeasureInfo]:
    """Name -> report label and display format, in report order."""
    return {m.name: ListMeasureInfo(m.label, m.display) for m in measures}


class ExposureMeasures:
    """Every list measure of the report (``docs/measures.md``, and plugins'), built once
    from the training statistics.

    ``popularity`` is what "popular" means for head share, ARP, APLT and the
    most-popular list (interactions or distinct users per item, ``popularity``);
    novelty always uses distinct users and is None when they are unknown. ``profiles`` and
    ``relevant`` (CSR of each list row's training and held-out items) and ``groups`` (the
    cut-offs) are what the user- and item-side measures read, the user groups drawn among
    ``population`` (CSR of every user's training items; None: the list rows); ``seen_kept``:
    training items stay candidates (``keep_seen``). ``measures``
    (default: the built-in ones) are the registered list measures, in report order.
    """

    def __init__(
        self,
        popularity: np.ndarray,
        user_counts: np.ndarray | None = None,
        n_users: int | None = None,
        *,
        measures: Sequence[ListMeasure] = LIST_MEASURES,
        item_table: np.ndarray | None = None,
        item_ids: np.ndarray | None = None,
        profiles: tuple[np.ndarray, np.ndarray] | None = None,
        relevant: tuple[np.ndarray, np.ndarray] | None = None,
        groups: GroupPolicy | None = None,
        seen_kept: bool = False,
        population: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> None:
        self.popularity = np.asarray(popularity)
        self.n_items = int(self.popularity.shape[0])
        context = ListContext(self.popularity, user_counts, n_users, item_table, item_ids, profiles, relevant, groups,
                              seen_kept, population)
        self.context = context
        """What every measure was bound to (the report's per-group table reads it too)."""
        self.info = measure_info(measures)
        self._bound: dict[str, Callable[[Slots], float | None] | None] = {
            m.name: m.bind(context) for m in measures
        }

    def measure(self, lists: np.ndarray | Slots) -> ListMeasures:
        """Every measure of one (n_queries, K) list matrix (None: not measurable)."""
        slots = as_slots(lists, self.n_items)
        return ListMeasures({name: None if scorer is None else scorer(slots) for name, scorer in self._bound.items()})

    def popular_list(self, k: int) -> np.ndarray:
        """The k most popular item rows (ties by raw item id, else by row), the same for every query."""
        return popular_order(self.popularity, k, id_order(self.context.item_ids))
