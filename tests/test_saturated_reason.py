"""The saturation reason says what happened (Logs F3 of QA round 10).

Before, a log in which every user had seen 35 of 40 items (5 unseen candidates each) had its
harm "not measured at K=10 (K reaches the catalogue: every list holds every candidate)",
pointing at -k and the catalogue when K=10 is a quarter of it: seen-item filtering left each
user K or fewer candidates.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from auditor.audit import run_audit
from auditor.config import AuditConfig
from auditor.report.harms import cutoff_title
from auditor.wording import SATURATED, saturated_reason

N_ITEMS, N_USERS, UNSEEN = 40, 12, 5


def _dense(tmp_path: Path) -> tuple[Path, Path, int]:
    rng = np.random.default_rng(4)
    users, items = [], []
    for u in range(N_USERS):
        seen = rng.permutation(N_ITEMS)[: N_ITEMS - UNSEEN]
        reps = rng.integers(1, 6, size=seen.size) * (1 + (seen < 8) * 5)
        users += [u] * int(reps.sum())
        items += np.repeat(seen, reps).tolist()
    log = tmp_path / "log.parquet"
    pq.write_table(pa.table({"user_id": users, "item_id": items}), log)
    model = tmp_path / "model.npz"
    np.savez(model, item_embeddings=rng.normal(size=(N_ITEMS, 8)).astype(np.float32),
             user_embeddings=rng.normal(size=(N_USERS, 8)).astype(np.float32))
    # Independently: the fewest items any user has seen, and so the most unseen candidates any has.
    seen_counts = [len(set(np.asarray(items)[np.asarray(users) == u].tolist())) for u in range(N_USERS)]
    return model, log, N_ITEMS - min(seen_counts)


def test_seen_item_filtering_is_the_reason_given_not_the_catalogue(tmp_path: Path) -> None:
    model, log, most_unseen = _dense(tmp_path)
    assert most_unseen == UNSEEN
    result = run_audit(AuditConfig(model=model, interactions=log, ks=(10,), probes=False, bootstrap=0, seed=1))
    assert result.retrieval is not None and result.retrieval.saturated == {10: True}
    assert result.retrieval.n_saturated == {10: N_USERS}
    said = ("the harm is not measured at K=10 (K holds every unseen candidate: seen items are not served, and each "
            "user has 10 or fewer of the 40 items unseen; keep_seen measures it)")
    assert said in result.verdict.summary
    assert "reaches the catalogue" not in result.verdict.summary  # was said, K=10 < 40 items
    assert "K holds every unseen candidate" in cutoff_title(result.retrieval, 10, N_ITEMS)


@pytest.mark.parametrize(("k", "catalogue", "seen", "starts"), [
    (40, 40, True, SATURATED), (50, 40, False, SATURATED),
    (10, 40, True, "K holds every unseen candidate: seen items are not served, and each user has 10 or fewer"),
    (10, 40, False, "K holds every candidate of every query"), (10, None, True, "K holds every candidate of every query"),
])
def test_the_reason_by_case(k: int, catalogue: int | None, seen: bool, starts: str) -> None:
    assert saturated_reason(k, catalogue, seen).startswith(starts)


@pytest.mark.parametrize("unseen", [[8] * N_USERS, list(range(3, 9)) * 2, [2] * N_USERS])
def test_the_reason_claims_no_figure_the_log_does_not_hold(tmp_path: Path, unseen: list[int]) -> None:
    # Logs F3 remainder (QA round 10 verification): "every user has seen at least 30 of the 40 items" was
    # M - K, not a figure of the log (its users had seen 32, 33 to 37 and 38 items). It is said as the bound
    # K gives, which holds: every user's unseen items number K or fewer.
    rng = np.random.default_rng(5)
    users, items = [], []
    for u, left in enumerate(unseen):
        seen = rng.permutation(N_ITEMS)[: N_ITEMS - left]
        users += [u] * seen.size
        items += seen.tolist()
    log = tmp_path / "log.parquet"
    pq.write_table(pa.table({"user_id": users, "item_id": items}), log)
    model = tmp_path / "model.npz"
    np.savez(model, item_embeddings=rng.normal(size=(N_ITEMS, 8)).astype(np.float32),
             user_embeddings=rng.normal(size=(N_USERS, 8)).astype(np.float32))
    most_unseen = max(N_ITEMS - len(set(np.asarray(items)[np.asarray(users) == u].tolist())) for u in range(N_USERS))
    assert most_unseen == max(unseen) <= 10
    result = run_audit(AuditConfig(model=model, interactions=log, ks=(10,), probes=False, bootstrap=0, seed=1))
    assert "each user has 10 or fewer of the 40 items unseen" in result.verdict.summary
    assert "has seen at least" not in result.verdict.summary
