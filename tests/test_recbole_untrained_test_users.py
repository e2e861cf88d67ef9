"""RecBole's route under a global split (RS with group_by none, TS): the test users who
have no training interaction are evaluated as RecBole's own test evaluates them, by their
stored (untrained) user rows with their validation items masked (QA6 served F1).

Known answer: a 30-line .inter whose ratio split [0.8, 0.1, 0.1] over the whole time-ordered
sequence is fixed by hand (lines 1-24 train, 25-27 valid, 28-30 test), a RecBole-shaped
checkpoint with fixed tables, and RecBole's metrics computed here in numpy.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from auditor.audit import run_audit
from auditor.config import AuditConfig
from auditor.result import AuditResult
from recbole_helpers import write_checkpoint

TRAIN = [(0, 0), (0, 1), (1, 2), (1, 3), (2, 4), (2, 5), (3, 6), (3, 7), (0, 2), (1, 4), (2, 6), (3, 0),
         (0, 3), (1, 5), (2, 7), (3, 1), (0, 4), (1, 6), (2, 0), (3, 2), (0, 6), (1, 0), (2, 1), (3, 3)]
VALID = [(4, 0), (4, 2), (0, 5)]
TEST = [(1, 7), (4, 3), (5, 6)]  # u1 trained; u4 only validated; u5 never seen before its test
N_USERS, N_ITEMS, KS = 6, 8, (2, 4)
GLOBAL = {"eval_args": {"split": {"RS": [0.8, 0.1, 0.1]}, "order": "TO", "group_by": "none", "mode": "full"}}


def _tables() -> tuple[np.ndarray, np.ndarray]:
    """User and item tables with their padding row 0 (RecBole's row r is user/item r - 1 here)."""
    rng = np.random.default_rng(7)
    return rng.normal(size=(N_USERS + 1, 3)), rng.normal(size=(N_ITEMS + 1, 3))


def _write(tmp_path: Path) -> tuple[Path, Path]:
    inter = tmp_path / "g.inter"
    rows = [f"u{u}\ti{i}\t{t}" for t, (u, i) in enumerate(TRAIN + VALID + TEST, start=1)]
    inter.write_text("user_id:token\titem_id:token\ttimestamp:float\n" + "\n".join(rows) + "\n", encoding="utf-8")
    model = tmp_path / "BPR-g.pth"
    write_checkpoint(model, "BPR", GLOBAL, N_USERS, N_ITEMS, dim=3, tables=_tables())
    return model, inter


def _expected() -> dict[int, dict[str, float]]:
    """RecBole's full-sort test: each test user ranks every item by dot product of the
    float32 tables, masking their train and valid items less their test items; one held-out
    item each, so recall = hit, NDCG = 1/log2(rank + 1), MRR = 1/rank (0 past K)."""
    users, items = (t.astype(np.float32) for t in _tables())
    seen = {u: {i for v, i in TRAIN + VALID if v == u} for u in range(N_USERS)}
    ranks = []
    for user, item in TEST:
        scores = users[user + 1] @ items[1:].T
        masked = np.array([i in seen[user] and i != item for i in range(N_ITEMS)])
        scores = np.where(masked, -np.inf, scores)
        ranks.append(1 + int((scores > scores[item]).sum()))
    out = {}
    for k in KS:
        hit = np.array([r <= k for r in ranks], dtype=float)
        inverse = np.array([1.0 / r if r <= k else 0.0 for r in ranks])
        ndcg = np.array([1.0 / np.log2(r + 1) if r <= k else 0.0 for r in ranks])
        out[k] = {"recall": hit.mean(), "ndcg": ndcg.mean(), "hit_rate": hit.mean(), "mrr": inverse.mean()}
    return out


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> AuditResult:
    model, inter = _write(tmp_path_factory.mktemp("global"))
    return run_audit(AuditConfig(model=model, interactions=inter, ks=KS, bootstrap=100, probes=False))


def test_untrained_test_users_are_evaluated_as_recbole_does(audited: AuditResult) -> None:
    """All three test users are evaluated (the old route evaluated u1 alone), with
    RecBole's figures at every K."""
    accuracy = audited.accuracy
    assert accuracy is not None
    assert accuracy.n_users_evaluated == 3 and accuracy.n_users_not_in_training == 0
    for k, expected in _expected().items():
        found = accuracy.at[k]["dot"]
        for name, value in expected.items():
            assert getattr(found, name) == pytest.approx(value, abs=1e-12), (k, name)
    assert "2 held-out users with no training interaction in RecBole's split" in accuracy.protocol


def test_exposure_keeps_to_the_trained_users_and_a_note_counts_the_untrained(audited: AuditResult) -> None:
    assert audited.retrieval is not None and audited.retrieval.n_queries == 4  # u0..u3 trained
    notes = [w for w in audited.warnings if "have no training interaction" in w]
    assert len(notes) == 1 and notes[0].startswith("2 of the 3 held-out users of ")
    assert "exposure and retrieval keep to the 4 queried (trained) users" in notes[0]


def test_popular_scoring_ranks_them_too(audited: AuditResult) -> None:
    """The most-popular list (training counts, masked as RecBole masks) of each test user:
    u1 masks i0, i2..i6 (i7 is its test item); u4 masks i0, i2; u5 nothing."""
    accuracy = audited.accuracy
    assert accuracy is not None
    counts = np.bincount([i for _, i in TRAIN], minlength=N_ITEMS)
    seen = {1: {0, 2, 3, 4, 5, 6}, 4: {0, 2}, 5: set()}
    hits = []
    for user, item in TEST:
        order = [i for i in np.lexsort((np.arange(N_ITEMS), -counts)) if i not in seen[user]]
        hits.append(order.index(item) + 1)
    assert hits == [2, 3, 2]
    assert accuracy.at[4]["popular"].mrr == pytest.approx(np.mean([1 / r for r in hits]))  # 0.4444 (u1 alone: 0.5)


def test_queried_only_drops_the_untrained_users_and_counts_them() -> None:
    """Lists of the queried users alone (a mitigated table's history queries) are scored
    without the untrained users, who are counted as absent from the training log again."""
    from auditor.model import HeldOutQueries, QueryPopulation

    untrained = QueryPopulation(vectors=np.ones((1, 2), dtype=np.float32), source="users", description="")
    heldout = HeldOutQueries(positions=np.array([1, 2, 0]), indptr=np.array([0, 2, 3, 4]), items=np.array([5, 6, 7, 8]),
                             source="s", n_not_in_training=1, n_queried=2, untrained=untrained)
    queried = heldout.queried_only()
    assert queried.positions.tolist() == [1, 0] and queried.indptr.tolist() == [0, 2, 3]
    assert queried.items.tolist() == [5, 6, 8] and queried.n_not_in_training == 2 and queried.untrained is None
