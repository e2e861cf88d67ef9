"""Accuracy QA9 F4: the trade-off's paired bootstrap resamples users keyed by raw user id,
so one model, log and seed give one head-share interval (and one sentence) whatever order
the user table or the training log stores the users in, as the NDCG interval already did."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from click.testing import CliRunner

from auditor.cli import cli
from auditor.tradeoff import head_slots
from qa_norm_model import write_norm_model


def _accuracy(*args: str) -> dict[str, object]:
    out = Path(f"r{len(list(Path('.').glob('r*.json')))}.json")
    result = CliRunner().invoke(cli, ["check", *args, "--holdout", "hold.parquet", "--no-probes", "-q", "--json",
                                      str(out)])
    assert result.exit_code == 0, result.output
    accuracy: dict[str, object] = json.loads(out.read_text())["accuracy"]
    return accuracy


def test_head_slots_follow_raw_user_ids() -> None:
    popularity = np.array([9.0, 1.0, 1.0, 1.0])  # the top item is the head
    lists = {"dot": np.array([[0, 1], [2, 3], [0, 0]])}
    heads, filled = head_slots(lists, popularity, 2, 25, raw_ids=np.array(["c", "a", "b"]))["dot"]
    assert heads.tolist() == [0, 2, 1] and filled.tolist() == [2, 2, 2]  # users a, b, c
    mixed = head_slots(lists, popularity, 2, 25, raw_ids=np.array([1, "a", 2], dtype=object))["dot"][0]
    assert mixed.tolist() == [1, 0, 2]  # ids that do not sort: as stored


@pytest.mark.filterwarnings("ignore")
def test_the_head_share_interval_does_not_depend_on_user_storage_order(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """QA9's repro (old code: [-0.95, -0.30] points for rows as built, [-0.90, -0.30] with the user
    table permuted; [-8.95, -6.75] vs [-9.00, -6.75] for history queries over a shuffled log)."""
    monkeypatch.chdir(tmp_path)
    write_norm_model(tmp_path)
    state = torch.load("model.pt")
    perm = np.random.default_rng(9).permutation(200)  # row r holds user perm[r]
    torch.save({"user_embedding.weight": state["user_embedding.weight"][torch.tensor(perm)],
                "item_embedding.weight": state["item_embedding.weight"]}, "model_perm.pt")
    Path("user_ids.txt").write_text("\n".join(str(p) for p in perm) + "\n")
    log = pq.read_table("train.parquet")
    pq.write_table(log.take(pa.array(np.random.default_rng(1).permutation(log.num_rows))), "train_shuf.parquet")
    np.save("items.npy", state["item_embedding.weight"].numpy())
    for first, second in [
        (("model.pt", "--interactions", "train.parquet"),
         ("model_perm.pt", "--user-ids", "user_ids.txt", "--interactions", "train.parquet")),
        (("items.npy", "--interactions", "train.parquet"), ("items.npy", "--interactions", "train_shuf.parquet")),
    ]:
        a, b = _accuracy(*first), _accuracy(*second)
        assert a["changes"] == b["changes"] and a["recommendation"] == b["recommendation"]
    user_table = _accuracy("model.pt", "--interactions", "train.parquet")
    change = user_table["changes"]["alpha_0.75"]  # type: ignore[index]
    assert [round(100 * end, 2) for end in change["head_share_delta_ci"]] == [-0.95, -0.30]
