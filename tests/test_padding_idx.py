"""Loaders F3: an ``nn.Embedding(n + 1, d, padding_idx=0)`` row the file records (a
TorchScript archive's ``padding_idx`` constant, a pickled module's attribute) is no item:
left out as Keras's ``mask_zero`` row is (auditor/loading/padding_rows.py, one policy), the
other rows keeping their ids (row r = id r), an item bias of the same input losing the
same row. A plain state dict records nothing: its all-zero row keeps the load warning.

Known answer: the log's ids are 1..40 on rows 1..40; scipy's Spearman ρ of the 40 real
rows' norms against their frequencies (the padding row counted as a cold item gave
another ρ and 41 items)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from click.testing import CliRunner
from scipy.stats import spearmanr
from torch import nn

from auditor.cli import cli
from scoring_samples import DIM, N_ITEMS, N_USERS, write_keras_h5



class _Padded(nn.Module):
    def __init__(self, bias: bool = False) -> None:
        super().__init__()
        rng = np.random.default_rng(1)
        self.user_embedding = nn.Embedding(N_USERS, DIM)
        self.item_embedding = nn.Embedding(N_ITEMS + 1, DIM, padding_idx=0)
        with torch.no_grad():
            self.user_embedding.weight.copy_(torch.from_numpy(rng.normal(size=(N_USERS, DIM)).astype(np.float32)))
            scale = rng.uniform(0.2, 5, size=(N_ITEMS, 1))
            self.item_embedding.weight[1:] = torch.from_numpy((rng.normal(size=(N_ITEMS, DIM)) * scale).astype(np.float32))
        self.item_bias = nn.Embedding(N_ITEMS + 1, 1, padding_idx=0) if bias else None
        if self.item_bias is not None:
            with torch.no_grad():
                self.item_bias.weight[1:] = torch.from_numpy(rng.normal(size=(N_ITEMS, 1)).astype(np.float32))

    def forward(self, user_ids: torch.Tensor, item_ids: torch.Tensor) -> torch.Tensor:
        score = (self.user_embedding(user_ids) * self.item_embedding(item_ids)).sum(-1)
        if self.item_bias is not None:
            score = score + self.item_bias(item_ids).squeeze(-1)
        return score


def _log(tmp_path: Path) -> tuple[Path, np.ndarray]:
    """Item ids 1..40 drawn Zipf-like (ids 37..40 never); the frequency of each id (index = id)."""
    rng = np.random.default_rng(0)
    p = 1.0 / np.arange(1, N_ITEMS - 3)
    items = np.concatenate([rng.choice(N_ITEMS - 4, 4, replace=False, p=p / p.sum()) for _ in range(N_USERS)]) + 1
    path = tmp_path / "log.parquet"
    pq.write_table(pa.table({"user_id": np.repeat(np.arange(N_USERS), 4), "item_id": items}), path)
    return path, np.bincount(items, minlength=N_ITEMS + 1)


def _check(model: Path, log: Path, *extra: str) -> tuple[int, str, dict[str, Any] | None]:
    out = model.parent / "r.json"
    ran = CliRunner().invoke(cli, ["check", str(model), "--interactions", str(log), "--no-probes", "--bootstrap", "0",
                                   "-q", "-k", "5", "--json", str(out), *extra])  # fmt: skip
    return ran.exit_code, " ".join(ran.output.split()), json.loads(out.read_text()) if ran.exit_code == 0 else None


def _save(module: _Padded, path: Path, how: str) -> Path:
    if how == "torchscript":
        torch.jit.script(module).save(str(path))
    elif how == "pickle":
        torch.save(module, path)
    else:
        torch.save(module.state_dict(), path)
    return path


@pytest.mark.parametrize("how, what", [("torchscript", "the TorchScript archive"), ("pickle", "the pickled module")])
def test_a_recorded_padding_row_is_no_item(tmp_path: Path, how: str, what: str) -> None:
    module = _Padded()
    log, freq = _log(tmp_path)
    code, output, report = _check(_save(module, tmp_path / "m.pt", how), log)
    assert code == 0 and report is not None, output
    norms = np.linalg.norm(module.item_embedding.weight.detach().numpy()[1:], axis=1)
    mine = spearmanr(norms, freq[1:]).statistic
    assert report["frequency_norm"]["n_items"] == N_ITEMS and report["frequency_norm"]["n_cold"] == int((freq[1:] == 0).sum())
    assert report["frequency_norm"]["spearman"] == pytest.approx(mine, abs=1e-9)
    assert report["inputs"]["item_id_mapping"] == (f"item rows mapped through {what}'s nn.Embedding(padding_idx=0) on "
                                                   "`item_embedding` (row = id; row 0, the padding index, left out) "
                                                   f"(the rows audited hold the ids 1..{N_ITEMS} in order: row = raw "
                                                   "item id − 1)")
    assert not any("all-zero row" in w for w in report["warnings"]), report["warnings"]


def test_a_state_dict_records_no_padding_and_keeps_its_warning(tmp_path: Path) -> None:
    log, _ = _log(tmp_path)
    code, output, report = _check(_save(_Padded(), tmp_path / "sd.pt", "state_dict"), log)
    assert code == 0 and report is not None, output
    assert report["frequency_norm"]["n_items"] == N_ITEMS + 1
    assert any("1 all-zero row (rows 0)" in w for w in report["warnings"]), report["warnings"]


@pytest.mark.parametrize("how", ["torchscript", "pickle"])
def test_a_padded_item_bias_drops_the_same_row_and_is_served(tmp_path: Path, how: str) -> None:
    """u·i + b_i over the 40 real items: ARP@5 of numpy's ranking (training items excluded)."""
    module = _Padded(bias=True)
    log, freq = _log(tmp_path)
    code, output, report = _check(_save(module, tmp_path / "mb.pt", how), log)
    assert code == 0 and report is not None, output
    assert report["served_vectors"]["source"] == "bias" and report["served_vectors"]["as_served"], report["served_vectors"]
    users = module.user_embedding.weight.detach().numpy().astype(np.float64)
    items = module.item_embedding.weight.detach().numpy()[1:].astype(np.float64)
    bias = module.item_bias.weight.detach().numpy()[1:, 0]  # type: ignore[union-attr]
    scores = users @ items.T + bias
    table = pq.read_table(log).to_pydict()
    scores[table["user_id"], np.asarray(table["item_id"]) - 1] = -np.inf
    top = np.argsort(-scores, axis=1, kind="stable")[:, :5]
    assert report["retrieval"]["at"]["5"]["dot"]["arp"] == pytest.approx(freq[1:][top].mean(), rel=1e-9)
    assert report["served_vectors"]["item_bias_spearman"] == pytest.approx(spearmanr(bias, freq[1:]).statistic, abs=1e-9)


def test_a_keras_mask_zero_table_with_an_n_plus_1_bias_serves_the_bias(tmp_path: Path) -> None:
    """Loaders F5: Embedding(n + 1, d, mask_zero=True) beside an item bias Embedding(n + 1, 1)
    of the same ids (Keras's model.save(".h5")): the bias loses row 0 too and is served,
    u·i + b_i (the table stood in, the bias ignored with a warning)."""
    pytest.importorskip("h5py")
    module = _Padded(bias=True)
    users = module.user_embedding.weight.detach().numpy()
    items = module.item_embedding.weight.detach().numpy().copy()
    items[0] = 0.3  # Keras leaves the mask row as initialised, not zero
    bias = module.item_bias.weight.detach().numpy().copy()  # type: ignore[union-attr]
    bias[0] = 9.0  # served with the wrong row, the mask's bias would win every list
    layers = {"user_embedding": users, "item_embedding": items, "item_bias": bias}
    config = {"class_name": "Functional", "config": {"layers": [
        {"class_name": "Embedding", "config": {"name": n, "input_dim": len(v), "output_dim": v.shape[1],
                                               "mask_zero": n == "item_embedding"}} for n, v in layers.items()]}}
    path = tmp_path / "mask_bias.h5"
    write_keras_h5(path, layers, config)
    log, freq = _log(tmp_path)
    code, output, report = _check(path, log)
    assert code == 0 and report is not None, output
    served = report["served_vectors"]
    assert served["source"] == "bias" and served["as_served"], served
    scores = users.astype(np.float64) @ items[1:].T.astype(np.float64) + bias[1:, 0]
    table = pq.read_table(log).to_pydict()
    scores[table["user_id"], np.asarray(table["item_id"]) - 1] = -np.inf
    top = np.argsort(-scores, axis=1, kind="stable")[:, :5]
    assert report["retrieval"]["at"]["5"]["dot"]["arp"] == pytest.approx(freq[1:][top].mean(), rel=1e-9)
    assert served["item_bias_spearman"] == pytest.approx(spearmanr(bias[1:, 0], freq[1:]).statistic, abs=1e-9)
