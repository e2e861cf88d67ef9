"""The stored tables standing in for towers popaudit cannot run, and models that score by
cosine: a user tower with a projection (state dict), ONNX graphs with nodes after a table's
Gather, a Keras ``Dot(normalize=True)`` score layer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from auditor import AuditConfig, run_audit

N_USERS, N_ITEMS, DIM = 30, 40, 4


def _log(tmp_path: Path) -> Path:
    """Every user trains on 3 items; item i is drawn with weight ~ 1/(i+1) (rows = ids)."""
    rng = np.random.default_rng(0)
    p = 1.0 / np.arange(1, N_ITEMS + 1)
    items = np.concatenate([rng.choice(N_ITEMS, 3, replace=False, p=p / p.sum()) for _ in range(N_USERS)])
    path = tmp_path / "log.parquet"
    pq.write_table(pa.table({"user_id": np.repeat(np.arange(N_USERS), 3), "item_id": items}), path)
    return path


def _tables() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    return rng.normal(size=(N_USERS, DIM)).astype(np.float32), rng.normal(size=(N_ITEMS, DIM)).astype(np.float32)


def _audit(model: Path, log: Path, **extra: object) -> object:
    return run_audit(AuditConfig(model=model, interactions=log, ks=(5,), bootstrap=0, probes=False, **extra))  # type: ignore[arg-type]


def test_a_user_tower_with_a_projection_is_said_to_be_queried_raw(tmp_path: Path) -> None:
    users, items = _tables()
    state = {"user_tower.embedding.weight": torch.tensor(users), "user_tower.proj.weight": torch.eye(DIM),
             "user_tower.proj.bias": torch.ones(DIM), "item_tower.embedding.weight": torch.tensor(items)}
    torch.save({"model_state_dict": state}, tmp_path / "tt.pt")
    result = _audit(tmp_path / "tt.pt", _log(tmp_path))
    served = result.served_vectors  # type: ignore[attr-defined]
    assert served is not None and not served.as_served and served.source == "tables"
    assert served.description == "the stored tables, queried by the raw rows of the user table `user_tower.embedding.weight`"
    assert result.warnings[0] == served.not_served == (  # type: ignore[attr-defined]
        "queried the raw rows of the user table `user_tower.embedding.weight`: the checkpoint's user-side tensors "
        "`user_tower.proj.weight`, `user_tower.proj.bias` are ignored, so these are not the queries the model in "
        "tt.pt serves with; to audit those, save its user tower's output for every user row as the user table of a "
        "file without the tower's other tensors, or give a plugin that loads the model (plugins)"
    )
    assert result.verdict.summary.startswith(  # type: ignore[attr-defined]
        "This audit is of the stored tables, queried by the raw rows of the user table")


def test_rank_neutral_user_tensors_and_history_queries_leave_the_tables_served(tmp_path: Path) -> None:
    """A per-user bias shifts each user's scores alike (it ranks nothing); history queries
    never use the user tower: no stand-in either way."""
    users, items = _tables()
    log = _log(tmp_path)
    biased = {"user_emb.weight": torch.tensor(users), "user_bias.weight": torch.ones(N_USERS, 1),
              "item_emb.weight": torch.tensor(items)}
    torch.save(biased, tmp_path / "bias.pt")
    assert _audit(tmp_path / "bias.pt", log).served_vectors is None  # type: ignore[attr-defined]
    projected = {"user_emb.weight": torch.tensor(users), "user_proj.weight": torch.eye(DIM),
                 "item_emb.weight": torch.tensor(items)}
    torch.save(projected, tmp_path / "proj.pt")
    assert _audit(tmp_path / "proj.pt", log, queries="history").served_vectors is None  # type: ignore[attr-defined]
    both = {**projected, "item_proj.weight": torch.eye(DIM)}
    torch.save(both, tmp_path / "both.pt")
    result = _audit(tmp_path / "both.pt", log)
    assert result.served_vectors.description == (  # type: ignore[attr-defined]
        "the stored id table `item_emb.weight`, queried by the raw rows of the user table `user_emb.weight`")
    assert result.warnings[0].startswith("audited the stored id table `item_emb.weight` only: the checkpoint's "  # type: ignore[attr-defined]
                                         "item-side tensors `item_proj.weight` are ignored")
    assert result.warnings[1].startswith("queried the raw rows of the user table `user_emb.weight`: the "  # type: ignore[attr-defined]
                                         "checkpoint's user-side tensors `user_proj.weight` are ignored")
