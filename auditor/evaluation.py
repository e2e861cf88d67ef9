"""Held-out evaluation: the accuracy of the lists retrieval served (docs/report.md, "Trade-off").

Protocol: the queries are the audit's population (:mod:`auditor.loading.population`:
the training users, each served the top-K of every scoring with their training items
excluded unless ``keep_seen``); the users evaluated are those of them with at least one
held-out item, scored on exactly the lists whose exposure the retrieval section
measures (:mod:`auditor.metrics.accuracy`). Held-out items without a table row are
dropped and counted; held-out users who never appear in the training log (no trained
vector, nothing to rank by) or were not sampled are left out and counted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from auditor.config import AuditConfig
from auditor.errors import setting
from auditor.values import RowLookup
from auditor.loading.holdout import HeldOut, HeldOutUsers, SeenItems, load_holdout, overlap_warnings, take_csr
from auditor.loading.population import QueryPopulation
from auditor.metrics.accuracy import find_hits
from auditor.model import ModelBundle
from auditor.progress import Progress
from auditor.result import Accuracy, RankingAccuracy

PROTOCOL = (
    "queries: the audit's population (the training users; see retrieval.population), each served the top-K of every "
    "scoring with their training items excluded; evaluated: those of them with a held-out item, on the same lists; "
    "held-out items without a table row dropped; measures @K (RecBole's definitions) averaged over evaluated users"
)
PROTOCOL_KEEP_SEEN = PROTOCOL.replace("with their training items excluded", "with their training items kept")


@dataclass(frozen=True)
class Evaluation:
    """Held-out accuracy of the served lists, the per-user NDCG behind it, and warnings."""

    accuracy: Accuracy
    positions: np.ndarray
    """Population position (row of the served lists) of each evaluated user."""
    ndcg: dict[int, dict[str, np.ndarray]]
    """K -> scoring -> per-user NDCG@K of the evaluated users (for the trade-off's intervals)."""
    warnings: list[str]


def holdout_reason(bundle: ModelBundle, config: AuditConfig) -> str | None:
    """Why accuracy cannot be measured here (None: it can, once retrieval has served lists)."""
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
    config: AuditConfig,
    population: QueryPopulation,
    lists: dict[str, np.ndarray],
    ks: list[int],
    progress: Progress,
) -> Evaluation:
    """Accuracy at every K of each scoring's ``lists`` (rows aligned with ``population``)
    for the population's users with a held-out item."""
    n_user_rows = None
    if population.source == "users" and bundle.user_table is not None:
        n_user_rows = int(bundle.user_table.shape[0])
    heldout = load_holdout(bundle, config, n_user_rows, progress)
    users, positions, left_out, warnings = _evaluated(heldout, population)
    if population.seen_indptr is not None and population.seen_rows is not None and users.n:
        indptr, rows = take_csr(population.seen_indptr, population.seen_rows, positions)
        warnings += overlap_warnings(users, SeenItems(indptr, rows, population.seen_source), heldout.source,
                                     config.keep_seen)
    at: dict[int, dict[str, RankingAccuracy]] = {k: {} for k in ks}
    ndcg: dict[int, dict[str, np.ndarray]] = {k: {} for k in ks}
    if users.n:
        for name, served in lists.items():
            hits = find_hits(served[positions], users.indptr, users.item_rows)
            for k in ks:
                per_user = hits.at(k)
                at[k][name], ndcg[k][name] = per_user.mean(), per_user.ndcg
    accuracy = Accuracy(
        protocol=PROTOCOL_KEEP_SEEN if config.keep_seen else PROTOCOL,
        n_users_evaluated=users.n,
        n_dropped=heldout.n_dropped,
        at=at,
        holdout=heldout.source,
        n_holdout_interactions=heldout.n_interactions,
        n_dropped_users=heldout.n_dropped_users,
        seen_excluded=population.exclude is not None,
        tolerance=config.accuracy_tolerance,
        n_users_not_in_training=left_out[0],
        n_users_not_sampled=left_out[1],
    )
    return Evaluation(accuracy, positions, ndcg, heldout.warnings + warnings)


def _evaluated(
    heldout: HeldOut, population: QueryPopulation
) -> tuple[HeldOutUsers, np.ndarray, tuple[int, int], list[str]]:
    """The held-out users among the queries, their query positions, how many were left out
    (never trained, not sampled) and the warnings saying so."""
    held = heldout.users
    assert population.raw_ids is not None, "holdout_reason refuses populations without user ids"
    at = RowLookup(population.raw_ids)(pa.array(held.raw_ids)) if held.n else np.empty(0, np.int64)
    found = np.flatnonzero(at >= 0)
    warnings: list[str] = []
    not_sampled = _n_not_sampled(held, population)
    untrained = held.n - found.size - not_sampled
    if untrained:
        warnings.append(
            f"{untrained:,} of the {held.n:,} held-out users in {heldout.source} never appear in the training log "
            "(no trained vector, no history to rank by): left out of the accuracy"
        )
    if not_sampled:
        warnings.append(
            f"{not_sampled:,} of the {held.n:,} held-out users were not among the queries (sampled out, or a zero "
            f"query vector): accuracy is over the {found.size:,} that were ({setting('max_queries')})"
        )
    if found.size == 0:
        warnings.append(f"no held-out user of {heldout.source} is among the queried users: accuracy is not defined")
    return held.subset(found), at[found], (untrained, not_sampled), warnings


def _n_not_sampled(held: HeldOutUsers, population: QueryPopulation) -> int:
    """Held-out users eligible for the population (they trained) but not queried."""
    if not held.n or population.eligible_ids is None or population.raw_ids is None:
        return 0
    eligible = RowLookup(population.eligible_ids)(pa.array(held.raw_ids)) >= 0
    queried = RowLookup(population.raw_ids)(pa.array(held.raw_ids)) >= 0
    return int((eligible & ~queried).sum())
