"""What the built-in list measures share within one audit: the popularity groups, the
item masks they count and per-user profile figures, prepared once per :class:`ListContext`,
and the per-list figures of one scoring at one K (every list's count of each kind of item,
its mean popularity, JS divergence, NDCG, the per-group table), computed once per
:class:`Slots` however many of those measures read them: a batch row measures 6 scorings at
2 cut-offs with 17 measures each, and each figure is one pass over the list matrix at most.

Each registered measure is bound separately (``ListMeasure.bind``), so the preparation is
memoised by the context's identity (a few entries, checked by a weak reference: a
recycled ``id`` never returns another audit's groups), and the per-list figures by the
identity of the last ``Slots`` measured (retrieval measures one scoring and K at a time).
Profiles that cannot change (read-only arrays: a batch worker's kept query population)
also let the last preparation serve the next audit with the same profile arrays,
popularity and cut-offs (another model of the batch), without a holdout.
"""

from __future__ import annotations

import hashlib
import math
import threading
import weakref
from dataclasses import dataclass, field
import numpy as np

from auditor.metrics.accuracy import HeldOutHits
from auditor.metrics.exposure import HeadShare, ListContext, LongTailShare, Slots
from auditor.metrics.held_hits import HeldTable, held_table
from auditor.metrics.parity_candidates import (
    Candidates,
    catalogue_candidates,
    held_candidates,
    trained_table,
)
from auditor.metrics.item_kinds import ItemKinds, item_kinds
from auditor.metrics.popularity_groups import (
    DEFAULT_GROUPS,
    USER_GROUPS,
    GroupPolicy,
    Profiles,
    as_profiles,
    groups_by_ratio,
    item_groups,
    long_tail,
    popular_ratio,
    sole_ratio,
)
from auditor.plain import asdict

N_GROUPS = 3
_MAX_CONTEXTS = 4
HEAD_PERCENTS = (1, 10, 20)
"""The heads of the report's ``head_share_<p>pct`` (mask ``head_<p>pct``)."""
GROUP_MASKS = ("group_head", "group_mid", "group_tail")
"""The masks of the head, mid and tail item groups (codes 0, 1, 2)."""


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


@dataclass
class ListFigures:
    """Per-list figures of one scoring at one K (one row per list)."""

    list_pop: np.ndarray
    """Mean popularity of the list's filled slots (NaN: nothing served)."""
    counts: np.ndarray
    """int64 (n_rows, n_masks): the list's items in each of ``Prepared.kinds``' masks."""
    filled: np.ndarray
    """int64 (n_rows,): the list's filled slots."""
    js: np.ndarray | None = None
    """Jensen–Shannon divergence of the profile's and the list's head/mid/tail shares (NaN: no profile or no list)."""
    ndcg: np.ndarray | None = None
    """NDCG@K of each row with held-out items (aligned with ``Prepared.relevant_rows``)."""
    reserving: np.ndarray | None = None
    """bool (n_rows,): the row's list holds one of its training items (None: ``seen_kept`` or no profiles)."""
    reo_numerator: tuple[float, float] | None = None
    """Recommended relevant short-head and long-tail items, summed over users (PopREO)."""
    groups: tuple[GroupFigures, ...] | None = None
    """Every user-side figure per user group (None without profiles)."""
    miscalibration: float = math.nan
    """Mean JS divergence over every grouped user with a profile and a non-empty list."""

    def count(self, column: int) -> np.ndarray:
        """int64 (n_rows,): each list's items in the mask of ``column`` (contiguous)."""
        return np.ascontiguousarray(self.counts[:, column])


@dataclass
class Prepared:
    """One audit's groups and profile figures (``None`` fields: the input is missing)."""

    policy: GroupPolicy
    popularity: np.ndarray
    item_group: np.ndarray
    """Head/mid/tail code per item row."""
    tail: np.ndarray
    """Elliot's long tail (bool per item row); the short head is its complement."""
    kinds: ItemKinds
    """Every mask the built-in measures count per list (:func:`item_masks`), packed."""
    profiles: Profiles | None = None
    user_group: np.ndarray | None = None
    """Niche/diverse/blockbuster code per list row (-1: empty profile)."""
    sole_ratio: float | None = None
    """The popular ratio every profiled row shares, when they all do (all diverse then)."""
    profile_pop: np.ndarray | None = None
    """Mean popularity of each row's profile items (NaN: empty profile)."""
    profile_shares: np.ndarray | None = None
    """(n_rows, 3) head/mid/tail shares of each row's profile (NaN rows: empty profile)."""
    seen_kept: bool = False
    """Training items are candidates of every row (``keep_seen``)."""
    rsp_candidates: Candidates | None = None
    """Each row's short-head and long-tail candidates (PopRSP; :mod:`~auditor.metrics.parity_candidates`)."""
    trained: HeldTable | None = None
    """Each row's training items, to find the lists that re-serve some (without ``seen_kept``)."""
    relevant: Profiles | None = None
    relevant_rows: np.ndarray | None = None
    """The list rows with held-out items, ascending."""
    held: HeldTable | None = None
    """``relevant`` restricted to ``relevant_rows``, ready to find a list matrix's hits."""
    reo_candidates: Candidates | None = None
    """Each row's held-out short-head and long-tail items, without and with its training items (PopREO)."""
    members: tuple[np.ndarray, ...] = ()
    """Per user group: which list rows belong to it (with profiles)."""
    profiled: tuple[np.ndarray, ...] = ()
    """Per user group: its rows whose profile popularity is finite."""
    n_members: tuple[int, ...] = ()
    """Per user group: its users (its rows, or its users of ``ListContext.population``)."""
    n_evaluated: tuple[int, ...] = ()
    """Per user group: its rows with held-out items (empty without a holdout)."""
    source_profiles: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False)
    """The profile arrays this state was prepared from (a shared state is checked against them)."""
    _last: tuple[weakref.ref[Slots], ListFigures] | None = field(default=None, repr=False)

    def figures(self, slots: Slots) -> ListFigures:
        """The per-list figures of ``slots``, computed once for every measure that reads them."""
        last = self._last
        if last is not None and last[0]() is slots:
            return last[1]
        figures = _list_figures(self, slots)
        self._last = (weakref.ref(slots), figures)
        return figures


_CACHE: dict[int, tuple[weakref.ref[ListContext], Prepared]] = {}
_LOCK = threading.Lock()


def prepared(context: ListContext) -> Prepared:
    """The groups and profile figures of ``context``, prepared once (module docstring)."""
    key = id(context)
    with _LOCK:
        entry = _CACHE.get(key)
        if entry is not None and entry[0]() is context:
            return entry[1]
    shared = _shared_key(context)
    state = _SHARED.get(shared) if shared is not None else None
    if state is None or not _same_arrays(state, context):
        state = _prepare(context)
        if shared is not None:
            with _LOCK:
                _SHARED.clear()  # one: the audits of a batch share one log's profiles
                _SHARED[shared] = state
    with _LOCK:
        for stale in [k for k, (ref, _) in _CACHE.items() if ref() is None]:
            del _CACHE[stale]
        while len(_CACHE) >= _MAX_CONTEXTS:
            del _CACHE[next(iter(_CACHE))]
        _CACHE[key] = (weakref.ref(context), state)
    return state


_SHARED: dict[tuple[object, ...], Prepared] = {}
"""The last state prepared from read-only profiles (a worker's kept query population),
for the next audit of the same population and popularity (another model of a batch)."""


def _shared_key(context: ListContext) -> tuple[object, ...] | None:
    """What the prepared state depends on, when it can outlive its context: read-only
    profile arrays (they cannot change; kept by identity), no holdout, the popularity
    and group cut-offs by value. None otherwise."""
    if context.profiles is None or context.relevant is not None or context.population is not None:
        return None
    indptr, rows = context.profiles
    if indptr.flags.writeable or rows.flags.writeable:
        return None
    popularity = np.ascontiguousarray(context.popularity, dtype=np.float64)
    digest = hashlib.blake2b(popularity.tobytes(), digest_size=20).hexdigest()
    return (id(indptr), id(rows), digest, repr(context.groups), context.seen_kept)


def _same_arrays(state: Prepared, context: ListContext) -> bool:
    """Whether ``state`` was prepared from the very profile arrays of ``context`` (an
    id may be reused once an array is freed; the state holds its arrays alive)."""
    assert context.profiles is not None
    return state.source_profiles is not None and all(
        a is b for a, b in zip(state.source_profiles, context.profiles)
    )


def _prepare(context: ListContext) -> Prepared:
    policy = context.groups if context.groups is not None else DEFAULT_GROUPS
    popularity = np.asarray(context.popularity, dtype=np.float64)
    n_items = int(popularity.shape[0])
    groups, tail = item_groups(popularity, policy), long_tail(popularity, policy)
    kinds = item_kinds(item_masks(np.asarray(context.popularity), groups, tail))
    state = Prepared(policy, popularity, groups, tail, kinds)
    if context.profiles is not None:
        state.source_profiles = context.profiles
        profiles = as_profiles(context.profiles, n_items, "profiles")
        sizes = profiles.sizes
        with np.errstate(invalid="ignore", divide="ignore"):
            state.profile_pop = np.where(sizes > 0, profiles.row_sums(popularity) / np.maximum(sizes, 1), np.nan)
            shares = np.stack([profiles.row_sums(state.item_group == g) for g in range(N_GROUPS)], axis=1)
            state.profile_shares = shares / np.where(sizes > 0, sizes, np.nan)[:, None]
        state.profiles = profiles
        ratio = popular_ratio(popularity, profiles, policy)
        among = ratio if context.population is None else popular_ratio(
            popularity, as_profiles(context.population, n_items, "population"), policy)
        state.user_group, state.sole_ratio = groups_by_ratio(ratio, policy, among), sole_ratio(among)
        state.members = tuple(state.user_group == code for code in range(len(USER_GROUPS)))
        state.profiled = tuple(members & np.isfinite(state.profile_pop) for members in state.members)
        drawn = state.user_group if context.population is None else groups_by_ratio(among, policy)
        state.n_members = tuple(int((drawn == code).sum()) for code in range(len(USER_GROUPS)))
        state.seen_kept = context.seen_kept
        state.rsp_candidates = catalogue_candidates(profiles, state.tail)
        if not context.seen_kept:
            state.trained = trained_table(profiles, n_items)
    if context.relevant is not None:
        relevant = as_profiles(context.relevant, n_items, "relevant")
        state.relevant = relevant
        rows = np.flatnonzero(relevant.sizes > 0)
        state.relevant_rows = rows
        sub = _take(relevant, rows)
        state.held = held_table(sub.indptr, sub.rows, n_items)
        if state.profiles is not None:
            state.reo_candidates = held_candidates(relevant, state.profiles, state.tail, n_items)
            state.n_evaluated = tuple(int(members[rows].sum()) for members in state.members)
    return state


def _take(csr: Profiles, rows: np.ndarray) -> Profiles:
    """The sets of ``rows`` as a CSR of their own (vectorised)."""
    starts, counts = csr.indptr[rows], csr.sizes[rows]
    indptr = np.zeros(rows.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    at = np.repeat(starts - indptr[:-1], counts) + np.arange(int(indptr[-1]), dtype=np.int64)
    return Profiles(indptr, csr.rows[at])


def item_masks(popularity: np.ndarray, groups: np.ndarray, tail: np.ndarray) -> dict[str, np.ndarray]:
    """Every kind of item the built-in measures count per list, by mask name: the heads of
    ``head_share_<p>pct`` and ``aplt``'s long tail (as :class:`HeadShare` and
    :class:`LongTailShare` draw them from ``popularity``), Elliot's long tail (``tail``) and
    the item ``groups``."""
    masks = {f"head_{percent}pct": HeadShare(popularity, percent).mask for percent in HEAD_PERCENTS}
    masks["aplt_tail"] = LongTailShare(popularity).tail
    masks["long_tail"] = tail
    masks.update({name: groups == code for code, name in enumerate(GROUP_MASKS)})
    return masks


def _list_figures(state: Prepared, slots: Slots) -> ListFigures:
    """Everything the built-in measures read from one list matrix, in a few vectorised passes."""
    counts = state.kinds.count(slots.lists)
    n_rows, width = slots.lists.shape
    filled = np.full(n_rows, width, dtype=np.int64) if slots.all_valid else slots.valid.sum(axis=1, dtype=np.int64)
    figures = ListFigures(list_pop=slots.per_list_mean(state.popularity), counts=counts, filled=filled)
    own = None  # slots holding their row's own training item (lists served as served may re-serve one)
    if state.trained is not None:
        own = state.trained.hits(slots.lists).hits
        figures.reserving = np.asarray(own.any(axis=1))
    if state.profile_shares is not None:
        columns = [state.kinds.column(name) for name in GROUP_MASKS]
        with np.errstate(invalid="ignore", divide="ignore"):
            shares = counts[:, columns] / np.where(filled > 0, filled, np.nan)[:, None]
        figures.js = jensen_shannon(state.profile_shares, shares)
    if state.held is not None and state.relevant_rows is not None:
        lists = slots.lists[state.relevant_rows]
        hits = state.held.hits(lists)
        # A held-out repeat of a training pair is a miss for every list (auditor.evaluation.repeats_convention)
        scored = hits if own is None else HeldOutHits(hits.hits & ~own[state.relevant_rows], hits.n_relevant)
        figures.ndcg = scored.at(max(int(lists.shape[1]), 1)).ndcg
        hit_tail = hits.hits & state.tail[np.where(lists >= 0, lists, 0)]
        figures.reo_numerator = (float(hits.hits.sum() - hit_tail.sum()), float(hit_tail.sum()))
    if state.user_group is not None and state.profile_pop is not None:
        figures.groups = _group_rows(state, figures, state.profile_pop)
        if figures.js is not None:
            figures.miscalibration = _mean(figures.js[(state.user_group >= 0) & np.isfinite(figures.js)])
    return figures


def _group_rows(state: Prepared, figures: ListFigures, profile_pop: np.ndarray) -> tuple[GroupFigures, ...]:
    """Every user-side figure of each user group (docs/measures.md, "Who pays"): GAP of the
    profiles and of the lists over the group's users with a profile and a non-empty list,
    ΔGAP, the mean JS divergence and, with a holdout, the mean NDCG@K."""
    served_any = np.isfinite(figures.list_pop)
    js, ndcg = figures.js, figures.ndcg
    js_finite = None if js is None else np.isfinite(js)
    held = None if ndcg is None or state.relevant_rows is None or state.user_group is None \
        else state.user_group[state.relevant_rows]
    rows: list[GroupFigures] = []
    for code, group in enumerate(USER_GROUPS):
        served = state.profiled[code] & served_any
        profile, listed = _mean(profile_pop[served]), _mean(figures.list_pop[served])
        rows.append(GroupFigures(
            group=group,
            n_users=state.n_members[code],
            gap_profile=profile,
            gap_list=listed,
            gap_delta=(listed - profile) / profile if profile > 0 else math.nan,
            miscalibration=math.nan if js is None or js_finite is None else _mean(js[state.members[code] & js_finite]),
            n_evaluated=state.n_evaluated[code] if state.n_evaluated else 0,
            ndcg=None if ndcg is None or held is None else group_mean(ndcg, held, code),
        ))  # fmt: skip
    return tuple(rows)


def _mean(values: np.ndarray) -> float:
    """The mean of float64 ``values`` (NaN: none): ``values.mean()``'s very sum and division
    (numpy's mean is ``add.reduce`` over the array divided by its size), without the
    wrapper's per-call cost, paid ten times per scoring and K here."""
    return float(np.add.reduce(values) / values.size) if values.size else math.nan


def jensen_shannon(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Row-wise Jensen–Shannon divergence in bits (log base 2, so in [0, 1]) of two
    (n, m) matrices of distributions; rows with a NaN stay NaN."""
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    m = 0.5 * (p + q)
    with np.errstate(invalid="ignore", divide="ignore"):
        kl_p = np.where(p > 0, p * np.log2(p / m), 0.0).sum(axis=1)
        kl_q = np.where(q > 0, q * np.log2(q / m), 0.0).sum(axis=1)
    out = 0.5 * (kl_p + kl_q)
    out[np.isnan(p).any(axis=1) | np.isnan(q).any(axis=1)] = np.nan
    return np.maximum(out, 0.0)  # rounding may leave -1e-17 for identical rows


def group_mean(values: np.ndarray, codes: np.ndarray, group: int) -> float:
    """Mean of ``values`` over the rows of ``group`` where it is finite (NaN: none)."""
    chosen = values[(codes == group) & np.isfinite(values)]
    return float(chosen.mean()) if chosen.size else math.nan


def relative_std(numerator: tuple[float, float], denominator: tuple[float, float]) -> float:
    """std / mean of the two probabilities numerator / denominator (Elliot: ``np.std``,
    the population form), i.e. |a − b| / (a + b); NaN when either is undefined or both 0.

    Worked in Python floats with the very operations, in the same order, that ``np.std``
    and ``np.mean`` apply to the two values (IEEE doubles, correctly rounded square root),
    so to the bit their value, without their per-call cost (paid once per scoring and K)."""
    if denominator[0] == 0 or denominator[1] == 0:
        return math.nan  # a probability x / 0: inf or NaN
    a, b = numerator[0] / denominator[0], numerator[1] / denominator[1]
    if not (math.isfinite(a) and math.isfinite(b)) or a + b == 0:
        return math.nan
    mean = (a + b) / 2
    deviation_a, deviation_b = a - mean, b - mean
    std = math.sqrt((deviation_a * deviation_a + deviation_b * deviation_b) / 2)
    return std / mean
