"""Item and user popularity groups: the cut-offs of the user- and item-side measures
(docs/measures.md, "Who pays and which items gain").

One policy, :class:`GroupPolicy`, holds every cut-off (:data:`DEFAULT_GROUPS` is the
default, the literature's values); each field is a setting of the same name.

* **Item groups** (Abdollahpouri et al., UMAP 2021): *head* H, the most popular items
  that together hold ``head_mass`` of the popularity mass; *tail* T, the items outside the
  most popular ones holding ``1 - tail_mass`` (so at most ``tail_mass`` of the mass, cold
  items included: with 0.2 it is exactly ``aplt``'s long tail); *mid* M, the rest.
* **Short head / long tail** (Elliot's PopRSP, PopREO and ACLT): the short head holds
  ``short_head_mass`` of the mass, every other item is long tail (``aplt``'s split).
* **User groups** (Abdollahpouri et al., "The unfairness of popularity bias in
  recommendation", 2019): a user's *popular ratio* is the share of the distinct items
  of their training profile that are popular, popular meaning the top ``popular_percent``
  of the catalogue (the head of ``head_share_20pct`` at 20). Users ranked by that ratio:
  the lowest ``niche_fraction`` are *niche*, the highest ``blockbuster_fraction``
  *blockbuster*, the rest *diverse*.

Every cut puts tied items, and tied users, on one side, so no result depends on the
order of table rows or of users. As the authors' split does (Daniil et al.'s notebook:
``[:⌊0.2·n⌋]`` and ``[⌊0.8·n⌋:]``), niche is the users up to the ⌊niche_fraction · n⌋-th
from the bottom and blockbuster the users from the ⌊(1 − blockbuster_fraction) · n⌋-th
position on, n − ⌊(1 − f) · n⌋ = ⌈f · n⌉ of them: with 12 users and 20% each, 2 niche and
3 blockbuster; with 4, none niche and one blockbuster. Every user tied with a cut user
joins its group; a user tied with both cuts is niche. When every user shares one ratio
there is no contrast to draw, and every user is diverse.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from auditor.config import GroupPolicy
from auditor.metrics.popularity_sets import head_mask, short_head_mask
from auditor.sections import USER_GROUP_NAMES

ITEM_GROUPS = ("head", "mid", "tail")
"""Item group names, in the order of their codes 0, 1, 2."""
USER_GROUPS = USER_GROUP_NAMES
"""User group names, in the order of their codes 0, 1, 2 (-1: no profile)."""
HEAD, MID, TAIL = 0, 1, 2
NICHE, DIVERSE, BLOCKBUSTER = 0, 1, 2
NO_GROUP = -1


DEFAULT_GROUPS = GroupPolicy()
"""The default cut-offs: the values of the papers the measures come from."""


def item_groups(popularity: np.ndarray, policy: GroupPolicy = DEFAULT_GROUPS) -> np.ndarray:
    """Group code per item row (:data:`HEAD`, :data:`MID`, :data:`TAIL`; int8)."""
    popularity = np.asarray(popularity)
    codes = np.full(popularity.shape[0], MID, dtype=np.int8)
    codes[~short_head_mask(popularity, 1.0 - policy.tail_mass)] = TAIL
    codes[short_head_mask(popularity, policy.head_mass)] = HEAD  # inside the complement of the tail
    return codes


def long_tail(popularity: np.ndarray, policy: GroupPolicy = DEFAULT_GROUPS) -> np.ndarray:
    """Elliot's long tail: every item outside the short head (bool per item row)."""
    return ~short_head_mask(np.asarray(popularity), policy.short_head_mass)


@dataclass(frozen=True)
class Profiles:
    """Each list row's training items as CSR: row r's items are ``rows[indptr[r]:indptr[r+1]]``."""

    indptr: np.ndarray
    rows: np.ndarray

    @property
    def n(self) -> int:
        return int(self.indptr.shape[0]) - 1

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.indptr)

    @property
    def owner(self) -> np.ndarray:
        """The list row of each entry of ``rows``."""
        return np.repeat(np.arange(self.n, dtype=np.int64), self.sizes)

    def row_sums(self, values: np.ndarray) -> np.ndarray:
        """Sum of ``values[item]`` over each row's items (float64, one per row)."""
        return np.bincount(self.owner, weights=np.asarray(values, dtype=np.float64)[self.rows], minlength=self.n)


def as_profiles(csr: tuple[np.ndarray, np.ndarray], n_items: int, what: str) -> Profiles:
    """A CSR pair checked (int64 indptr starting at 0, never decreasing, ending at the
    number of entries; entries item rows in [0, n_items); ValueError names ``what``), with
    each row's items made distinct and ascending (the measures count sets of items)."""
    indptr = np.asarray(csr[0])
    rows = np.asarray(csr[1])
    if indptr.ndim != 1 or indptr.size == 0 or (indptr.size > 1 and indptr.dtype.kind not in "iu"):
        raise ValueError(f"{what}: indptr must be a 1-d integer array of n_rows + 1 entries")
    if rows.ndim != 1 or (rows.size and rows.dtype.kind not in "iu"):
        raise ValueError(f"{what}: the entries must be a 1-d integer array of item rows")
    indptr = indptr.astype(np.int64, copy=False)
    rows = rows.astype(np.int64, copy=False)
    if indptr[0] != 0 or indptr[-1] != rows.size or np.any(np.diff(indptr) < 0):
        raise ValueError(f"{what}: indptr must start at 0, never decrease and end at the number of entries")
    if rows.size and (int(rows.min()) < 0 or int(rows.max()) >= n_items):
        raise ValueError(f"{what}: item rows must lie in [0, {n_items})")
    owner = np.repeat(np.arange(indptr.size - 1, dtype=np.int64), np.diff(indptr))
    keys = np.sort(owner * n_items + rows)  # < n_rows * n_items, far below 2**63
    if keys.size:  # sort and compare: numpy's hashing unique is several times slower here
        keys = keys[np.concatenate(([True], keys[1:] != keys[:-1]))]
    counts = np.bincount(keys // max(n_items, 1), minlength=indptr.size - 1)
    distinct = np.zeros(indptr.size, dtype=np.int64)
    np.cumsum(counts, out=distinct[1:])
    return Profiles(distinct, keys % max(n_items, 1))


def popular_ratio(popularity: np.ndarray, profiles: Profiles, policy: GroupPolicy = DEFAULT_GROUPS) -> np.ndarray:
    """Share of each row's profile items that are popular (NaN for an empty profile)."""
    popular = head_mask(popularity, policy.popular_percent).astype(np.float64)
    sizes = profiles.sizes
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(sizes > 0, profiles.row_sums(popular) / np.maximum(sizes, 1), np.nan)


def user_groups(popularity: np.ndarray, profiles: Profiles, policy: GroupPolicy = DEFAULT_GROUPS) -> np.ndarray:
    """Group code per list row (:data:`NICHE`, :data:`DIVERSE`, :data:`BLOCKBUSTER`;
    :data:`NO_GROUP` for an empty profile; int8), by :func:`popular_ratio` (module docstring)."""
    return groups_by_ratio(popular_ratio(popularity, profiles, policy), policy)


def groups_by_ratio(ratio: np.ndarray, policy: GroupPolicy = DEFAULT_GROUPS,
                    among: np.ndarray | None = None) -> np.ndarray:
    """Group code per row of its popular ``ratio`` (NaN: :data:`NO_GROUP`) (module docstring),
    the cuts drawn among the ratios ``among`` (default: ``ratio`` itself): a user's group is
    where their profile stands in the population, whichever of its users are measured."""
    codes = np.full(ratio.shape[0], NO_GROUP, dtype=np.int8)
    known = ~np.isnan(ratio)
    drawn = ratio if among is None else among
    n = int((~np.isnan(drawn)).sum())
    if n == 0:
        return codes
    ordered = np.sort(drawn[~np.isnan(drawn)])
    codes[known] = DIVERSE
    if ordered[0] == ordered[-1]:
        return codes  # one shared ratio: no niche/blockbuster contrast (:func:`sole_ratio`)
    n_niche, n_block = cut_sizes(n, policy)
    if n_block > 0:
        codes[known & (ratio >= ordered[n - n_block])] = BLOCKBUSTER
    if n_niche > 0:
        codes[known & (ratio <= ordered[n_niche - 1])] = NICHE  # a user tied with both cuts is niche
    return codes


def cut_sizes(n: int, policy: GroupPolicy = DEFAULT_GROUPS) -> tuple[int, int]:
    """The niche and blockbuster users of ``n`` by position, before ties at the cuts join
    (module docstring): ⌊niche_fraction · n⌋ from the bottom, n − ⌊(1 − blockbuster_fraction) · n⌋
    from the top."""
    return (int(math.floor(policy.niche_fraction * n + 1e-9)),
            n - int(math.floor((1.0 - policy.blockbuster_fraction) * n + 1e-9)))


def sole_ratio(ratio: np.ndarray) -> float | None:
    """The one popular ratio every row with a profile shares (None: none, or several):
    then no user is more niche than another, and every user is diverse."""
    known = ratio[~np.isnan(ratio)]
    if known.size == 0 or known.min() != known.max():
        return None
    return float(known[0])


__all__ = [
    "BLOCKBUSTER", "DEFAULT_GROUPS", "DIVERSE", "GroupPolicy", "HEAD", "ITEM_GROUPS", "MID", "NICHE", "NO_GROUP",
    "Profiles", "TAIL", "USER_GROUPS", "as_profiles", "cut_sizes", "groups_by_ratio", "item_groups", "long_tail", "popular_ratio",
    "sole_ratio", "user_groups",
]  # fmt: skip
