"""Probe batches: real training pairs from the log (or, without one, sampled pairs)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from auditor.errors import ProbeError
from auditor.idmap import check_assumed_rows, check_mapped_shift
from auditor.values import RowIdPolicy
from auditor.model import InteractionPairs, LiveModel, ModelBundle


@dataclass
class ProbeBatch:
    """Matched (user row, item row) pairs for one probe step."""

    users: np.ndarray
    items: np.ndarray
    source: str


def sample_batches(
    bundle: ModelBundle,
    pairs: InteractionPairs | None,
    live: LiveModel,
    *,
    size: int,
    steps: int,
    rng: np.random.Generator,
    row_ids: RowIdPolicy = RowIdPolicy(),
) -> list[ProbeBatch]:
    """``steps`` batches of real training pairs (or, without a log, sampled pairs).

    Users of the log are mapped to user-table rows through ``bundle.user_ids``; without
    ids, integer user ids inside the table's range are taken as rows. Without a usable
    log, items are drawn by training frequency (when known) and users uniformly.
    """
    n_users = _n_users(bundle, live)
    if pairs is None:  # a popaudit checkpoint records its training pairs
        pairs = getattr(bundle, "train_pairs", None)
    users_items = _log_pairs(bundle, pairs, n_users, row_ids)
    batches: list[ProbeBatch] = []
    for _ in range(steps):
        if users_items is not None:
            users, items, source = users_items
            take = rng.choice(len(items), size=min(size, len(items)), replace=False)
            batches.append(ProbeBatch(users[take], items[take], source))
            continue
        if n_users is None:
            raise ProbeError(
                "cannot form a probe batch: no interaction log maps onto the user tower and "
                "the number of users is unknown"
            )
        freq = bundle.item_frequencies
        if freq is not None and len(freq) == bundle.n_items and float(np.sum(freq)) > 0:
            p = np.asarray(freq, dtype=np.float64) / float(np.sum(freq))
            items = rng.choice(bundle.n_items, size=size, p=p)
            source = "sampled pairs: items by recorded training frequency, users uniform"
        else:
            items = rng.integers(0, bundle.n_items, size=size)
            source = "sampled pairs: items and users uniform (no interaction log)"
        users = _uniform_users(bundle, n_users, size, rng)
        batches.append(ProbeBatch(users.astype(np.int64), items.astype(np.int64), source))
    return batches


def _n_users(bundle: ModelBundle, live: LiveModel) -> int | None:
    if bundle.user_table is not None:
        return int(bundle.user_table.shape[0])
    n = getattr(live, "n_users", None)
    return int(n) if isinstance(n, (int, np.integer)) else None


def _log_pairs(
    bundle: ModelBundle, pairs: InteractionPairs | None, n_users: int | None, row_ids: RowIdPolicy
) -> tuple[np.ndarray, np.ndarray, str] | None:
    """(user rows, item rows, description) of the log's pairs the model can encode.

    Without user ids, integer user ids are taken as user-table rows (minus the offset);
    a log user beyond the user table then stops the audit (:func:`check_assumed_rows`), as
    log ids that look shifted against the user ids do (:func:`check_mapped_shift`).
    """
    if pairs is None or len(pairs) == 0:
        return None
    raw_users = np.asarray(pairs.user_ids)[pairs.user_index]
    if bundle.user_ids is not None:
        model_ids = np.asarray(bundle.user_ids)
        if pairs.source is not None:  # the log's ids, held to the rule the query population's are
            check_mapped_shift(np.asarray(pairs.user_ids), None, model_ids, row_ids, "user", pairs.source,
                               bundle.user_ids_source or "the model's user ids")
        order = np.argsort(model_ids, kind="stable")
        try:
            pos = np.searchsorted(model_ids[order], raw_users)
        except TypeError:  # raw ids of different types (str vs int) never match
            return None
        pos = np.clip(pos, 0, len(order) - 1)
        ok = model_ids[order][pos] == raw_users
        rows = order[pos]
        source = "interaction log (users mapped through the model's user ids)"
    elif n_users is not None and np.issubdtype(raw_users.dtype, np.integer):
        if pairs.source is not None:  # the log's ids, not rows recorded by popaudit retrain
            items = None if bundle.item_ids is not None else ("item", pairs.item_rows + row_ids.shift, bundle.n_items)
            check_assumed_rows(np.asarray(pairs.user_ids), n_users, row_ids, "user", pairs.source, other=items)
        rows = raw_users - row_ids.shift
        ok = (rows >= 0) & (rows < n_users)
        source = "interaction log (user ids taken as user-table rows)"
    else:
        return None
    if bundle.nonfinite_user_rows is not None:  # a NaN row would make every probe through it NaN
        ok &= ~np.isin(rows, bundle.nonfinite_user_rows)
    if not np.any(ok):
        return None
    return rows[ok].astype(np.int64), pairs.item_rows[ok].astype(np.int64), source


def _uniform_users(bundle: ModelBundle, n_users: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` user rows drawn uniformly, from the finite rows where some are not."""
    bad = bundle.nonfinite_user_rows
    if bad is None:
        return rng.integers(0, n_users, size=size)
    finite = np.setdiff1d(np.arange(n_users), bad)
    if not finite.size:
        raise ProbeError("cannot form a probe batch: every user-table row holds NaN or infinite values")
    return finite[rng.integers(0, finite.size, size=size)]
