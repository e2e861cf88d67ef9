"""Held-out evaluation: the accuracy of the lists retrieval served (docs/report.md, "Trade-off").

Protocol: the queries are the audit's population (the training users, each served the
top-K of every scoring with their training items excluded unless ``keep_seen``); the
users evaluated are those of them with at least one held-out item
(:class:`~auditor.model.HeldOutQueries`, formed by the load stage), scored on exactly the
lists whose exposure the retrieval section measures (:mod:`auditor.metrics.accuracy`).
The evaluated users are measured in the order of their raw user ids
(:func:`~auditor.metrics.exposure.canonical_rows`, the order the trade-off's head slots
take too), never the holdout file's order of first appearance: the means and the
trade-off's bootstrap resamples of the per-user NDCG are then the same whatever order the
holdout stores its rows in.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from auditor.loading.csr import take_csr
from auditor.metrics.accuracy import HeldOutHits, find_hits
from auditor.metrics.exposure import canonical_rows
from auditor.model import HeldOutQueries
from auditor.result import Accuracy, RankingAccuracy
from auditor.protocol import RECORDED_SPLIT_REPEATS
from auditor.sections import SERVED
from auditor.errors import setting
from auditor.served_section import UNTRAINED_SERVED

PROTOCOL = (
    "queries: the audit's population (the training users; see retrieval.population), each served the top-K of every "
    "scoring with their training items excluded; evaluated: those of them with a held-out item, on the same lists; "
    "held-out items without a table row dropped; measures @K (RecBole's definitions) averaged over evaluated users"
)
UNTRAINED = (
    "also evaluated, as RecBole's own test evaluates them: {n:,} held-out users with no training interaction in "
    "RecBole's split, ranked by {by} with their validation items masked, on lists no exposure figure counts"
)
"""RecBole's route (:func:`auditor.loading.recbole_eval.recbole_heldout`): its untrained test users."""
PROTOCOL_KEEP_SEEN = PROTOCOL.replace("with their training items excluded", "with their training items kept")


def repeats_convention(keep_seen: bool, repeats_dropped: bool) -> str:
    """How held-out pairs that repeat one of the user's training pairs count in recall and
    NDCG, for every row alike (the one policy; :func:`unhittable_repeats` applies it):
    dropped before evaluation by a popaudit checkpoint's recorded split (not in |H_u|);
    else kept in |H_u|, as misses when training items are excluded (RecBole's convention:
    a model's lists never hold them, and a served list that re-serves one is scored as
    served, that slot a miss), or hittable with ``keep_seen``. The same model on the same
    split scores lower by the second route wherever there are repeats, so the report
    names the convention beside the figures."""
    if repeats_dropped:
        return RECORDED_SPLIT_REPEATS
    if keep_seen:
        return ("held-out repeats of a training pair kept and hittable, training items being candidates (served lists "
                "too, scored as served)")
    return ("held-out repeats of a training pair kept as misses for every row, as RecBole counts them (never hit: a "
            "served list that re-serves one is scored as served, that slot a miss)")


def unhittable_repeats(
    heldout: HeldOutQueries, training: tuple[np.ndarray, np.ndarray] | None, keep_seen: bool
) -> np.ndarray | None:
    """bool over ``heldout.items``: the held-out repeats of a training pair that no list may
    hit (:func:`repeats_convention`), ``training`` being CSR of each list row's training
    items kept out of the candidates (rows past it: none); None where none is voided
    (``keep_seen``, a recorded split that dropped them, training items unknown)."""
    if keep_seen or heldout.repeats_dropped or training is None or not heldout.items.size:
        return None
    indptr, rows = np.asarray(training[0], dtype=np.int64), np.asarray(training[1], dtype=np.int64)
    # RecBole's untrained test users follow the rows: an empty set appended stands for them
    ext = np.append(indptr, indptr[-1])
    own_indptr, own = take_csr(ext, rows, np.minimum(np.asarray(heldout.positions, dtype=np.int64), indptr.size - 1))
    owner = np.repeat(np.arange(own_indptr.size - 1, dtype=np.int64), np.diff(own_indptr))
    held_owner = np.repeat(np.arange(own_indptr.size - 1, dtype=np.int64), np.diff(heldout.indptr))
    span = int(max(heldout.items.max(), rows.max() if rows.size else 0)) + 1
    repeats = np.isin(held_owner * span + heldout.items, owner * span + own)
    return repeats if repeats.any() else None


@dataclass(frozen=True)
class Evaluation:
    """Held-out accuracy of the served lists and the per-user NDCG behind it."""

    accuracy: Accuracy
    ndcg: dict[int, dict[str, np.ndarray]]
    """K -> scoring -> per-user NDCG@K of the evaluated users (for the trade-off's intervals)."""
    user_ids: np.ndarray
    """Raw user id of each evaluated user (the rows of ``ndcg``'s arrays): ascending, where ids sort."""
    notes: tuple[str, ...] = ()
    """Warnings: what the served lists' re-served training items cost them (:func:`reserved_cost`)."""


def evaluate(
    heldout: HeldOutQueries, lists: dict[str, np.ndarray], ks: list[int], *, tolerance: float, keep_seen: bool,
    seen_excluded: bool, untrained_served: np.ndarray | None = None,
    training: tuple[np.ndarray, np.ndarray] | None = None,
) -> Evaluation:
    """Accuracy at every K of each scoring's ``lists`` (rows aligned with the query
    population) for the evaluated users of ``heldout``; ``untrained_served``: the served
    lists of its untrained users (None: no served lists), said in the protocol;
    ``training``: CSR of each list row's training items, whose held-out repeats are misses
    for every list unless ``keep_seen`` (:func:`repeats_convention`)."""
    at: dict[int, dict[str, RankingAccuracy]] = {k: {} for k in ks}
    ndcg: dict[int, dict[str, np.ndarray]] = {k: {} for k in ks}
    order = canonical_rows(heldout.user_ids)  # None: ids that do not sort, kept as read
    voided = unhittable_repeats(heldout, training, keep_seen)
    notes: list[str] = []
    if heldout.n:
        for name, served in lists.items():
            hits = find_hits(served[heldout.positions], heldout.indptr, heldout.items, voided)
            measured = [k for k in ks if k <= served.shape[1]]  # served lists shorter than K: not measured at K
            if name == SERVED and voided is not None and measured:  # a model's lists never hold a repeat
                notes += reserved_cost(hits, find_hits(served[heldout.positions], heldout.indptr, heldout.items),
                                       measured)
            hits = hits if order is None else HeldOutHits(hits.hits[order], hits.n_relevant[order])
            for k in measured:
                per_user = hits.at(k)
                at[k][name], ndcg[k][name] = per_user.mean(), per_user.ndcg
    repeats = repeats_convention(keep_seen, heldout.repeats_dropped)
    untrained = "" if heldout.untrained is None else f"; {UNTRAINED.format(n=heldout.n_untrained, by=heldout.untrained.what)}"
    if heldout.untrained is not None and untrained_served is not None:
        untrained += f"; {UNTRAINED_SERVED}"
    accuracy = Accuracy(
        protocol=(PROTOCOL_KEEP_SEEN if keep_seen else PROTOCOL) + untrained + "; " + repeats,
        n_users_evaluated=heldout.n,
        n_dropped=heldout.n_dropped,
        at=at,
        holdout=heldout.source,
        holdout_fingerprint=heldout.fingerprint or None,
        n_holdout_interactions=heldout.n_interactions,
        n_dropped_users=heldout.n_dropped_users,
        seen_excluded=seen_excluded,
        tolerance=tolerance,
        n_users_not_in_training=heldout.n_not_in_training,
        n_users_not_sampled=heldout.n_not_sampled,
        repeats=repeats,
        n_repeats_dropped=heldout.n_repeats_dropped,
        n_pairs_evaluated=int(heldout.items.size),
    )
    return Evaluation(accuracy, ndcg, heldout.user_ids if order is None else heldout.user_ids[order], tuple(notes))


def reserved_cost(scored: HeldOutHits, as_hits: HeldOutHits, ks: list[int]) -> list[str]:
    """The warning that served lists re-serve held-out repeats of a training pair, each a
    miss (``scored``), with what the figures would be were they hits (``as_hits``: what
    ``keep_seen`` measures for every row); none when no slot holds one. Both in one user
    order: the counts and means do not depend on it."""
    voided = as_hits.hits & ~scored.hits
    if not voided.any():
        return []
    cuts = []
    for k in ks:
        n = int(voided[:, :k].sum())
        if n:
            cuts.append(f"@{k}: {n:,} slots of {int(voided[:, :k].any(axis=1).sum()):,} users, NDCG "
                        f"{scored.mean_at(k).ndcg:.4f}, recall {scored.mean_at(k).recall:.4f} ("
                        f"{as_hits.mean_at(k).ndcg:.4f} and {as_hits.mean_at(k).recall:.4f} counted as hits)")
    return [f"the served lists re-serve training items that are held-out repeats of a training pair; the accuracy "
            "counts each as a miss, as for every row, the lists scored as served (a re-served training item is never "
            f"a hit unless {setting('keep_seen')}, which counts repeats as hits for every row): " + "; ".join(cuts)]
