"""``popaudit mitigate MODEL.pth --alpha A -o OUT`` for RecBole checkpoints (issue #21 item 3),
through the command line and the table of model formats.

tests/data/recbole/eval.json records RecBole 1.2.1's own test metrics for BPR-eval.pth
rescaled by popaudit's RecBole writer at α = 0.5 and 0, with those files' sha256
(tests/data/recbole/make_eval.py). The command writes the same bytes, so RecBole's
recorded evaluation is the evaluation of its output; popaudit's accuracy of the output's
dot products and of the original's ``alpha_<a>`` scoring both equal it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from click.testing import CliRunner

from auditor.cli import cli
from auditor.config import LoadOptions
from auditor.loading import load_model
from auditor.loading.recbole_split import recbole_split
from auditor.loading.torch_archive import read_torch_file
from auditor.metrics.frequency_norm import frequency_norm_stats
from auditor.mitigation.rescale import rescale_rows
from auditor.mitigation.sidecar import sidecar_path
from auditor.retrieval.scorings import multi_scoring_topk

from recbole_helpers import Config, _recbole_names, accuracy, assert_recboles

DATA = Path(__file__).parent / "data" / "recbole"
BPR, LIGHTGCN, INTER = DATA / "BPR-eval.pth", DATA / "LightGCN-eval.pth", DATA / "eval.inter"
RECORD = json.loads((DATA / "eval.json").read_text(encoding="utf-8"))
FORWARD = np.load(DATA / "LightGCN-eval.forward.npz")  # RecBole's LightGCN.forward(), padding row 0 included


def mitigate(model: Path, alpha: float, out: Path, *extra: Any, code: int = 0) -> Any:
    result = CliRunner().invoke(cli, ["mitigate", str(model), "--alpha", str(alpha), "-o", str(out), "-q",
                                      *map(str, extra)])  # fmt: skip
    assert result.exit_code == code, result.output
    return result


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("alpha", [0.5, 0.0])
def test_the_command_writes_the_checkpoint_recbole_evaluated(tmp_path: Path, alpha: float) -> None:
    out = tmp_path / "BPR-mitigated.pth"
    before = sha256(BPR)
    mitigate(BPR, alpha, out)
    recorded = RECORD["mitigated"][f"{alpha:g}"]
    assert sha256(out) == recorded["sha256"] and sha256(BPR) == before  # the file RecBole evaluated; input intact
    side = json.loads(sidecar_path(out).read_text(encoding="utf-8"))
    assert side["source"]["format"] == side["output"]["format"] == "recbole"
    assert side["output"]["sha256"] == recorded["sha256"] and side["warnings"] == recorded["notes"]
    assert side["item_key"] == "item_embedding.weight" and side["n_items"] == 120 and side["dim"] == 16
    original, written = load_model(BPR, LoadOptions()), load_model(out, LoadOptions())
    assert original.config is not None and original.user_table is not None and written.user_table is not None
    split = recbole_split(original.config, INTER)
    # RecBole's metrics of the output = popaudit's dot serving of it = popaudit's alpha_<a> of the original
    assert_recboles(accuracy(written.user_table, written.item_table, split, 1.0), recorded)
    assert_recboles(accuracy(original.user_table, original.item_table, split, alpha), recorded)


def test_the_training_log_gives_the_slopes_and_changes_no_byte(tmp_path: Path) -> None:
    out = tmp_path / "out.pth"
    mitigate(BPR, 0.5, out, "--interactions", INTER)
    assert sha256(out) == RECORD["mitigated"]["0.5"]["sha256"]
    side = json.loads(sidecar_path(out).read_text(encoding="utf-8"))
    # frequencies by RecBole's own numbering: row r is token r + 1 of RecBole's field2id_token
    tokens = RECORD["tokens"]["item_id"][1:]
    items = [line.split("\t")[1] for line in INTER.read_text(encoding="utf-8").splitlines()[1:]]
    whole = np.array([items.count(t) for t in tokens])
    table = read_torch_file(BPR).root["state_dict"]["item_embedding.weight"][1:].double().numpy()
    norms = np.linalg.norm(table, axis=1)
    # counted over the training part of RecBole's split, as check counts them (Served F6), not the whole file
    config = load_model(BPR, LoadOptions()).config
    assert config is not None
    trained = np.bincount(recbole_split(config, INTER).train.items, minlength=len(tokens))
    assert trained.sum() < whole.sum() and np.all(trained <= whole)
    expected, _ = frequency_norm_stats(norms, trained, n_bootstrap=0)
    slope = side["frequency_norm"]["before"]["loglog_slope"]
    assert slope == pytest.approx(expected.loglog_slope, rel=1e-9)
    assert slope != pytest.approx(frequency_norm_stats(norms, whole, n_bootstrap=0)[0].loglog_slope, rel=1e-3)
    assert side["frequency_norm"]["frequencies"] == f"the training part of RecBole's split of {INTER}"
    assert side["frequency_norm"]["after"]["loglog_slope"] == pytest.approx(0.5 * slope, rel=1e-5)


def test_a_graph_model_is_written_as_its_served_vectors(tmp_path: Path) -> None:
    """LightGCN: the rescaled served items (its restore_item_e cache, which equals RecBole's
    forward()) as a plain table; dot serving over it is alpha_0.5 serving of forward()."""
    refused = mitigate(LIGHTGCN, 0.5, tmp_path / "out.pth", code=1)
    assert "LightGCN checkpoint" in refused.output and "give -o a .npy or .parquet name" in refused.output
    assert not (tmp_path / "out.pth").exists()
    mitigate(LIGHTGCN, 0.5, tmp_path / "served.npy")
    served = np.load(tmp_path / "served.npy", allow_pickle=False)
    items, users = FORWARD["item"][1:], FORWARD["user"][1:]
    np.testing.assert_allclose(served, rescale_rows(items.astype(np.float64), 0.5), rtol=1e-6, atol=1e-7)
    expected = multi_scoring_topk(users, items, 10, [0.5])[0.5][1]
    assert np.array_equal(multi_scoring_topk(users, served, 10, [1.0])[1.0][1], expected)
    side = json.loads(sidecar_path(tmp_path / "served.npy").read_text(encoding="utf-8"))
    assert side["source"]["format"] == "recbole" and side["output"]["format"] == "npy"
    assert any("restore_user_e/restore_item_e cached in the checkpoint" in w for w in side["warnings"])
    np.testing.assert_allclose(side["norms"]["after"]["max"], np.linalg.norm(items, axis=1).max() ** 0.5, rtol=1e-6)


def test_served_vectors_as_parquet_carry_recboles_item_ids(tmp_path: Path) -> None:
    mitigate(LIGHTGCN, 0.0, tmp_path / "served.parquet", "--interactions", INTER)
    table = pq.read_table(tmp_path / "served.parquet")
    assert [str(i) for i in table.column("item_id").to_pylist()] == RECORD["tokens"]["item_id"][1:]
    vectors = np.asarray(table.column("embedding").combine_chunks().flatten()).reshape(-1, 16)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-6)  # alpha 0: unit rows


def test_without_a_cache_the_served_vectors_are_propagated(tmp_path: Path) -> None:
    """LightGCN-eval's tables and settings without its restore_* cache: popaudit propagates
    over the training part of the split RecBole made of eval.inter (needs --interactions)."""
    bundle = load_model(LIGHTGCN, LoadOptions())
    assert bundle.config is not None
    state = read_torch_file(LIGHTGCN).root["state_dict"]
    with _recbole_names():
        torch.save({"config": Config("LightGCN", bundle.config), "state_dict": dict(state), "other_parameter": {}},
                   tmp_path / "uncached.pth")
    refused = mitigate(tmp_path / "uncached.pth", 0.5, tmp_path / "served.npy", code=1)
    assert "caches no restore_item_e: pass --interactions with the .inter file RecBole read" in refused.output
    mitigate(tmp_path / "uncached.pth", 0.5, tmp_path / "served.npy", "--interactions", INTER)
    served = np.load(tmp_path / "served.npy")
    expected = rescale_rows(FORWARD["item"][1:].astype(np.float64), 0.5)
    np.testing.assert_allclose(served, expected, rtol=1e-5, atol=1e-6)  # float32 sums in another order
    side = json.loads(sidecar_path(tmp_path / "served.npy").read_text(encoding="utf-8"))
    assert any("propagated by popaudit" in w and "n_layers=2" in w for w in side["warnings"])
