"""Loaders F2: cosine scoring the file states without running code is recognised in every
format, as the ONNX export of the same module is: a TorchScript archive whose saved forward()
normalises both lookups (F.normalize) or calls F.cosine_similarity on them, a Keras Dot of
two ``UnitNormalization`` layers. A normalising op popaudit cannot place makes the tables
stand in, said first (they were audited as dot without a word, and the verdict told a model
that serves cosine to switch to cosine).

Known answer: ARP@5 (training items excluded) of numpy's ranking by cosine is the model's own
('cosine') column, and differs from the dot one.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from scoring_samples import DIM, N_ITEMS, N_USERS, arp_at_5, audit_at_5, zipf_log




def _tables() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    users = rng.normal(size=(N_USERS, DIM)).astype(np.float32)
    items = (rng.normal(size=(N_ITEMS, DIM)) * rng.uniform(0.2, 5, size=(N_ITEMS, 1))).astype(np.float32)
    return users, items




class _TwoTower(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        users, items = _tables()
        self.user_embedding = nn.Embedding.from_pretrained(torch.from_numpy(users), freeze=False)
        self.item_embedding = nn.Embedding.from_pretrained(torch.from_numpy(items), freeze=False)


class _Normalize(_TwoTower):
    def forward(self, user_ids: torch.Tensor, item_ids: torch.Tensor) -> torch.Tensor:
        return (F.normalize(self.user_embedding(user_ids), dim=-1) * F.normalize(self.item_embedding(item_ids), dim=-1)).sum(-1)


class _CosineSimilarity(_TwoTower):
    def forward(self, user_ids: torch.Tensor, item_ids: torch.Tensor) -> torch.Tensor:
        return F.cosine_similarity(self.user_embedding(user_ids), self.item_embedding(item_ids), dim=-1)


class _Unplaced(_TwoTower):
    def forward(self, user_ids: torch.Tensor, item_ids: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.user_embedding(user_ids) + self.item_embedding(item_ids), dim=-1).sum(-1)


def _assert_cosine(result: AuditResult, log: Path) -> None:
    users, items = _tables()
    unit = items / np.linalg.norm(items, axis=1, keepdims=True)
    mine, dot = arp_at_5(users @ unit.T, log), arp_at_5(users @ items.T, log)
    served = result.served_vectors
    assert served is not None and served.as_served and served.scoring == "cosine", served
    assert "scores by cosine: its own lists are the 'cosine' scoring" in result.warnings[0], result.warnings
    assert result.retrieval is not None
    assert result.retrieval.at[5].cosine["arp"] == pytest.approx(mine, rel=1e-9) and mine != pytest.approx(dot)
    assert result.verdict.recommendations[0].startswith("Keep serving by cosine")


@pytest.mark.parametrize("module", [_Normalize, _CosineSimilarity])
def test_torchscript_cosine_is_read_from_its_saved_code(tmp_path: Path, module: type[_TwoTower]) -> None:
    path = tmp_path / "cos_ts.pt"
    torch.jit.script(module()).save(str(path))
    log = zipf_log(tmp_path)
    result = audit_at_5(path, log)
    _assert_cosine(result, log)
    assert result.served_vectors is not None
    assert "its saved forward()" in result.served_vectors.description


def test_torchscript_normalisation_it_cannot_place_makes_the_tables_stand_in(tmp_path: Path) -> None:
    path = tmp_path / "odd_ts.pt"
    torch.jit.script(_Unplaced()).save(str(path))
    result = audit_at_5(path, zipf_log(tmp_path))
    served = result.served_vectors
    assert served is not None and not served.as_served
    assert result.warnings[0].startswith("the stored tables stand in for the vectors the model in odd_ts.pt scores: "
                                         "its saved TorchScript code calls normalize"), result.warnings[0]
    assert "may score by cosine" in result.warnings[0]


def _keras_h5(path: Path, normalised: tuple[str, ...], kind: str = "UnitNormalization") -> Path:
    """Keras's model.save("m.h5") of Dot([UnitNormalization(Flatten(user)), ...(item)]),
    the UnitNormalization only on the ``normalised`` towers (Keras 3 inbound records)."""
    h5py = pytest.importorskip("h5py")
    users, items = _tables()

    def fed(name: str) -> list[object]:
        return [{"args": [{"class_name": "__keras_tensor__", "config": {"keras_history": [name, 0, 0]}}], "kwargs": {}}]

    layers: list[dict[str, object]] = []
    ends = []
    for side, table in (("user", users), ("item", items)):
        layers.append({"class_name": "Embedding", "config": {"name": f"{side}_embedding", "input_dim": len(table),
                                                              "output_dim": DIM}, "inbound_nodes": fed(side)})
        layers.append({"class_name": "Flatten", "config": {"name": f"{side}_flat"}, "inbound_nodes": fed(f"{side}_embedding")})
        end = f"{side}_flat"
        if side in normalised:
            layers.append({"class_name": kind, "config": {"name": f"{side}_norm", "axis": -1},
                           "inbound_nodes": fed(end)})
            end = f"{side}_norm"
        ends.append(end)
    layers.append({"class_name": "Dot", "config": {"name": "score", "axes": 1, "normalize": False}, "inbound_nodes": [
        {"args": [[{"class_name": "__keras_tensor__", "config": {"keras_history": [e, 0, 0]}} for e in ends]],
         "kwargs": {}}]})
    with h5py.File(path, "w") as h5:
        for name, values in (("user_embedding", users), ("item_embedding", items)):
            h5.create_dataset(f"model_weights/{name}/{name}/embeddings", data=values)
            h5[f"model_weights/{name}"].attrs["weight_names"] = [f"{name}/embeddings".encode()]
        h5["model_weights"].attrs["layer_names"] = [b"user_embedding", b"item_embedding"]
        h5.attrs["model_config"] = json.dumps({"class_name": "Functional", "config": {"layers": layers}})
    return path


def test_keras_unit_normalization_on_both_towers_scores_by_cosine(tmp_path: Path) -> None:
    log = zipf_log(tmp_path)
    result = audit_at_5(_keras_h5(tmp_path / "unit.h5", ("user", "item")), log)
    _assert_cosine(result, log)
    assert result.served_vectors is not None and "Dot of the UnitNormalization layers `user_norm` and `item_norm`" \
        in result.served_vectors.description


def test_keras_unit_normalization_on_the_user_tower_alone_ranks_as_dot(tmp_path: Path) -> None:
    """Loaders 2 N3: u·i/|u| ranks as u·i for each user (was: the tables stood in, 'may
    score by cosine'); the ONNX reader reads the same module so."""
    log = zipf_log(tmp_path)
    result = audit_at_5(_keras_h5(tmp_path / "half.h5", ("user",)), log)
    users, items = _tables()
    assert not any("stand in" in w or "scores by cosine" in w for w in result.warnings), result.warnings
    assert result.retrieval is not None
    assert result.retrieval.at[5].dot["arp"] == pytest.approx(arp_at_5(users @ items.T, log), rel=1e-9)


def test_keras_unit_normalization_on_the_item_tower_alone_scores_by_cosine(tmp_path: Path) -> None:
    """Loaders 2 N3: u·i/|i| ranks as cosine for each user (was: the tables stood in)."""
    log = zipf_log(tmp_path)
    result = audit_at_5(_keras_h5(tmp_path / "item.h5", ("item",)), log)
    _assert_cosine(result, log)
    assert result.served_vectors is not None and "Dot of the UnitNormalization layer `item_norm`" \
        in result.served_vectors.description


def test_a_keras_lambda_layer_makes_the_tables_stand_in(tmp_path: Path) -> None:
    """Loaders 2 (F2 remainder): a Lambda's function is bytecode popaudit never runs (here an
    L2 normalisation of both towers): the tables stand in, warned that the model may score
    by cosine (was: audited as plain dot, no word)."""
    result = audit_at_5(_keras_h5(tmp_path / "lam.h5", ("user", "item"), kind="Lambda"), zipf_log(tmp_path))
    served = result.served_vectors
    assert served is not None and not served.as_served and served.scoring == "dot", served
    assert result.warnings[0].startswith("the stored tables stand in for the vectors the model in lam.h5 scores: its "
                                         "Lambda layers `item_norm`, `user_norm` in the .h5's model_config run code "
                                         "popaudit does not run"), result.warnings
    assert "may score by cosine" in result.warnings[0]
