"""RecBole 1.2.1's evaluation split, reproduced without RecBole.

A RecBole checkpoint records the settings of its run (``final_config_dict``). With the
``.inter`` file it read, they fix the split RecBole evaluated on: ``Dataset.build()``
(recbole/data/dataset/dataset.py) orders the interactions (``eval_args.order``: ``TO``
is a stable sort by the float32 time column; ``RO`` shuffles with torch's generator),
then splits them (``eval_args.split``):

* ``RS`` (ratios, ``split_by_ratio``): per user in order of first appearance
  (``group_by: user``) or over the whole sequence (``none``), each part's size by
  ``_calcu_split_ids``: every part but the first rounded down, a part whose ratio gives
  a size in (0, 1) raised to 1 while the first keeps more than one;
* ``LS`` (``leave_one_out``): per user, the last (``test_only``, ``valid_only``) or the
  last two (``valid_and_test``) interactions held out, never the user's only one;
* ``TS`` (``time_based_split``): the test part is every interaction after the global
  time percentile 100·(1 − test ratio) (numpy 1.x's ``percentile``, compared in float32),
  the rest split per user by the train ratio.

The full-sort test evaluation (``FullSortEvalDataLoader``, the test sampler's
``used_ids``) then ranks every item for each user with a test interaction, masking the
items of the user's train, valid and test interactions minus the test items themselves
(an item trained on and held out again stays rankable).

What cannot be reproduced is refused (:class:`~auditor.errors.EvaluationSplitError`),
naming the setting: a random order (RecBole's torch generator state), negative-sampling
or labelled test modes (``uni100``, ``pop100``, ``labeled``), filters popaudit does not
re-run (:func:`~auditor.loading.recbole.unreproducible_settings`), sequential,
context-aware and knowledge-aware runs (other datasets and loaders).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from auditor.errors import EvaluationSplitError, setting
from auditor.loading.csr import build_csr
from auditor.loading.recbole import unreproducible_settings
from auditor.loading.recbole_inter import InterRows, inter_fields, read_inter

LEAVE_ONE = ("valid_and_test", "valid_only", "test_only")
MODEL_TYPES = {1: "general", 2: "sequential", 3: "context-aware", 4: "knowledge-aware", 5: "traditional", 6: "decision-tree"}
SPLIT_TYPES = (1, 5)
"""RecBole ``ModelType`` values whose runs use the plain ``Dataset`` and full-sort loaders."""


def route() -> str:
    """What to pass instead when the split cannot be reproduced."""
    return (
        f"pass the held-out (test) interactions as {setting('holdout')} FILE and the training part as "
        f"{setting('interactions')}, with {setting('item_ids')} and {setting('user_ids')} FILE holding the raw id "
        "of each table row (RecBole's dataset.field2id_token without its first entry '[PAD]'); with the id files "
        "and no holdout, the whole file is audited as the training log, without held-out accuracy"
    )


def _refuse(what: str) -> EvaluationSplitError:
    return EvaluationSplitError(f"the RecBole run recorded {what}, so popaudit cannot reproduce its evaluation split: {route()}")


# ---------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class SplitPlan:
    """The reproducible part of ``eval_args``."""

    method: str
    """``RS``, ``LS`` or ``TS``."""
    ratios: tuple[float, ...] = ()
    """RS/TS: the three ratios as recorded (RecBole normalises them by their sum)."""
    leave_one: str = ""
    """LS: ``valid_and_test``, ``valid_only`` or ``test_only``."""
    by_user: bool = True

    def describe(self) -> str:
        if self.method == "LS":
            return f"RecBole's leave-one-out split ({self.leave_one}) per user, in time order"
        if self.method == "TS":
            return f"RecBole's time-based split {list(self.ratios)}: the test part after the global time percentile"
        per = "per user" if self.by_user else "over all interactions"
        return f"RecBole's ratio split {list(self.ratios)} {per}, in time order"


def split_plan(config: Mapping[str, Any]) -> SplitPlan:
    """The split a run's settings record; EvaluationSplitError for what is not reproducible."""
    kind = _model_type(config.get("MODEL_TYPE"))
    if kind is not None and kind not in SPLIT_TYPES:
        raise _refuse(f"MODEL_TYPE {MODEL_TYPES.get(kind, kind)} (its data and evaluation are not the general models')")
    args = config.get("eval_args")
    if not isinstance(args, Mapping):
        raise _refuse("no eval_args (not a RecBole run's final settings)")
    filters = unreproducible_settings(config)
    if filters:
        raise _refuse(f"data filters it does not re-run ({'; '.join(filters)})")
    mode = args.get("mode", "full")
    test_mode = mode.get("test", mode.get("valid", "full")) if isinstance(mode, Mapping) else mode
    if test_mode != "full":
        raise _refuse(f"eval_args mode {test_mode!r} for the test (only 'full', every item ranked, is reproduced)")
    order = args.get("order", "RO")
    if order != "TO":
        why = "random order: RecBole shuffles with torch's generator" if order == "RO" else "an unknown order"
        raise _refuse(f"eval_args order {order!r} ({why}; only 'TO', time order, is reproduced)")
    split = args.get("split")
    if not isinstance(split, Mapping) or len(split) != 1:
        raise _refuse(f"eval_args split {split!r} (RecBole reads one of RS, LS or TS)")
    method, value = next(iter(split.items()))
    if method == "LS":
        if value not in LEAVE_ONE:
            raise _refuse(f"eval_args split LS {value!r} (one of {', '.join(LEAVE_ONE)})")
        return SplitPlan("LS", leave_one=str(value))
    if method not in ("RS", "TS"):
        raise _refuse(f"eval_args split {method!r} (RecBole reads RS, LS or TS)")
    if not (isinstance(value, (list, tuple)) and len(value) == 3 and all(_non_negative(v) for v in value)
            and sum(value) > 0):
        raise _refuse(f"eval_args split {method} {value!r} (RecBole needs three non-negative ratios: train, valid, test)")
    group = args.get("group_by")
    by_user = method == "TS" or group == "user"
    if method == "RS" and not (group == "user" or group is None or str(group).lower() == "none"):
        raise _refuse(f"eval_args group_by {group!r} (RecBole groups RS by 'user' or 'none')")
    return SplitPlan(str(method), tuple(float(v) for v in value), by_user=by_user)


def _model_type(value: Any) -> int | None:
    """RecBole's pickled ``ModelType`` enum as its value (None when unreadable)."""
    if isinstance(value, Mapping):
        args = value.get("__args__")
        value = args[0] if isinstance(args, list) and args else None
    return value if type(value) is int else None


def _non_negative(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


# ---------------------------------------------------------------------------- the split


@dataclass(frozen=True)
class Part:
    """One part of the split, in RecBole's order."""

    users: np.ndarray
    """int64 user rows (RecBole's user id − 1: the user table without its padding row)."""
    items: np.ndarray
    """int64 item rows (RecBole's item id − 1)."""
    rows: np.ndarray
    """int64 data rows of the ``.inter`` file (0: the first line after the header)."""

    def __len__(self) -> int:
        return int(self.users.shape[0])


@dataclass(frozen=True)
class RecBoleSplit:
    """RecBole's train, valid and test parts, and what its test evaluation ranks and masks."""

    train: Part
    valid: Part
    test: Part
    user_ids: np.ndarray
    """Raw user id of each user row (RecBole's ``field2id_token`` without ``[PAD]``)."""
    item_ids: np.ndarray
    """Raw item id of each item row."""
    plan: SplitPlan
    source: Path
    n_dropped: int = 0
    """Rows of the file without a user or item id (RecBole drops them)."""

    @property
    def n_users(self) -> int:
        return int(self.user_ids.shape[0])

    @property
    def n_items(self) -> int:
        return int(self.item_ids.shape[0])

    @property
    def description(self) -> str:
        return (
            f"{self.plan.describe()}, reproduced from {self.source}: {len(self.train):,} training, "
            f"{len(self.valid):,} validation and {len(self.test):,} test interactions"
        )

    def evaluated_users(self) -> np.ndarray:
        """Ascending user rows with a test interaction: the users RecBole's test ranks for."""
        return np.unique(self.test.users)

    def held_out(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(evaluated users, indptr, item rows): each one's distinct test items, ascending."""
        users = self.evaluated_users()
        at = np.searchsorted(users, self.test.users)
        indptr, items = build_csr(at, self.test.items, int(users.shape[0]))
        return users, indptr, items

    def masked(self) -> tuple[np.ndarray, np.ndarray]:
        """(indptr, item rows) aligned with :meth:`evaluated_users`: what RecBole's test masks,
        each user's train and valid items that are not among their test items."""
        users = self.evaluated_users()
        if users.shape[0] == 0:  # no test part (LS valid_only): nobody is ranked
            return np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64)
        seen_users = np.concatenate([self.train.users, self.valid.users])
        seen_items = np.concatenate([self.train.items, self.valid.items])
        at = np.searchsorted(users, seen_users)
        found = (at < users.shape[0]) & (users[np.minimum(at, users.shape[0] - 1)] == seen_users)
        at, seen_items = at[found], seen_items[found]
        test_at = np.searchsorted(users, self.test.users)
        # keys user * n_items + item: both fit (rows below 2**31 each)
        test_keys = np.unique(test_at * self.n_items + self.test.items)
        keep = ~np.isin(at * self.n_items + seen_items, test_keys)
        return build_csr(at[keep], seen_items[keep], int(users.shape[0]))

    def train_counts(self) -> np.ndarray:
        """int64 (n_items,): training interactions per item row (the training log's counts)."""
        return np.bincount(self.train.items, minlength=self.n_items).astype(np.int64)


def recbole_split(config: Mapping[str, Any], inter: Path) -> RecBoleSplit:
    """The split RecBole 1.2.1 made of ``inter`` under the run's settings ``config`` (a
    checkpoint's ``final_config_dict``, as popaudit's RecBole reader gives it)."""
    plan = split_plan(config)
    try:  # what the file and its reading refuse, with the way out added
        fields = inter_fields(config, Path(inter), need_time=True)
        data = read_inter(Path(inter), fields, config) if fields.time is not None else None
    except EvaluationSplitError as exc:
        raise EvaluationSplitError(f"{exc}, so popaudit cannot reproduce RecBole's evaluation split: {route()}") from exc
    if data is None:
        raise _refuse(f"eval_args order 'TO' but no loaded float time column (TIME_FIELD {config.get('TIME_FIELD')!r})")
    assert data.times is not None
    order = np.argsort(data.times, kind="stable")  # Interaction.sort: numpy's stable argsort of the float32 column
    if plan.method == "TS":
        labels, sequence = _time_based(data, order, plan.ratios)
    elif plan.method == "LS":
        labels, sequence = _leave_one_out(data.users[order], plan.leave_one), _grouped(data.users[order])
    elif plan.by_user:
        labels, sequence = _by_ratio_per_user(data.users[order], plan.ratios), _grouped(data.users[order])
    else:
        labels, sequence = _by_ratio(len(order), plan.ratios), np.arange(len(order))
    train, valid, test = (_part(data, order[sequence[labels[sequence] == p]]) for p in range(3))
    return RecBoleSplit(train, valid, test, data.user_ids, data.item_ids, plan, Path(inter), data.n_dropped)


def _part(data: InterRows, index: np.ndarray) -> Part:
    return Part(data.users[index], data.items[index], data.rows[index])


def _grouped(users: np.ndarray) -> np.ndarray:
    """Positions of the sequence grouped by user, users in order of first appearance, each
    user's positions in sequence order (``Dataset._grouped_index``)."""
    _, first, inverse = np.unique(users, return_index=True, return_inverse=True)
    appearance = np.empty_like(first)
    appearance[np.argsort(first)] = np.arange(first.shape[0])
    return np.argsort(appearance[inverse], kind="stable")


def _rank_in_group(users: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each position's rank among its user's positions, and that user's count."""
    grouped = _grouped(users)
    counts = np.bincount(users)
    sizes = counts[users[grouped]]
    starts = np.flatnonzero(np.r_[True, users[grouped][1:] != users[grouped][:-1]])
    rank = np.arange(grouped.shape[0]) - np.repeat(starts, np.diff(np.r_[starts, grouped.shape[0]]))
    ranks = np.empty_like(rank)
    ranks[grouped] = rank
    out_sizes = np.empty_like(sizes)
    out_sizes[grouped] = sizes
    return ranks, out_sizes


def split_sizes(total: int, ratios: tuple[float, ...]) -> list[int]:
    """``Dataset._calcu_split_ids`` as RecBole computes it (Python floats): the cumulative
    part boundaries of ``total`` interactions, ratios normalised by their sum."""
    tot_ratio = sum(ratios)
    ratios = tuple(r / tot_ratio for r in ratios)
    cnt = [int(ratios[i] * total) for i in range(len(ratios))]
    cnt[0] = total - sum(cnt[1:])
    for i in range(1, len(ratios)):
        if cnt[0] <= 1:
            break
        if 0 < ratios[-i] * total < 1:
            cnt[-i] += 1
            cnt[0] -= 1
    return [int(x) for x in np.cumsum(cnt)[:-1]]


def _labels(ranks: np.ndarray, sizes: np.ndarray, bounds_of: Any) -> np.ndarray:
    """Part 0, 1 or 2 of each position from per-size boundaries (one Python call per distinct size)."""
    distinct, at = np.unique(sizes, return_inverse=True)
    bounds = np.array([bounds_of(int(n)) for n in distinct], dtype=np.int64).reshape(len(distinct), 2)
    return ((ranks >= bounds[at, 0]).astype(np.int8) + (ranks >= bounds[at, 1]).astype(np.int8)).astype(np.int8)


def _by_ratio(total: int, ratios: tuple[float, ...]) -> np.ndarray:
    first, second = split_sizes(total, ratios)
    return _labels(np.arange(total), np.full(total, total), lambda n: (first, second))


def _by_ratio_per_user(users: np.ndarray, ratios: tuple[float, ...]) -> np.ndarray:
    ranks, sizes = _rank_in_group(users)
    return _labels(ranks, sizes, lambda n: split_sizes(n, ratios))


def _leave_one_out(users: np.ndarray, mode: str) -> np.ndarray:
    """``_split_index_by_leave_one_out``: the user's last one or two in valid/test."""
    ranks, sizes = _rank_in_group(users)
    held = 2 if mode == "valid_and_test" else 1
    legal = np.minimum(held, sizes - 1)
    kept = sizes - legal
    labels = np.zeros(users.shape[0], dtype=np.int8)
    tail = ranks >= kept
    if mode == "valid_and_test":  # the last goes to test, the one before (if two are held) to valid
        labels[tail] = np.where(ranks[tail] == sizes[tail] - 1, 2, 1)
    else:
        labels[tail] = 1 if mode == "valid_only" else 2
    return labels


def _time_based(data: InterRows, order: np.ndarray, ratios: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray]:
    """``time_based_split`` after a time order: test after the global boundary, the rest per user."""
    assert data.times is not None
    total = sum(ratios)
    norm = [r / total for r in ratios]
    times = data.times[order]
    boundary = np.float32(_percentile_numpy1(times, 100 * (1 - norm[-1])))  # numpy 1.x compares in float32
    users = data.users[order]
    before = times <= boundary
    labels = np.full(users.shape[0], 2, dtype=np.int8)
    ranks, _ = _rank_in_group(users)
    n_before = np.bincount(users[before], minlength=int(users.max()) + 1)[users]
    fraction = norm[0] / (1 - norm[2])
    distinct, at = np.unique(n_before, return_inverse=True)
    cut = np.array([int(int(n) * fraction) for n in distinct], dtype=np.int64)[at]
    # times ascend within a user, so the user's interactions before the boundary come first
    labels[before] = np.where(ranks[before] < cut[before], 0, 1)
    return labels, _grouped(users)


def _percentile_numpy1(ascending: np.ndarray, q: float) -> float:
    """``numpy.percentile(a, q)`` (linear) as numpy 1.x returns it for float32 data
    (RecBole 1.2.1 needs numpy < 2): the neighbours' float32 difference, interpolated in
    float64 from the nearer end."""
    n = ascending.shape[0]
    virtual = (n - 1) * (np.float64(q) / 100)
    below = min(int(np.floor(virtual)), n - 1)
    above = min(below + 1, n - 1)
    gamma = float(virtual - below)
    a, b = ascending[below], ascending[above]
    diff = float(np.float32(b - a))
    return float(b) - diff * (1 - gamma) if gamma >= 0.5 else float(a) + diff * gamma
