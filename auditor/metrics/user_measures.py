"""User-side popularity measures: which users pay (docs/measures.md, "Who pays").

Users (the rows of every scoring's lists) are grouped by the popularity of their training
profiles into niche, diverse and blockbuster users (:mod:`auditor.metrics.popularity_groups`).
Per group, at every scoring and K:

* ``gap_delta_<group>``: ΔGAP = (GAP of the lists − GAP of the profiles) / GAP of the
  profiles, GAP being the mean over the group's users of the mean popularity of their
  items (Abdollahpouri et al. 2019): how much more popular the lists are than the
  profiles they serve;
* ``miscalibration_<group>`` and ``miscalibration`` (every grouped user): the mean
  Jensen–Shannon divergence (bits) between a user's profile and list shares of head, mid
  and tail items (Abdollahpouri et al., UMAP 2021);
* ``ndcg_<group>`` (with a holdout): mean NDCG@K of the group's users with held-out items
  (RecBole's NDCG, as the accuracy section's).

They need each list row's training items (``ListContext.profiles``; held-out items too for
NDCG): without them they bind to None and their values are null. The measures are
registered with the built-ins (:mod:`auditor.metrics.group_measures`); :func:`group_table`
is every figure of one scoring at one K at once, for a report's table.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np

from auditor.metrics.exposure import ListContext, Slots
from auditor.plugin_api import DeclaredListMeasure, Scorer
from auditor.metrics.group_state import ListFigures, Prepared, group_mean, prepared
from auditor.metrics.popularity_groups import USER_GROUPS
from auditor.sections import GROUP_LIST_MEASURES



def shown(name: str) -> tuple[str, str, str]:
    """A measure's name with the label and display format the reports declare for it."""
    info = GROUP_LIST_MEASURES[name]
    return name, info.label, info.display


_NEEDS_PROFILES = "null without each user's training items (a query file has none)"
_GROUPING = ("users grouped by the share of their training items among the top popular_percent of items "
             "(niche: lowest niche_fraction, blockbuster: highest blockbuster_fraction, diverse: the rest; "
             "retrieval.definitions.popularity_groups)")  # fmt: skip


def gap_delta(state: Prepared, figures: ListFigures, group: int) -> float:
    """ΔGAP of one user group: users with a profile and a non-empty list."""
    if state.user_group is None or state.profile_pop is None:
        return math.nan
    rows = (state.user_group == group) & np.isfinite(state.profile_pop) & np.isfinite(figures.list_pop)
    if not rows.any():
        return math.nan
    profile = float(state.profile_pop[rows].mean())
    served = float(figures.list_pop[rows].mean())
    return (served - profile) / profile if profile > 0 else math.nan


def miscalibration(state: Prepared, figures: ListFigures, group: int | None) -> float:
    """Mean JS divergence over one group's users (``None``: every grouped user)."""
    if figures.js is None or state.user_group is None:
        return math.nan
    if group is None:
        chosen = figures.js[(state.user_group >= 0) & np.isfinite(figures.js)]
        return float(chosen.mean()) if chosen.size else math.nan
    return group_mean(figures.js, state.user_group, group)


def group_ndcg(state: Prepared, figures: ListFigures, group: int) -> float:
    """Mean NDCG@K of one group's users with held-out items."""
    if figures.ndcg is None or state.user_group is None or state.relevant_rows is None:
        return math.nan
    return group_mean(figures.ndcg, state.user_group[state.relevant_rows], group)


def _bound(read: Callable[[Prepared, ListFigures], float], needs_relevant: bool = False) -> Callable[
    [ListContext], Scorer | None
]:
    """A ``make`` for :class:`DeclaredListMeasure`: None when the context lacks the inputs."""

    def make(context: ListContext) -> Scorer | None:
        if context.profiles is None or (needs_relevant and context.relevant is None):
            return None
        state = prepared(context)

        def measure(slots: Slots) -> float:
            return read(state, state.figures(slots))

        return measure

    return make


def _group_measures(code: int, group: str) -> tuple[DeclaredListMeasure, ...]:
    return (
        DeclaredListMeasure(
            *shown(f"gap_delta_{group}"),
            f"gap_delta_{group}: (GAP of the lists − GAP of the profiles) / GAP of the profiles over the "
            f"{group} users with a non-empty list, GAP = mean over users of the mean popularity of their items "
            f"(Abdollahpouri et al. 2019); {_GROUPING}; {_NEEDS_PROFILES}",
            _bound(lambda s, f: gap_delta(s, f, code)),
        ),
        DeclaredListMeasure(
            *shown(f"miscalibration_{group}"),
            f"miscalibration_{group}: mean over the {group} users with a non-empty list of the Jensen-Shannon "
            "divergence (log base 2, in [0, 1]) between the shares of head, mid and tail items in the user's "
            f"training profile and in the list (Abdollahpouri et al., UMAP 2021); {_GROUPING}; {_NEEDS_PROFILES}",
            _bound(lambda s, f: miscalibration(s, f, code)),
        ),
        DeclaredListMeasure(
            *shown(f"ndcg_{group}"),
            f"ndcg_{group}: mean NDCG@K (as the accuracy section's) over the {group} users with held-out items; "
            f"{_GROUPING}; null without a holdout or without each user's training items",
            _bound(lambda s, f: group_ndcg(s, f, code), needs_relevant=True),
        ),
    )  # fmt: skip


USER_MEASURES: tuple[DeclaredListMeasure, ...] = (
    *(m for code, group in enumerate(USER_GROUPS) for m in _group_measures(code, group)),
    DeclaredListMeasure(
        *shown("miscalibration"),
        "miscalibration: mean over every user with a training profile and a non-empty list of the "
        "Jensen-Shannon divergence (log base 2) between the profile's and the list's shares of head, mid and "
        f"tail items; {_NEEDS_PROFILES}",
        _bound(lambda s, f: miscalibration(s, f, None)),
    ),
)  # fmt: skip
"""The user-side list measures, in report order."""


@dataclass(frozen=True)
class GroupFigures:
    """Every user-side figure of one user group for one scoring at one K."""

    group: str
    n_users: int
    """Users of the group (training profile known), served or not."""
    gap_profile: float
    """GAP of the profiles of the group's users with a non-empty list."""
    gap_list: float
    """GAP of their lists."""
    gap_delta: float
    miscalibration: float
    n_evaluated: int
    """The group's users with held-out items (0 without a holdout)."""
    ndcg: float | None
    """Their mean NDCG@K (None without a holdout)."""

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def group_table(context: ListContext, lists: np.ndarray | Slots) -> list[GroupFigures] | None:
    """Every user-side figure per group for one scoring's lists at one K (None without
    profiles): the rows of a report's "who pays" table."""
    if context.profiles is None:
        return None
    state = prepared(context)
    slots = lists if isinstance(lists, Slots) else Slots(np.asarray(lists), context.n_items)
    figures = state.figures(slots)
    assert state.user_group is not None and state.profile_pop is not None
    rows_out: list[GroupFigures] = []
    for code, group in enumerate(USER_GROUPS):
        members = state.user_group == code
        served = members & np.isfinite(state.profile_pop) & np.isfinite(figures.list_pop)
        evaluated = 0 if state.relevant_rows is None else int(members[state.relevant_rows].sum())
        rows_out.append(GroupFigures(
            group=group,
            n_users=int(members.sum()),
            gap_profile=float(state.profile_pop[served].mean()) if served.any() else math.nan,
            gap_list=float(figures.list_pop[served].mean()) if served.any() else math.nan,
            gap_delta=gap_delta(state, figures, code),
            miscalibration=miscalibration(state, figures, code),
            n_evaluated=evaluated,
            ndcg=None if figures.ndcg is None else group_ndcg(state, figures, code),
        ))  # fmt: skip
    return rows_out
