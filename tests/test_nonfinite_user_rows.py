"""A user-table row with NaN or infinite values: refused only where a figure would use it.

A row no figure uses (a user absent from the log, never queried) is warned about and the
audit goes on with figures equal to those of the same model with a finite row there; the
queries, RecBole's evaluated users, graph propagation and probes each refuse or avoid the
rows they would use.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from scipy import stats

from auditor import AuditConfig, run_audit
from auditor.config import LoadOptions
from auditor.errors import EmbeddingTableError, QueryError
from auditor.loading import load_model
from auditor.loading.recbole_split import recbole_split
from auditor.loading.served import served_vectors
from auditor.model import InteractionPairs, ModelBundle
from auditor.probes.sampling import sample_batches

N_USERS, N_ITEMS, DIM, LOGGED_USERS = 40, 30, 4, 30
RECBOLE = Path(__file__).parent / "data" / "recbole"


def _model(tmp_path: Path, bad_row: int | None) -> tuple[Path, Path, np.ndarray, np.ndarray]:
    """A .pt state dict and a Parquet log of users 0..29 (rows = ids); ``bad_row`` NaN."""
    rng = np.random.default_rng(3)
    pairs = np.argwhere(rng.random((LOGGED_USERS, N_ITEMS)) < np.linspace(0.05, 0.9, N_ITEMS))
    counts = np.bincount(pairs[:, 1], minlength=N_ITEMS)
    users = rng.normal(size=(N_USERS, DIM)).astype(np.float32)
    items = rng.normal(size=(N_ITEMS, DIM)).astype(np.float32)
    items *= (0.5 + counts / counts.max() + rng.random(N_ITEMS)).astype(np.float32)[:, None]  # norms follow counts
    if bad_row is not None:
        users[bad_row, 1] = np.nan
    model = tmp_path / f"model_{bad_row}.pt"
    torch.save({"user_embedding.weight": torch.from_numpy(users), "item_embedding.weight": torch.from_numpy(items)},
               model)
    log = tmp_path / "log.parquet"
    pq.write_table(pa.table({"user_id": pairs[:, 0], "item_id": pairs[:, 1]}), log)
    return model, log, items, counts


def _audit(model: Path, log: Path) -> dict[str, object]:
    return run_audit(AuditConfig(model=model, interactions=log, ks=(5,), bootstrap=0, probes=False)).to_dict()


def test_a_never_queried_nan_row_is_warned_about_and_changes_no_figure(tmp_path: Path) -> None:
    model, log, items, counts = _model(tmp_path, bad_row=38)  # user 38 is not in the log
    report = _audit(model, log)
    finite_model, _, _, _ = _model(tmp_path, bad_row=None)
    reference = _audit(finite_model, log)
    rho = stats.spearmanr(counts, np.linalg.norm(items.astype(np.float64), axis=1)).statistic
    assert report["frequency_norm"]["spearman"] == pytest.approx(rho, abs=1e-12)  # type: ignore[index]
    assert rho > 0.5 and report["retrieval"] == reference["retrieval"] and report["verdict"] == reference["verdict"]
    notes = [w for w in report["warnings"] if "NaN or infinite" in w]  # type: ignore[attr-defined]
    assert len(notes) == 1 and "1 row with NaN or infinite values (rows 38)" in notes[0]


def test_a_queried_nan_row_is_refused_naming_it(tmp_path: Path) -> None:
    model, log, _, _ = _model(tmp_path, bad_row=5)
    with pytest.raises(QueryError, match=re.escape("model_5.pt holds NaN or infinite values (first at row 5, which is queried)")):
        _audit(model, log)


def _sampling_bundle(tmp_path: Path, bad: list[int]) -> ModelBundle:
    users = np.ones((6, 2), dtype=np.float32)
    users[bad] = np.nan
    return ModelBundle(source=tmp_path / "m.pt", format="pytorch", item_table=np.ones((4, 2), dtype=np.float32),
                       user_table=users, nonfinite_user_rows=np.array(bad, dtype=np.int64))


def test_probes_never_sample_a_nan_user_row(tmp_path: Path) -> None:
    bundle = _sampling_bundle(tmp_path, [1, 3])
    drawn = sample_batches(bundle, None, None, size=500, steps=2, rng=np.random.default_rng(0))  # type: ignore[arg-type]
    users = np.concatenate([b.users for b in drawn])
    assert set(users.tolist()) == {0, 2, 4, 5}
    log = InteractionPairs(user_index=np.array([0, 1, 2, 3]), item_rows=np.array([0, 1, 2, 3]),
                           user_ids=np.array([0, 1, 2, 3]), source=None)
    drawn = sample_batches(bundle, log, None, size=10, steps=1, rng=np.random.default_rng(0))  # type: ignore[arg-type]
    assert sorted(drawn[0].users.tolist()) == [0, 2] and sorted(drawn[0].items.tolist()) == [0, 2]
    with pytest.raises(Exception, match="every user-table row holds NaN"):
        sample_batches(_sampling_bundle(tmp_path, list(range(6))), None, None, size=5, steps=1,
                       rng=np.random.default_rng(0))  # type: ignore[arg-type]


def test_graph_propagation_refuses_a_nan_row_with_training_edges_only() -> None:
    bundle = load_model(RECBOLE / "LightGCN-eval.pth", LoadOptions())
    assert bundle.config is not None and bundle.user_table is not None
    split = recbole_split(bundle.config, RECBOLE / "eval.inter")
    train = (split.train.users, split.train.items)
    trained = int(split.train.users[0])
    users = bundle.user_table.copy()
    users[trained] = np.nan
    poisoned = dataclasses.replace(bundle, user_table=users, nonfinite_user_rows=np.array([trained]))
    with pytest.raises(EmbeddingTableError, match=rf"NaN or infinite values in row {trained}, which the graph"):
        served_vectors(poisoned, train)
    # Without that user's edges its row reaches no item: the items propagate as before.
    keep = split.train.users != trained
    clean = served_vectors(bundle, (train[0][keep], train[1][keep]))
    served = served_vectors(poisoned, (train[0][keep], train[1][keep]))
    assert np.array_equal(served.items, clean.items) and np.isfinite(served.items).all()
