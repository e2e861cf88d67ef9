"""Loaders 2 N4: a Keras ``Embedding(mask_zero=True)`` item table (n + 1 rows, row 0 the
mask) beside an item bias of only n rows. Keras looks id j up in row j of both, so once row
0 goes, bias row j is not id j's (and id n has none): the bias is left out, said, never
paired row for row as it was (served u·i + b_i with the bias shifted by one id).

Known answer: ARP@5 of numpy's dot ranking of the table's rows 1..n (ids 1..n), no bias.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from scoring_samples import DIM, N_ITEMS, N_USERS, audit_at_5

h5py = pytest.importorskip("h5py", reason="the keras extra (h5py) is not installed")


def _model(path: Path, bias_rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """model.save("m.h5") of Dot(user, mask_zero item) + Add(item_bias) (Keras 3 inbound records)."""
    rng = np.random.default_rng(3)
    users = rng.normal(size=(N_USERS, DIM)).astype(np.float32)
    items = (rng.normal(size=(N_ITEMS + 1, DIM)) * rng.uniform(0.2, 5, size=(N_ITEMS + 1, 1))).astype(np.float32)
    bias = rng.normal(scale=2.0, size=(bias_rows, 1)).astype(np.float32)

    def fed(*names: str) -> list[object]:
        tensors = [{"class_name": "__keras_tensor__", "config": {"keras_history": [n, 0, 0]}} for n in names]
        return [{"args": [tensors if len(tensors) > 1 else tensors[0]], "kwargs": {}}]

    layers = [
        {"class_name": "Embedding", "config": {"name": "user_embedding", "input_dim": N_USERS, "output_dim": DIM},
         "inbound_nodes": fed("user")},
        {"class_name": "Embedding", "config": {"name": "item_embedding", "input_dim": N_ITEMS + 1, "output_dim": DIM,
                                               "mask_zero": True}, "inbound_nodes": fed("item")},
        {"class_name": "Embedding", "config": {"name": "item_bias", "input_dim": bias_rows, "output_dim": 1},
         "inbound_nodes": fed("item")},
        {"class_name": "Dot", "config": {"name": "score", "axes": -1}, "inbound_nodes": fed("user_embedding", "item_embedding")},
        {"class_name": "Add", "config": {"name": "plus_bias"}, "inbound_nodes": fed("score", "item_bias")},
    ]
    with h5py.File(path, "w") as h5:
        for name, values in (("user_embedding", users), ("item_embedding", items), ("item_bias", bias)):
            h5.create_dataset(f"model_weights/{name}/{name}/embeddings", data=values)
            h5[f"model_weights/{name}"].attrs["weight_names"] = [f"{name}/embeddings".encode()]
        h5["model_weights"].attrs["layer_names"] = [b"user_embedding", b"item_embedding", b"item_bias"]
        h5.attrs["model_config"] = json.dumps({"class_name": "Functional", "config": {"layers": layers}})
    return users, items, bias.reshape(-1)


def _log(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    p = 1.0 / np.arange(1, N_ITEMS + 1)
    items = np.concatenate([rng.choice(N_ITEMS, 3, replace=False, p=p / p.sum()) for _ in range(N_USERS)]) + 1
    path = tmp_path / "log.parquet"
    pq.write_table(pa.table({"user_id": np.repeat(np.arange(N_USERS), 3), "item_id": items}), path)
    return path


def _arp(scores: np.ndarray, log: Path) -> float:
    """ARP@5 of ``scores`` (users × ids 1..n), training items excluded, ties by id."""
    table = pq.read_table(log).to_pydict()
    rows = np.asarray(table["item_id"]) - 1
    scores = scores.astype(np.float64).copy()
    scores[table["user_id"], rows] = -np.inf
    top = np.argsort(-scores, axis=1, kind="stable")[:, :5]
    return float(np.bincount(rows, minlength=N_ITEMS)[top].mean())


def test_a_bias_one_row_short_of_a_masked_table_is_left_out(tmp_path: Path) -> None:
    log = _log(tmp_path)
    users, items, bias = _model(tmp_path / "m.h5", N_ITEMS)
    mine = _arp(users @ items[1:].T, log)
    paired = _arp(users @ items[1:].T + bias, log)  # what was served: id j's row beside bias row j - 1
    assert mine != pytest.approx(paired)
    result = audit_at_5(tmp_path / "m.h5", log)
    served = result.served_vectors
    assert served is None or (not served.as_served and served.item_bias_spearman is None), served
    assert any(f"the item bias `item_bias.embeddings` has {N_ITEMS} rows, but the item table" in w and
               "do not line up with the table's ids" in w and "left out of the figures" in w for w in result.warnings), \
        result.warnings
    assert not any("retrieval serves as the model scores" in w for w in result.warnings), result.warnings
    assert any(f"Save the bias with the table's {N_ITEMS + 1} rows" in w for w in result.warnings), result.warnings
    assert result.retrieval is not None
    assert result.retrieval.at[5].dot["arp"] == pytest.approx(mine, rel=1e-9)


def test_a_bias_of_the_masked_input_is_still_served(tmp_path: Path) -> None:
    """The aligned case (bias Embedding(n + 1, 1), F5) stays served: u·i + b_i, rows 1..n of both."""
    log = _log(tmp_path)
    users, items, bias = _model(tmp_path / "m.h5", N_ITEMS + 1)
    result = audit_at_5(tmp_path / "m.h5", log)
    assert result.served_vectors is not None and result.served_vectors.source == "bias", result.warnings
    assert result.retrieval is not None
    assert result.retrieval.at[5].dot["arp"] == pytest.approx(_arp(users @ items[1:].T + bias[1:], log), rel=1e-9)
