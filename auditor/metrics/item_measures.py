"""Item-side popularity measures with Elliot's definitions (docs/measures.md, "Which items
gain"): parity between short-head and long-tail items.

The short head is the most popular items holding ``short_head_mass`` (0.8) of the
popularity mass, every other item is long tail (the split of ``aplt``; Elliot's
``Popularity`` with ``pop_ratio`` 0.8, which counts distinct users per item: popaudit's
``popularity users``). Over every list row u with top-K set L_u and training items T_u:

* ``pop_rsp`` (Zhu et al., SIGIR 2020; Elliot ``PopRSP``): with
  P(g) = Σ_u |L_u ∩ g| / Σ_u |g − T_u| for g = short head, long tail, the relative
  standard deviation std/mean of the two (population std: |a − b| / (a + b));
* ``pop_reo`` (Elliot ``PopREO``), over rows with held-out items R_u:
  P(g) = Σ_u |L_u ∩ R_u ∩ g| / Σ_u |(g ∩ R_u) − T_u|, then std/mean;
* ``aclt`` (Abdollahpouri et al. 2019; Elliot ``ACLT``): mean of |L_u ∩ long tail| over the
  rows with a non-empty list.

The ``− T_u`` is Elliot's, who never serves training items. It is dropped for every row
when training items stay candidates (``keep_seen``, ``ListContext.seen_kept``), and
otherwise for the rows whose own list re-serves one of their training items (served lists
are measured as served), so one slot moves one user's denominator
(:mod:`auditor.metrics.parity_candidates`). Rows without a list add no candidates.

0 is parity for the first two; both are NaN when a probability is undefined (an empty
group) or both are 0. Lists hold distinct items (as every scoring serves), so a list's
count of items is the size of its set.
"""

from __future__ import annotations

import math

import numpy as np

from auditor.metrics.exposure import ListContext, Slots
from auditor.metrics.group_state import ListFigures, Prepared, prepared, relative_std
from auditor.metrics.user_measures import shown
from auditor.plugin_api import DeclaredListMeasure, Scorer


def pop_rsp(state: Prepared, slots: Slots) -> float:
    """PopRSP of one list matrix (module docstring)."""
    if state.rsp_candidates is None:
        return math.nan
    figures = state.figures(slots)
    in_tail = int(figures.counts[:, state.kinds.column("long_tail")].sum())
    numerator = (float(int(figures.filled.sum()) - in_tail), float(in_tail))
    return relative_std(numerator, state.rsp_candidates.summed(figures.filled > 0, _kept(state, figures)))


def pop_reo(state: Prepared, slots: Slots) -> float:
    """PopREO of one list matrix (module docstring)."""
    figures = state.figures(slots)
    if figures.reo_numerator is None or state.reo_candidates is None:
        return math.nan
    return relative_std(figures.reo_numerator, state.reo_candidates.summed(figures.filled > 0, _kept(state, figures)))


def _kept(state: Prepared, figures: ListFigures) -> np.ndarray | bool:
    """Whose training items are candidates: everyone's with keep_seen, else those whose list re-serves one."""
    return True if state.seen_kept or figures.reserving is None else figures.reserving


def aclt(state: Prepared, slots: Slots) -> float:
    """ACLT: mean over the rows with a list (a filled slot) of their long-tail items (NaN:
    none). A row without a list is a user nobody served (no served list, or no candidate),
    not a list of no long-tail item: Elliot averages over the users with recommendations,
    as APLT and ARP skip empty rows, so that full lists keep ACLT = K · APLT."""
    figures = state.figures(slots)
    listed = figures.filled > 0
    if not listed.any():
        return math.nan
    return float(figures.count(state.kinds.column("long_tail"))[listed].mean())


def _make_rsp(context: ListContext) -> Scorer | None:
    if context.profiles is None:
        return None
    state = prepared(context)
    return lambda slots: pop_rsp(state, slots)


def _make_reo(context: ListContext) -> Scorer | None:
    if context.profiles is None or context.relevant is None:
        return None
    state = prepared(context)
    return lambda slots: pop_reo(state, slots)


def _make_aclt(context: ListContext) -> Scorer | None:
    state = prepared(context)
    return lambda slots: aclt(state, slots)


_SPLIT = ("the short head is the most popular items holding short_head_mass (0.8) of the popularity mass "
          "(ties at the cut all in), every other item long tail")  # fmt: skip

ITEM_MEASURES: tuple[DeclaredListMeasure, ...] = (
    DeclaredListMeasure(
        *shown("pop_rsp"),
        "pop_rsp: std / mean of P(g) = Σ_u |L_u ∩ g| / Σ_u |g − T_u| over g = short head, long tail "
        "(L_u the list, T_u the user's training items; population std, so |a − b| / (a + b)); 0 is parity "
        f"(Zhu et al. 2020, Elliot PopRSP); {_SPLIT}; null without each user's training items",
        _make_rsp,
    ),
    DeclaredListMeasure(
        *shown("pop_reo"),
        "pop_reo: std / mean of P(g) = Σ_u |L_u ∩ R_u ∩ g| / Σ_u |(g ∩ R_u) − T_u| over g = short head, long "
        "tail, over users with held-out items R_u; 0 is parity (Zhu et al. 2020, Elliot PopREO); "
        f"{_SPLIT}; null without a holdout or without each user's training items",
        _make_reo,
    ),
    DeclaredListMeasure(
        *shown("aclt"),
        f"aclt: mean over every non-empty list of its number of long-tail items (Abdollahpouri et al. 2019, "
        f"Elliot ACLT); "
        f"{_SPLIT}",
        _make_aclt,
    ),
)  # fmt: skip
"""The item-side list measures, in report order."""
