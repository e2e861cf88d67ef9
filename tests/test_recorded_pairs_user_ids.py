"""Pairs a popaudit checkpoint records index user-table rows: with no stored user ids and
``--user-ids`` naming the rows in another order than 0..n-1, each row keeps its own
training (and held-out) items, so the figures equal those of the same model audited with
the training log (Harms N2)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from auditor.config import AuditConfig, LoadOptions
from auditor.loading import load_model
from auditor.loading.holdout import load_holdout
from auditor.loading.population import load_population

N_USERS, N_ITEMS, DIM = 8, 12, 3
PERM = np.array([5, 2, 7, 0, 3, 6, 1, 4])  # table row r holds user PERM[r]
ROW_OF = np.argsort(PERM)


def _log() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Training and held-out (user id, item) pairs: users of low id train on popular items."""
    rng = np.random.default_rng(3)
    train_u, train_i, held_u, held_i = [], [], [], []
    for user in range(N_USERS):
        items = rng.choice(N_ITEMS, size=4, replace=False)
        train_u += [user] * 3
        train_i += items[:3].tolist()
        held_u.append(user)
        held_i.append(int(items[3]))
    return np.array(train_u), np.array(train_i), np.array(held_u), np.array(held_i)


def _checkpoint(tmp_path: Path, ids: object | None) -> Path:
    """Model with its user table in PERM order, pairs recorded by table row; ``ids``: the
    stored user ids (None: none stored)."""
    g = np.random.default_rng(0)
    users, items = g.normal(size=(N_USERS, DIM)), g.normal(size=(N_ITEMS, DIM))
    train_u, train_i, held_u, held_i = _log()
    ck = {
        "popaudit_checkpoint": 1,
        "state_dict": {"user_tower.table.weight": torch.tensor(users[PERM]),
                       "item_tower.table.weight": torch.tensor(items)},
        "config": {"optimizer": "sgd", "lr": 0.5, "momentum": 0.0, "weight_decay": 0.0, "item_encoder": "embedding",
                   "user_encoder": "embedding", "loss": "infonce-cos", "temperature": 0.1, "dim": DIM,
                   "init_std": 0.1, "epochs": 1, "batch_size": 256, "seed": 0, "n_users": N_USERS,
                   "n_items": N_ITEMS},
        "item_ids": list(range(N_ITEMS)),
        "item_frequencies": torch.tensor(np.bincount(train_i, minlength=N_ITEMS)),
        "item_embeddings": torch.tensor(items),
        "user_embeddings": torch.tensor(users[PERM]),  # row r: the vector of user PERM[r]
        "train_pairs": torch.tensor(np.stack([ROW_OF[train_u], train_i], 1)),
        "holdout_pairs": torch.tensor(np.stack([ROW_OF[held_u], held_i], 1)),
    }
    if ids is not None:
        ck["user_ids"] = ids
    path = tmp_path / ("stored.pt" if ids is not None else "no_ids.pt")
    torch.save(ck, path)
    return path


def _ids_file(tmp_path: Path, prefix: str) -> Path:
    path = tmp_path / f"ids{prefix}.txt"
    path.write_text("".join(f"{prefix}{p}\n" for p in PERM))
    return path


@pytest.mark.parametrize("prefix", ["", "u"])
def test_recorded_pairs_follow_the_rows_the_user_ids_file_names(tmp_path: Path, prefix: str) -> None:
    path = _checkpoint(tmp_path, None)
    ids = _ids_file(tmp_path, prefix)
    bundle = load_model(path, LoadOptions(user_ids=ids))
    config = AuditConfig(model=path, user_ids=ids)
    population = load_population(
        bundle, queries="auto", log=None, mapping=config.item_rows(bundle), row_ids=config.row_ids,
        max_queries=None, seed=0, keep_seen=False,
    )
    train_u, train_i, held_u, held_i = _log()
    # Known answer: query q is table row q, user PERM[q], who trained on their own three items.
    assert population.raw_ids.tolist() == [f"{prefix}{p}" if prefix else int(p) for p in PERM]
    indptr, rows = population.seen_indptr, population.seen_rows
    seen = [sorted(rows[indptr[q]: indptr[q + 1]].tolist()) for q in range(N_USERS)]
    assert seen == [sorted(train_i[train_u == PERM[q]].tolist()) for q in range(N_USERS)]
    held = load_holdout(bundle, config, n_user_rows=N_USERS)
    h_ptr, h_rows = held.users.indptr, held.users.item_rows
    by_row = {int(r): h_rows[h_ptr[k]: h_ptr[k + 1]].tolist() for k, r in enumerate(held.users.user_rows)}
    assert by_row == {int(ROW_OF[u]): [int(i)] for u, i in zip(held_u, held_i)}


def _figures(report: Path) -> tuple[float, ...]:
    data = json.loads(report.read_text())
    dot = data["retrieval"]["at"]["3"]["dot"]
    return tuple(round(float(dot[k]), 9) for k in ("gap_delta_niche", "pop_rsp", "aclt", "arp"))


def test_the_checkpoint_route_equals_the_log_route(tmp_path: Path) -> None:
    """Without stored ids, with ``--user-ids``: the same figures as the checkpoint storing
    those ids and as the training log given (before: the rows' items were swapped)."""
    train_u, train_i, _, _ = _log()
    log = tmp_path / "train.parquet"
    pq.write_table(pa.table({"user_id": train_u, "item_id": train_i}), log)
    ids = _ids_file(tmp_path, "")
    runs = {
        "given": [str(_checkpoint(tmp_path, None)), "--user-ids", str(ids)],
        "stored": [str(_checkpoint(tmp_path, PERM.tolist()))],
        "log": [str(tmp_path / "no_ids.pt"), "--user-ids", str(ids), "--interactions", str(log)],
    }
    figures = {}
    for name, args in runs.items():
        out = tmp_path / f"{name}.json"
        done = subprocess.run([sys.executable, "-m", "auditor", "check", *args, "-k", "3", "-q", "--no-probes",
                               "--json", str(out), "-o", str(tmp_path / f"{name}.html")],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        figures[name] = _figures(out)
    assert figures["given"] == figures["stored"] == figures["log"]
