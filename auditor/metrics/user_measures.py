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

import numpy as np

from auditor.errors import setting
from auditor.loading.counts_only import counts_only
from auditor.metrics.exposure import ListContext, Slots
from auditor.plugin_api import DeclaredListMeasure, Scorer
from auditor.metrics.group_state import GroupFigures, ListFigures, Prepared, prepared
from auditor.metrics.popularity_groups import DEFAULT_GROUPS, USER_GROUPS, cut_sizes
from auditor.sections import GROUP_LIST_MEASURES, TIED_GROUPS
from auditor.sections import WHO_PAYS as WHO_PAYS  # its home is the values layer; audit code reads it here


def tied_ratio(context: ListContext) -> float | None:
    """The one popular ratio every user with training items shares, when they all do (None:
    they differ, or no profiles): then no user is more niche or more blockbuster than
    another, and the groups are undefined. The one test of a tie, which the warning and the
    retrieval section (``Retrieval.tied_ratio``, read by the Who-pays table) quote."""
    if context.profiles is None:
        return None
    state = prepared(context)
    return None if state.user_group is None else state.sole_ratio


GROUP_SIZE_FACTOR = 2.0
"""How far users tied at a cut may move a group from its size by position (``niche_fraction``
from the bottom, ``blockbuster_fraction`` from the top, the rest) before a warning says so:
to more than this many times that size, or less than its inverse."""


def group_sizes(context: ListContext) -> tuple[int, ...] | None:
    """Users drawn into each group (niche, diverse, blockbuster; None without profiles)."""
    if context.profiles is None:
        return None
    state = prepared(context)
    if state.user_group is None:
        return None
    return state.n_members  # drawn among the population: the list rows, or every user of the log


def _asked(context: ListContext) -> tuple[float, float, float]:
    policy = context.groups or DEFAULT_GROUPS
    return policy.niche_fraction, 1.0 - policy.niche_fraction - policy.blockbuster_fraction, policy.blockbuster_fraction


def _by_position(context: ListContext, n: int) -> tuple[int, int, int]:
    """The group sizes of ``n`` users by position alone (no ties at the cuts)."""
    n_niche, n_block = cut_sizes(n, context.groups or DEFAULT_GROUPS)
    return n_niche, n - n_niche - n_block, n_block


def group_definitions(context: ListContext) -> dict[str, str]:
    """The report's ``retrieval.definitions`` entries of the user groups: the cut-offs
    (``popularity_groups``, which ``popaudit diff`` compares) and, with profiles, the sizes
    drawn (``user_group_sizes``: ties at a cut move them from the shares asked)."""
    definitions = (context.groups or DEFAULT_GROUPS).definitions()
    if (sizes := group_sizes(context)) is not None and (total := sum(sizes)):
        drawn = ", ".join(f"{n:,} {name} ({n / total:.1%})" for n, name in zip(sizes, USER_GROUPS))
        asked = " / ".join(f"{share:.0%}" for share in _asked(context))
        definitions["user_group_sizes"] = (f"user groups drawn: {drawn} of {total:,} users with training items "
                                           f"(asked: {asked}; users tied at a cut join its group)")
    return definitions


def tied_groups_warning(context: ListContext) -> str | None:
    """Why the niche and blockbuster groups are empty when every user shares one popular
    ratio, or how far users tied at a cut moved the groups from their sizes by position
    (past :data:`GROUP_SIZE_FACTOR`); None: neither, or no profiles."""
    if (ratio := tied_ratio(context)) is None:
        return _uneven_groups_warning(context)
    n = sum(group_sizes(context) or ())
    return (f"all {n:,} users with training items {TIED_GROUPS} ({ratio:.2f} of their items "
            "popular): no user is more niche or more blockbuster than another, so the user groups are undefined: "
            "all count as diverse, and the niche and blockbuster figures are null")


def _uneven_groups_warning(context: ListContext) -> str | None:
    sizes = group_sizes(context)
    total = 0 if sizes is None else sum(sizes)
    if sizes is None or total == 0:
        return None
    moved = [drawn > GROUP_SIZE_FACTOR * placed or drawn * GROUP_SIZE_FACTOR < placed
             for drawn, placed in zip(sizes, _by_position(context, total)) if placed]
    if not any(moved):
        return None
    drawn = ", ".join(f"{name} {n / total:.0%}" for name, n in zip(USER_GROUPS, sizes))
    asked = ", ".join(f"{name} {share:.0%}" for name, share in zip(USER_GROUPS, _asked(context)))
    return (f"users tied at the user groups' cuts join its group, and many users share a popular ratio here (as in "
            f"short histories): the groups drawn are {drawn} of the {total:,} users with training items, far from "
            f"the shares asked ({asked}); the Who-pays figures compare these groups")




def who_pays_unmeasured(origin: str) -> str:
    """Why the measures of :data:`WHO_PAYS` are null: ``origin`` ``frequencies`` (counts
    alone), ``file`` (a query file) or anything else (the queried users' training items are
    unknown)."""
    what = ("the user- and item-side measures (Who pays: ΔGAP, miscalibration and NDCG per user group; PopRSP, "
            "PopREO) need each queried user's training items")
    if origin == "frequencies":
        return f"{what}; {counts_only()}"
    if origin == "file":
        return f"{what}, but the query vectors of {setting('queries')} PATH carry no user identity"
    return (f"{what}, which are unknown here: pass the training log, with its user column, as "
            f"{setting('interactions')}")


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
    return math.nan if figures.groups is None else figures.groups[group].gap_delta


def miscalibration(state: Prepared, figures: ListFigures, group: int | None) -> float:
    """Mean JS divergence over one group's users (``None``: every grouped user)."""
    if figures.groups is None:
        return math.nan
    return figures.miscalibration if group is None else figures.groups[group].miscalibration


def group_ndcg(state: Prepared, figures: ListFigures, group: int) -> float:
    """Mean NDCG@K of one group's users with held-out items."""
    value = None if figures.groups is None else figures.groups[group].ndcg
    return math.nan if value is None else value


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


def group_table(context: ListContext, lists: np.ndarray | Slots) -> list[GroupFigures] | None:
    """Every user-side figure per group for one scoring's lists at one K (None without
    profiles): the rows of a report's "who pays" table."""
    if context.profiles is None:
        return None
    state = prepared(context)
    slots = lists if isinstance(lists, Slots) else Slots(np.asarray(lists), context.n_items)
    groups = state.figures(slots).groups
    assert groups is not None  # prepared with profiles
    return list(groups)
