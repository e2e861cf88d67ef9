"""Loaders F5: a table with a recorded padding row (``nn.Embedding(n + 1, d, padding_idx=0)``
in a TorchScript archive or a pickled module) and stored ``item_ids`` naming its n real rows
only is read: the padding row is no item, so those n ids map the n rows left (refused
before: "n ids for the n + 1 rows"). One id per stored row (the padding's a dummy) still
reads the same; any other count is refused, counting the rows besides the padding row.

Known answer: row r (1..40) holds log id ``PERM[r - 1] + 100``; scipy's Spearman ρ of each
real row's norm against its id's frequency."""

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
from scoring_samples import DIM, N_ITEMS, N_USERS

PERM = np.random.default_rng(4).permutation(N_ITEMS)
IDS = PERM + 100  # the raw id of real row r + 1


class _PaddedWithIds(nn.Module):
    def __init__(self, ids: np.ndarray) -> None:
        super().__init__()
        rng = np.random.default_rng(1)
        self.user_embedding = nn.Embedding(N_USERS, DIM)
        self.item_embedding = nn.Embedding(N_ITEMS + 1, DIM, padding_idx=0)
        with torch.no_grad():
            self.user_embedding.weight.copy_(torch.from_numpy(rng.normal(size=(N_USERS, DIM)).astype(np.float32)))
            scale = rng.uniform(0.2, 5, size=(N_ITEMS, 1))
            self.item_embedding.weight[1:] = torch.from_numpy((rng.normal(size=(N_ITEMS, DIM)) * scale).astype(np.float32))
        self.register_buffer("item_ids", torch.from_numpy(ids.astype(np.int64)))

    def forward(self, user_ids: torch.Tensor, item_ids: torch.Tensor) -> torch.Tensor:
        return (self.user_embedding(user_ids) * self.item_embedding(item_ids)).sum(-1)


def _run(tmp_path: Path, ids: np.ndarray, how: str) -> tuple[int, str, dict[str, Any] | None, _PaddedWithIds, np.ndarray]:
    module = _PaddedWithIds(ids)
    model = tmp_path / "m.pt"
    if how == "torchscript":
        torch.jit.script(module).save(str(model))
    else:
        torch.save(module, model)
    rng = np.random.default_rng(0)
    p = 1.0 / np.arange(1, N_ITEMS + 1)
    items = IDS[np.concatenate([rng.choice(N_ITEMS, 4, replace=False, p=p / p.sum()) for _ in range(N_USERS)])]
    log = tmp_path / "log.parquet"
    pq.write_table(pa.table({"user_id": np.repeat(np.arange(N_USERS), 4), "item_id": items}), log)
    out = tmp_path / "r.json"
    ran = CliRunner().invoke(cli, ["check", str(model), "--interactions", str(log), "--no-probes", "--bootstrap", "0",
                                   "-q", "-k", "5", "--json", str(out)])  # fmt: skip
    report = json.loads(out.read_text()) if ran.exit_code == 0 else None
    freq = np.array([np.count_nonzero(items == i) for i in IDS])  # frequency of real row r + 1's id
    return ran.exit_code, " ".join(ran.output.split()), report, module, freq


@pytest.mark.parametrize("how", ["torchscript", "pickle"])
@pytest.mark.parametrize("stored", ["real rows", "every row"])
def test_stored_ids_of_the_real_rows_map_them(tmp_path: Path, how: str, stored: str) -> None:
    ids = IDS if stored == "real rows" else np.r_[-1, IDS]  # 40 ids, or 41 with a dummy for the padding row
    code, output, report, module, freq = _run(tmp_path, ids, how)
    assert code == 0 and report is not None, output
    norms = np.linalg.norm(module.item_embedding.weight.detach().numpy()[1:], axis=1)
    assert report["frequency_norm"]["n_items"] == N_ITEMS
    assert report["frequency_norm"]["spearman"] == pytest.approx(spearmanr(norms, freq).statistic, abs=1e-9)
    assert report["inputs"]["item_id_mapping"].startswith("item rows mapped through the item ids stored in ")


def test_another_count_is_refused_naming_the_rows_besides_the_padding(tmp_path: Path) -> None:
    code, output, _, _, _ = _run(tmp_path, IDS[:-1], "torchscript")
    assert code == 1, output
    assert (f"(`item_ids`) is named as the raw item id of each row, but it holds {N_ITEMS - 1} ids for the "
            f"{N_ITEMS + 1} rows of the item table ({N_ITEMS} besides its padding row 0); pass --item-ids FILE") in output
