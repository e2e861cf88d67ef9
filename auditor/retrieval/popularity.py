"""The popularity per item row the list measures use (the ``popularity`` setting), and,
when distinct users are asked for but the counts hold none, which input lacks them and
what gives them: the log's user column, a counts file's distinct-users column, or the
log itself in place of a checkpoint's recorded counts (a checkpoint that records every
training pair has them: :func:`auditor.loading.statistics.recorded_users`)."""

from __future__ import annotations

import numpy as np

from auditor.errors import InputError, setting
from auditor.model import ItemStats


def popularity_of(stats: ItemStats, kind: str) -> np.ndarray:
    """Distinct users per item row (``kind`` ``users``) or training interactions (any other
    kind), as int64; InputError naming the input and its remedy when users are missing."""
    if kind == "users":
        if stats.user_counts is None:
            raise InputError(no_user_counts(stats))
        return np.asarray(stats.user_counts, dtype=np.int64)
    return np.asarray(stats.frequencies, dtype=np.int64)


def no_user_counts(stats: ItemStats) -> str:
    """Why ``popularity users`` cannot be measured from ``stats``, naming where the counts
    came from and the setting that supplies distinct users there."""
    flag, source = setting("popularity"), stats.source
    if stats.from_counts_file:
        what = f"the counts file {source} has no distinct-users column"
        remedy = (f"name it with {setting('user_count_col')} (or give a counts file with one, or the log itself "
                  f"with {setting('interactions')})")
    elif stats.from_checkpoint:
        what = f"the checkpoint {source} records interactions per item, not every (user, item) training pair"
        remedy = (f"give the log it was trained on with {setting('interactions')} (its training part only, where it "
                  "held some out)")
    else:
        what = "the interaction log" + (f" {source}" if source else "") + " has no user column"
        remedy = f"pass {setting('user_col')} NAME"
    return f"{flag} users needs distinct users per item, but {what}: {remedy}, or use {flag} interactions"
