"""Training data for ``popaudit retrain``: a synthetic Zipf log, or a real interaction file.

Both give a :class:`TrainingData`: (user row, item row) pairs over dense rows
0..n-1, the raw id of every row (stored in the checkpoint so ``check`` can map logs
onto it) and, for synthetic data, dense item features (for the ``dense-linear``
item tower).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from auditor.config import INTERACTION_FORMATS
from auditor.errors import InputError, InteractionsError, setting
from auditor.values import ItemRows
from auditor.loading.blank_rows import first_blank_rows
from auditor.loading.counting import IdCounts, count_item_ids
from auditor.loading.logs import open_log
from auditor.values import LogSpec
from auditor.loading.pairs import read_pairs
from auditor.progress import SILENT, Progress
from auditor.train.timestamps import TimeColumnError, find_time_column, read_times

DATA_FORMATS = INTERACTION_FORMATS
"""auto, parquet, csv, tsv, movielens, recbole (the foundation's readers)."""
TIME_USES = ("split", "order")
"""What a run reads a log's times for (:func:`times_use`)."""


def times_use(time_split: bool, histories: bool) -> str | None:
    """What a run reads the log's times for, in one place: ``"split"`` when it holds out by
    time (every time must be usable), ``"order"`` when they only order a history user tower's
    recent items (file order stands in for a column it cannot use), None when neither."""
    return "split" if time_split else "order" if histories else None


@dataclass(frozen=True)
class TrainingData:
    """Interactions as dense (user row, item row) pairs, plus what the towers need."""

    users: np.ndarray
    """int64 (n,): user row of each interaction."""
    items: np.ndarray
    """int64 (n,): item row of each interaction."""
    n_users: int
    n_items: int
    user_ids: list[Any]
    """Raw id of each user row (int or str)."""
    item_ids: list[Any]
    """Raw id of each item row (int or str)."""
    description: dict[str, Any]
    """Where the data came from (``kind`` synthetic|file and its settings)."""
    item_features: np.ndarray | None = field(default=None, repr=False)
    """float32 (n_items, F) dense item features, when the source has them."""
    timestamps: np.ndarray | None = field(default=None, repr=False)
    """float64 (n,): the time of each interaction, when read (``times``)."""
    warnings: tuple[str, ...] = ()
    """What reading the log left out, to tell the user (rows with a blank id)."""
    time_problem: str | None = None
    """Why the log's time column was not used to order histories (read with ``times="order"``)."""

    def __post_init__(self) -> None:
        if self.users.shape != self.items.shape or self.users.ndim != 1:
            raise InputError("users and items must be 1-d arrays of the same length")
        if len(self.users) == 0:
            raise InputError("the training data holds no interactions")
        if self.timestamps is not None and self.timestamps.shape != self.users.shape:
            raise InputError("timestamps must hold one time per interaction")

    def subset(self, rows: np.ndarray, **description: Any) -> TrainingData:
        """The interactions at positions ``rows`` (in that order) over the same user and
        item rows and ids; ``description`` entries are added to the description."""
        return replace(
            self,
            users=self.users[rows],
            items=self.items[rows],
            timestamps=None if self.timestamps is None else self.timestamps[rows],
            description={**self.description, **description},
        )

    @property
    def n_interactions(self) -> int:
        return int(self.items.shape[0])

    @property
    def item_frequencies(self) -> np.ndarray:
        """int64 (n_items,): interactions per item row."""
        return np.bincount(self.items, minlength=self.n_items).astype(np.int64)

    def histories(self, length: int) -> np.ndarray:
        """int64 (n_users, length): each user's ``length`` most recent item rows.

        Right-aligned (most recent last); empty slots hold ``n_items`` (the padding row).
        Recent means latest by ``timestamps`` (ties in log order) when the log's times were
        read, else the log's own order (:meth:`history_order_warning` says so).
        """
        if self.timestamps is not None:  # by user, then time, then log order
            order = np.lexsort((np.arange(len(self.users)), self.timestamps, self.users))
        else:  # a stable sort by user keeps the log's order within each user
            order = np.argsort(self.users, kind="stable")
        users, items = self.users[order], self.items[order]
        ends = np.cumsum(np.bincount(users, minlength=self.n_users))
        from_end = ends[users] - 1 - np.arange(len(users))  # 0 = most recent of that user
        keep = from_end < length
        hist = np.full((self.n_users, length), self.n_items, dtype=np.int64)
        hist[users[keep], length - 1 - from_end[keep]] = items[keep]
        return hist

    def history_order_warning(self) -> str | None:
        """What a history tower trained on this log should be told: a log read without its
        times (it has no time column, or one it cannot use) orders each user's recent items by its rows."""
        if self.timestamps is not None or self.description.get("kind") != "file":
            return None
        why = self.time_problem or (f"{self.description.get('path')} has no time column (timestamp, time, ts, "
                                    f"datetime, ...; pass {setting('time_col')} NAME)")
        return f"{why}: each user's recent items for the transformer user tower are its last rows in file order"


def batch_starts(n_interactions: int, batch_size: int) -> list[int]:
    """Where each batch of an epoch starts: every ``batch_size`` pairs, a one-row tail
    joined to the batch before it (it has no in-batch negative). Its length is the optimizer
    steps of an epoch, which the checkpoint's config records (``steps_per_epoch``)."""
    starts = list(range(0, n_interactions, batch_size))
    if len(starts) > 1 and n_interactions - starts[-1] < 2:
        starts.pop()
    return starts


def synthetic_interactions(
    n_users: int = 1000,
    n_items: int = 1000,
    n_interactions: int = 50_000,
    zipf: float = 1.0,
    *,
    seed: int = 0,
    n_topics: int = 10,
    affinity: float = 0.8,
    n_features: int = 32,
) -> TrainingData:
    """A seeded synthetic log with Zipf item popularity and topical user preferences.

    Every item gets a popularity rank (randomly permuted over rows, so row order says
    nothing about popularity) with weight rank^-zipf, and one of ``n_topics`` topics.
    Every user prefers one topic and has a log-normal activity level. An interaction
    picks a user by activity, then with probability ``affinity`` an item of that user's
    topic (Zipf-weighted within the topic), else an item from the whole catalogue
    (Zipf-weighted): a two-tower model can learn the topics, and popularity is Zipf.
    Item features are the item's topic centroid plus noise (for ``dense-linear``).
    """
    _check_synthetic(n_users, n_items, n_interactions, zipf, affinity)
    rng = np.random.default_rng(seed)
    n_topics = max(1, min(n_topics, n_items))
    users, items, item_topic = _zipf_topics(rng, n_users, n_items, n_interactions, zipf, n_topics, affinity)
    centroids = rng.normal(0.0, 1.0, size=(n_topics, n_features))
    features = centroids[item_topic] + 0.5 * rng.normal(0.0, 1.0, size=(n_items, n_features))
    features /= np.sqrt(n_features)

    return TrainingData(
        users=users.astype(np.int64),
        items=items.astype(np.int64),
        n_users=n_users,
        n_items=n_items,
        user_ids=list(range(n_users)),
        item_ids=list(range(n_items)),
        description={
            "kind": "synthetic",
            "n_users": n_users,
            "n_items": n_items,
            "n_interactions": n_interactions,
            "zipf": float(zipf),
            "seed": seed,
            "n_topics": n_topics,
            "affinity": float(affinity),
        },
        item_features=features.astype(np.float32),
    )


def _check_synthetic(n_users: int, n_items: int, n_interactions: int, zipf: float, affinity: float) -> None:
    """InputError for sizes a synthetic log cannot have."""
    if n_users < 1 or n_items < 2 or n_interactions < 1:
        raise InputError(
            f"synthetic data needs n_users >= 1, n_items >= 2, n_interactions >= 1; got "
            f"{n_users}, {n_items}, {n_interactions}"
        )
    if zipf < 0:
        raise InputError(f"{setting('zipf')} must be >= 0, got {zipf}")
    if not 0.0 <= affinity <= 1.0:
        raise InputError(f"affinity must be within [0, 1], got {affinity}")


def _zipf_topics(
    rng: np.random.Generator, n_users: int, n_items: int, n_interactions: int, zipf: float, n_topics: int,
    affinity: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(user, item) rows of every interaction and each item's topic, drawn from ``rng``
    as :func:`synthetic_interactions` describes."""
    ranks = rng.permutation(n_items) + 1
    weight = ranks.astype(np.float64) ** -zipf
    item_topic = rng.permutation(np.arange(n_items) % n_topics)  # every topic non-empty

    # Items grouped by topic; a cumulative weight over that order lets one searchsorted
    # call draw from any topic's sub-range (topic t covers [start[t], end[t])).
    by_topic = np.argsort(item_topic, kind="stable")
    cum = np.cumsum(weight[by_topic])
    topic_end = cum[np.cumsum(np.bincount(item_topic, minlength=n_topics)) - 1]
    topic_start = np.concatenate(([0.0], topic_end[:-1]))

    user_topic = rng.integers(0, n_topics, size=n_users)
    activity = rng.lognormal(0.0, 1.0, size=n_users)
    users = rng.choice(n_users, size=n_interactions, p=activity / activity.sum())

    topical = rng.random(n_interactions) < affinity
    t = user_topic[users]
    lo = np.where(topical, topic_start[t], 0.0)
    hi = np.where(topical, topic_end[t], cum[-1])
    target = lo + rng.random(n_interactions) * (hi - lo)
    pos = np.minimum(np.searchsorted(cum, target, side="right"), n_items - 1)
    return users, by_topic[pos], item_topic


def random_projection_features(n_items: int, n_features: int, seed: int) -> np.ndarray:
    """float32 (n_items, n_features): a seeded Gaussian random projection of one-hot ids.

    Used by ``dense-linear`` when the data has no item features: row i is the image of
    the one-hot vector e_i under a random (n_items -> n_features) map, scaled so rows
    have norm about 1. Distinct items overlap (non-orthogonal inputs), which is C3's
    violation.
    """
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x5EED]))
    return (rng.normal(0.0, 1.0, size=(n_items, n_features)) / np.sqrt(n_features)).astype(
        np.float32
    )


def read_interactions(
    path: Path,
    *,
    fmt: str = "auto",
    user_col: str | None = None,
    item_col: str | None = None,
    time_col: str | None = None,
    times: str | None = None,
    progress: Progress = SILENT,
) -> TrainingData:
    """Read an interaction log into dense rows through the foundation's readers.

    Formats and column detection are those of :mod:`auditor.loading.logs`
    (MovieLens ``u.data``/``ratings.dat``/``ratings.csv``, RecBole ``.inter``, Parquet,
    CSV/TSV). Item rows follow the raw item ids sorted ascending; user rows follow
    first appearance in the log; interactions keep the log's order (histories sort by
    time when times are read, by that order when not).

    With ``times`` (or a ``time_col``), the time of each interaction is read too
    (:mod:`auditor.train.timestamps`; the column is found by its name when not given)
    when the log has such a column; ``timestamps`` stays None when it has none. What they
    are for (:data:`TIME_USES`) decides what a column with a blank or unreadable time does:
    ``"split"`` (a time split) refuses it; ``"order"`` (only the order of a history tower's
    recent items) falls back to file order, ``time_problem`` saying why, unless the user
    named the column (``time_col``), which is then refused.
    """
    path = Path(path)
    if fmt not in DATA_FORMATS:
        raise InputError(f"{setting('data_format')} must be one of {', '.join(DATA_FORMATS)}, got {fmt!r}")
    counts = count_item_ids(LogSpec(path, fmt, user_col, item_col), need_users=False, progress=progress)
    if counts.user_col is None:
        raise InteractionsError(
            f"cannot find a user id column in {path}; pass {setting('user_col')} NAME (training needs users)"
        )
    if counts.ids.size < 2:
        raise InteractionsError(f"{path}: training needs at least 2 distinct items, found {counts.ids.size}")
    found = LogSpec(path, fmt, counts.user_col, counts.item_col)  # the columns the counting chose
    pairs = read_pairs(found, ItemRows(counts.ids, int(counts.ids.size)))
    # The catalogue is the items of trainable rows: an item seen only beside a blank user
    # would be a phantom item of frequency 0 (users come from the pairs already).
    used = np.bincount(pairs.item_rows, minlength=counts.ids.size) > 0
    item_ids, item_rows = counts.ids[used], (np.cumsum(used) - 1)[pairs.item_rows]
    if item_ids.size < 2:
        raise InteractionsError(f"{path}: training needs at least 2 distinct items, found {item_ids.size}")
    description = {
        "kind": "file",
        "path": str(path),
        "format": counts.format or fmt,
        "user_col": counts.user_col,
        "item_col": counts.item_col,
        "n_interactions": len(pairs),
    }
    use = times or ("order" if time_col is not None else None)
    if use not in (None, *TIME_USES):
        raise InputError(f"times must be one of {', '.join(TIME_USES)} or None, got {use!r}")
    stamps, time_problem = _read_times(found, time_col, len(pairs), description, use) if use else (None, None)
    return TrainingData(
        users=pairs.user_index.astype(np.int64, copy=False),
        items=item_rows.astype(np.int64, copy=False),
        n_users=int(pairs.user_ids.size),
        n_items=int(item_ids.size),
        user_ids=pairs.user_ids.tolist(),
        item_ids=item_ids.tolist(),
        description=description,
        timestamps=stamps,
        warnings=_blank_ids_warning(found, counts, len(pairs)),
        time_problem=time_problem,
    )


def _blank_ids_warning(log_spec: LogSpec, counts: IdCounts, n_pairs: int) -> tuple[str, ...]:
    """The rows left out for a blank user or item id: how many, by column, and the first of
    each (data rows counted from 1 after any header); none when every row has both ids."""
    if not (counts.n_null_items or counts.n_null_users):
        return ()
    first_item, first_user = first_blank_rows(log_spec, bool(counts.n_null_items), bool(counts.n_null_users))
    parts = [f"{counts.n_null_items:,} with no item id (column {counts.item_col!r}, first at data row {first_item})"
             if counts.n_null_items else "",
             f"{counts.n_null_users:,} with no user id (column {counts.user_col!r}, first at data row {first_user})"
             if counts.n_null_users else ""]
    dropped = counts.n_null_items + counts.n_null_users
    return (f"{log_spec.path}: {dropped:,} of {dropped + n_pairs:,} rows ({dropped / (dropped + n_pairs):.1%}) have a "
            f"blank id and are left out of training and the catalogue: {'; '.join(p for p in parts if p)}",)


def _read_times(
    log_spec: LogSpec, time_col: str | None, n_pairs: int, description: dict[str, Any], use: str
) -> tuple[np.ndarray | None, str | None]:
    """The time of each of the log's ``n_pairs`` interactions (its column, named in
    ``description``), or None when the log has no time column, or (``use`` "order", the
    column found by name) one it cannot use, with why."""
    log = open_log(log_spec)
    column = find_time_column(log, time_col)
    if column is None:
        return None, None
    try:
        times = read_times(log, column)
        if times.shape[0] != n_pairs:  # both keep the rows whose two ids are present
            raise TimeColumnError(log_spec.path, column, None, f"{times.shape[0]:,} times for {n_pairs:,} interactions")
    except TimeColumnError as exc:
        if use == "split":
            raise InteractionsError(f"{exc}; fix the column or pass {setting('split')} random") from exc
        if time_col is not None:  # the user named it: file order would not be what was asked
            raise InteractionsError(f"{exc}; fix the column, or leave out {setting('time_col')}") from exc
        return None, str(exc)
    description["time_col"] = column
    return times, None
