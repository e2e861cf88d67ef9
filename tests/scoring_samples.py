"""Shared pieces of the tests that audit how a model scores (cosine, cosine plus a bias):
one small catalogue, its ARP@5 computed by hand, and the audit at K=5."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from auditor import AuditConfig, run_audit
from auditor.result import AuditResult

N_USERS, N_ITEMS, DIM = 30, 40, 4


def arp_at_5(scores: np.ndarray, log: Path) -> float:
    """ARP@5 of ``scores`` (users × items, rows = ids), training items excluded, ties by row."""
    table = pq.read_table(log).to_pydict()
    scores = scores.astype(np.float64).copy()
    scores[table["user_id"], table["item_id"]] = -np.inf
    top = np.argsort(-scores, axis=1, kind="stable")[:, :5]
    return float(np.bincount(table["item_id"], minlength=N_ITEMS)[top].mean())


def audit_at_5(model: Path, log: Path) -> AuditResult:
    return run_audit(AuditConfig(model=model, interactions=log, ks=(5,), bootstrap=0, probes=False))
