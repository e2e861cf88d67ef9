"""Held-out interactions for ``retrain --holdout-fraction``: a per-user split, seeded.

Each user with n interactions holds out h of them, the last h by time (``time``) or a
seeded random h (``random``), and trains on the rest. h follows RecBole's ratio split
for two parts (``Dataset._calcu_split_ids`` in recbole/data/dataset/dataset.py): h = floor(F·n), raised to 1
when 0 < F·n < 1 and the user has two or more interactions, so every such user holds
out at least one interaction and keeps at least one training item (a user with one
interaction keeps it).
One difference: RecBole floors with ``int(F·n)``, popaudit with a 1e-9 tolerance, so a
fraction exact in decimal gives the decimal answer (0.29 of 100 is 29, not 28).

A held-out (user, item) pair that also occurs in the user's training part (a repeat
interaction) is dropped from the holdout, as are repeats within it: it could never be
recommended to that user (served lists leave out training items) and it was trained on.
So a user whose held-out interactions all repeat training pairs is not evaluated: the
record counts the dropped repeats and those users (``n_users_without_holdout``), and
``check`` of the checkpoint says both. When no pair is left at all (every user has one
interaction, or every held-out interaction repeats), the split is still written: ``check``
audits the model and lists accuracy as not measured, saying why
(:func:`auditor.loading.recorded_split.empty_holdout_reason`).
The training part keeps its log order, sorted by time when there are times (so the
transformer user tower's histories are the latest items).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from auditor.errors import InputError, setting
from auditor.train.data import TrainingData

MAX_HOLDOUT_PAIRS = 1_000_000
"""At most this many held-out pairs are stored: all pairs of a seeded sample of users."""
TOLERANCE = 1e-9


@dataclass(frozen=True)
class HoldoutSplit:
    """A training part and the held-out (user row, item row) pairs."""

    train: TrainingData
    holdout: np.ndarray
    """int64 (n, 2): (user row, item row), distinct, ordered by user then time/draw."""
    fraction: float
    method: str
    """time | random."""
    seed: int
    n_repeats_dropped: int = 0
    """Held-out interactions dropped as repeats of a training pair (or of each other)."""
    n_users_sampled: int | None = None
    """When the holdout was capped at MAX_HOLDOUT_PAIRS: the users it keeps."""
    n_held_out: int | None = None
    """Interactions taken out of training (repeats included): with ``train``, the whole log."""
    n_users_without_holdout: int = 0
    """Users with two or more interactions whose held-out interactions were all repeats."""
    n_users_single: int = 0
    """Users with one interaction: they keep it for training and hold nothing out."""

    def record(self) -> dict[str, Any]:
        """What the checkpoint's config says about the split."""
        out: dict[str, Any] = {
            "fraction": self.fraction,
            "split": self.method,
            "seed": self.seed,
            "n_train_interactions": self.train.n_interactions,
            "n_holdout_interactions": self.n_held_out,
            "n_holdout_pairs": int(self.holdout.shape[0]),
            "n_holdout_users": int(np.unique(self.holdout[:, 0]).size),
            "n_repeats_dropped": self.n_repeats_dropped,
            "n_users_without_holdout": self.n_users_without_holdout,
            "n_users_one_interaction": self.n_users_single,
            "rule": "per user: floor(F*n), at least 1 when the user keeps one (RecBole ratio split)",
        }
        if self.method == "time":
            out["time_col"] = self.train.description.get("time_col")
        if self.n_users_sampled is not None:
            out["n_users_sampled"] = self.n_users_sampled
        return out


def resolve_method(method: str, data: TrainingData) -> str:
    """``auto`` becomes ``time`` when the data has times, else ``random``; ``time``
    without times is refused."""
    if method == "auto":
        return "time" if data.timestamps is not None else "random"
    if method == "time" and data.timestamps is None:
        where = data.description.get("path") or "synthetic data"
        raise InputError(
            f"{setting('split')} time needs the time of each interaction, but {where} has no time column "
            f"(timestamp, time, ts, datetime, ...); pass {setting('time_col')} NAME or {setting('split')} random"
        )
    if method not in ("time", "random"):
        raise InputError(f"{setting('split')} must be auto, time or random, got {method!r}")
    return method


def held_out_counts(counts: np.ndarray, fraction: float) -> np.ndarray:
    """int64: interactions held out of a user with ``counts`` interactions (module rule)."""
    counts = np.asarray(counts, dtype=np.int64)
    h = np.floor(fraction * counts + TOLERANCE).astype(np.int64)
    h = np.where((h == 0) & (fraction * counts > 0) & (counts >= 2), 1, h)
    return np.minimum(h, np.maximum(counts - 1, 0))


def split_holdout(data: TrainingData, fraction: float, method: str = "auto", *, seed: int = 0) -> HoldoutSplit:
    """Hold out ``fraction`` of every user's interactions (module docstring)."""
    if not (0.0 < fraction < 1.0):
        raise InputError(f"{setting('holdout_fraction')} must lie strictly between 0 and 1, got {fraction}")
    method = resolve_method(method, data)
    n = data.n_interactions
    position = np.arange(n, dtype=np.int64)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x5B17]))
    within = data.timestamps if method == "time" and data.timestamps is not None else rng.random(n)
    order = np.lexsort((position, within, data.users))  # by user, then time (or a draw), then log order
    users = data.users[order]
    counts = np.bincount(data.users, minlength=data.n_users)
    ends = np.cumsum(counts)
    from_end = ends[users] - 1 - np.arange(n)  # 0 = the user's latest (or last drawn)
    held = np.zeros(n, dtype=bool)
    held[order] = from_end < held_out_counts(counts, fraction)[users]

    train_rows = np.flatnonzero(~held)
    if data.timestamps is not None:  # training in time order: histories end with the latest items
        train_rows = train_rows[np.argsort(data.timestamps[train_rows], kind="stable")]
    hold_rows = order[held[order]]  # by user, then time
    pairs = np.stack([data.users[hold_rows], data.items[hold_rows]], axis=1).astype(np.int64)
    pairs, n_repeats = _drop_repeats(pairs, data.users[train_rows], data.items[train_rows], data.n_items)
    # Users who held something out but kept no pair: every held-out interaction repeated.
    emptied = int(np.count_nonzero((np.bincount(data.users[hold_rows], minlength=data.n_users) > 0)
                                   & (np.bincount(pairs[:, 0], minlength=data.n_users) == 0)))
    pairs, n_sampled = _cap(pairs, data.n_users, seed)
    train = data.subset(
        train_rows, holdout={"fraction": float(fraction), "split": method, "seed": seed},
        n_interactions=int(train_rows.size),
    )
    return HoldoutSplit(train, pairs, float(fraction), method, seed, n_repeats, n_sampled, n - int(train_rows.size),
                        emptied, int(np.count_nonzero(counts == 1)))


def _drop_repeats(
    pairs: np.ndarray, train_users: np.ndarray, train_items: np.ndarray, n_items: int
) -> tuple[np.ndarray, int]:
    """``pairs`` without those seen in training or earlier in ``pairs`` (order kept)."""
    key = pairs[:, 0] * n_items + pairs[:, 1]  # n_users * n_items < 2**63 for any real log
    seen = np.isin(key, train_users * n_items + train_items)
    _, first = np.unique(key, return_index=True)
    keep = np.zeros(key.size, dtype=bool)
    keep[first] = True
    keep &= ~seen
    return pairs[keep], int(key.size - keep.sum())


def _cap(pairs: np.ndarray, n_users: int, seed: int) -> tuple[np.ndarray, int | None]:
    """At most MAX_HOLDOUT_PAIRS pairs: every pair of a seeded random subset of users."""
    if pairs.shape[0] <= MAX_HOLDOUT_PAIRS:
        return pairs, None
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xCA9]))
    per_user = np.bincount(pairs[:, 0], minlength=n_users)
    users = rng.permutation(np.flatnonzero(per_user))
    fits = np.cumsum(per_user[users]) <= MAX_HOLDOUT_PAIRS
    chosen = np.zeros(n_users, dtype=bool)
    chosen[users[fits]] = True
    return pairs[chosen[pairs[:, 0]]], int(fits.sum())
