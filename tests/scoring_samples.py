"""Shared pieces of the tests that audit how a model scores (cosine, cosine plus a bias):
one small catalogue and its training log, a Keras .h5 written as Keras writes it, its
ARP@5 computed by hand, and the audit at K=5."""

from __future__ import annotations

from pathlib import Path

import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from auditor import AuditConfig, run_audit
from auditor.result import AuditResult

N_USERS, N_ITEMS, DIM = 30, 40, 4


def zipf_log(tmp_path: Path) -> Path:
    """Every user trains on 3 items; item i is drawn with weight ~ 1/(i+1) (rows = ids)."""
    rng = np.random.default_rng(0)
    p = 1.0 / np.arange(1, N_ITEMS + 1)
    items = np.concatenate([rng.choice(N_ITEMS, 3, replace=False, p=p / p.sum()) for _ in range(N_USERS)])
    path = tmp_path / "log.parquet"
    pq.write_table(pa.table({"user_id": np.repeat(np.arange(N_USERS), 3), "item_id": items}), path)
    return path


def write_keras_h5(path: Path, layers: dict[str, np.ndarray], config: dict[str, Any]) -> Path:
    """``layers`` (Embedding name -> weights) and the model ``config`` as Keras's
    ``model.save("m.h5")`` lays them out."""
    import h5py

    with h5py.File(path, "w") as h5:
        for name, values in layers.items():
            h5.create_dataset(f"model_weights/{name}/{name}/embeddings", data=values)
            h5[f"model_weights/{name}"].attrs["weight_names"] = [f"{name}/embeddings".encode()]
        h5["model_weights"].attrs["layer_names"] = [n.encode() for n in layers]
        h5.attrs["model_config"] = json.dumps(config)
    return path


def arp_at_5(scores: np.ndarray, log: Path) -> float:
    """ARP@5 of ``scores`` (users × items, rows = ids), training items excluded, ties by row."""
    table = pq.read_table(log).to_pydict()
    scores = scores.astype(np.float64).copy()
    scores[table["user_id"], table["item_id"]] = -np.inf
    top = np.argsort(-scores, axis=1, kind="stable")[:, :5]
    return float(np.bincount(table["item_id"], minlength=N_ITEMS)[top].mean())


def audit_at_5(model: Path, log: Path) -> AuditResult:
    return run_audit(AuditConfig(model=model, interactions=log, ks=(5,), bootstrap=0, probes=False))
