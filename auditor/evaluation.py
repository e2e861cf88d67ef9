"""Held-out evaluation: accuracy beside exposure for every scoring (docs/report.md, "Trade-off").

Protocol: queries are the user-table rows of users with at least one held-out item (or,
without a user table, the mean vector of each user's training items), sampled to
``max_queries``; candidates are all items except the user's training items (unless
``keep_seen``); held-out items without a table row are dropped and counted. One pass of
inner products ranks every scoring (:mod:`auditor.retrieval.serving`), the retrieval
section measures those same lists, and :mod:`auditor.metrics.accuracy` scores them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from typing import TYPE_CHECKING

import numpy as np

from auditor.config import AuditConfig
from auditor.errors import setting
from auditor.loading.history import sample_indices
from auditor.metrics.builtin_measures import LIST_MEASURES
from auditor.model import ItemStats, ModelBundle
from auditor.progress import Progress
from auditor.result import Accuracy, RankingAccuracy

if TYPE_CHECKING:
    from auditor.hookspecs import ListMeasure
    from auditor.retrieval.measure import RetrievalOutcome

PROTOCOL = (
    "queries: users with a held-out item (their user-table rows, else the mean of their training items); "
    "candidates: every item but the user's training items; held-out items without a table row dropped; "
    "measures @K (RecBole's definitions) averaged over evaluated users"
)
PROTOCOL_KEEP_SEEN = PROTOCOL.replace("every item but the user's training items", "every item (training items kept)")


@dataclass
class Evaluation:
    """The retrieval measured over the held-out users' lists (with the evaluation's own
    warnings added), and those lists' accuracy."""

    serving: RetrievalOutcome
    accuracy: Accuracy


def holdout_reason(bundle: ModelBundle, config: AuditConfig) -> str | None:
    """Why accuracy cannot be measured here (None: it can)."""
    if config.holdout is None and bundle.holdout_pairs is None:
        return (
            f"no held-out interactions: pass {setting('holdout')} PATH (a log of interactions kept out of "
            "training) to measure recall/NDCG of dot, cosine and norm-aware serving beside their exposure"
        )
    if not config.retrieval:
        return f"skipped with {setting('retrieval')} (accuracy ranks the same lists as retrieval)"
    return None


def evaluate(
    bundle: ModelBundle,
    stats: ItemStats,
    config: AuditConfig,
    progress: Progress,
    list_measures: Sequence[ListMeasure] = LIST_MEASURES,
) -> Evaluation:
    """Rank the held-out users' candidates under every scoring; measure accuracy and exposure
    (with ``list_measures``, default the built-in ones)."""
    from auditor.loading.holdout import load_holdout, load_seen, mean_rows
    from auditor.metrics.accuracy import accuracy_at
    from auditor.retrieval.measure import measure_retrieval
    from auditor.retrieval.serving import ServedQueries

    warnings: list[str] = []
    heldout = load_holdout(bundle, config, progress)
    warnings += heldout.warnings
    users = heldout.users
    picked = sample_indices(users.n, config.max_queries, config.seed)
    if picked is not None:
        users = users.subset(picked)
    seen = load_seen(bundle, config, users, progress)
    warnings += seen.warnings
    if bundle.user_table is not None:
        vectors = np.asarray(bundle.user_table[users.user_rows], dtype=np.float32)
        source = f"users with a held-out item: their user-table rows ({users.n:,}"
    else:
        vectors = mean_rows(bundle.item_table, seen.indptr, seen.rows)
        source = f"users with a held-out item: mean of their training items ({users.n:,}"
    source += f", sampled with seed {config.seed})" if picked is not None else ")"
    nonzero = np.any(vectors, axis=1)
    if not nonzero.all():
        n_zero = int((~nonzero).sum())
        warnings.append(
            f"{n_zero:,} held-out users have a zero query vector (no direction to rank by) and were left out "
            "of the accuracy"
        )
        keep = np.flatnonzero(nonzero)
        users, seen, vectors = users.subset(keep), seen.subset(keep), vectors[keep]
    exclude = None if config.keep_seen else (seen.indptr, seen.rows)
    served = ServedQueries(
        vectors=np.ascontiguousarray(vectors),
        description=source,
        alphas=tuple(config.alphas),
        exclude_indptr=None if exclude is None else exclude[0],
        exclude_rows=None if exclude is None else exclude[1],
    )
    outcome = measure_retrieval(bundle, stats, config, None, progress, served=served, list_measures=list_measures)
    ks = sorted(outcome.retrieval.at)
    by_scoring = {name: accuracy_at(rows, users.indptr, users.item_rows, ks) for name, rows in outcome.lists.items()}
    at: dict[int, dict[str, RankingAccuracy]] = {k: {name: per_k[k] for name, per_k in by_scoring.items()} for k in ks}
    accuracy = Accuracy(
        protocol=PROTOCOL_KEEP_SEEN if config.keep_seen else PROTOCOL,
        n_users_evaluated=users.n,
        n_dropped=heldout.n_dropped,
        at=at,
        holdout=heldout.source,
        n_holdout_interactions=heldout.n_interactions,
        n_dropped_users=heldout.n_dropped_users,
        seen_excluded=not config.keep_seen,
        tolerance=config.accuracy_tolerance,
    )
    outcome.warnings[:0] = warnings
    return Evaluation(outcome, accuracy)
