"""TorchRec DistributedModelParallel state dicts (tests/data/torchrec/make_checkpoint.py: real
torch.distributed ShardedTensors in TorchRec's key layout), read by the popaudit_torchrec
plugin without torch.distributed, TorchRec or a process group."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.stats import spearmanr
from click.testing import CliRunner
from test_plugins_torchrec import load, torchrec_installed, torchrec_site  # noqa: F401  (the plugin, built per session)

from auditor.cli import cli
from auditor.errors import ModelLoadError

DATA = Path(__file__).resolve().parent / "data" / "torchrec"
EXPECTED: dict[str, Any] = json.loads((DATA / "expected.json").read_text())
ITEM_KEY = "two_tower.ebc.embedding_bags.t_item_id.weight"


@pytest.mark.usefixtures("torchrec_installed")
def test_dmp_state_dict_is_audited(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    result = CliRunner().invoke(
        cli,
        ["check", str(DATA / "dmp_two_tower.pt"), "--interactions", str(DATA / "interactions.csv"),
         "--json", str(out), "--no-probes", "--bootstrap", "0", "-q"],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    inputs = report["inputs"]
    assert inputs["format"] == "torchrec" and inputs["item_table"] == ITEM_KEY  # wrapper prefixes dropped
    assert inputs["user_table"] == "two_tower.ebc.embedding_bags.t_user_id.weight"
    assert [inputs["n_items"], inputs["dim"]] == EXPECTED["shape"] == [80, 8]
    assert inputs["n_unmapped_interactions"] == 0  # rows are TorchRec's ids
    # Norms are freq^0.25 times a float32 unit direction: items of one frequency share a norm
    # to within float32 rounding. scipy on the raw norms (EXPECTED) ranks that noise; popaudit
    # ties each plateau of at least 3 rows (docs/measures.md), i.e. frequencies held by 3 or more items.
    freq = np.bincount(np.loadtxt(DATA / "interactions.csv", delimiter=",", skiprows=1, dtype=np.int64)[:, 1],
                       minlength=EXPECTED["shape"][0])
    norms = np.linalg.norm(load(DATA / "dmp_two_tower.pt").item_table.astype(np.float64), axis=1)
    assert spearmanr(freq, norms).statistic == pytest.approx(EXPECTED["spearman"], abs=1e-12)
    tied = np.where(np.bincount(freq)[freq] >= 3, freq**0.25, norms)
    assert report["frequency_norm"]["spearman"] == pytest.approx(spearmanr(freq, tied).statistic, abs=1e-12)
    assert any("ShardedTensor of 2 shards" in w for w in report["warnings"])


@pytest.mark.usefixtures("torchrec_installed")
def test_shards_are_put_back_in_place() -> None:
    bundle = load(DATA / "dmp_two_tower.pt")
    np.testing.assert_array_equal(bundle.item_table[0], np.float32(EXPECTED["row0"]))  # column-wise: both halves
    assert bundle.user_table is not None and bundle.user_table.shape == (60, 8)
    np.testing.assert_array_equal(bundle.user_table[59], np.float32(EXPECTED["user_row59"]))  # third row shard
    assert bundle.config is not None and [t["name"] for t in bundle.config["tables"]] == ["t_item_id", "t_user_id"]


@pytest.mark.usefixtures("torchrec_installed")
def test_one_ranks_part_is_refused_with_the_missing_rows() -> None:
    with pytest.raises(ModelLoadError, match=r"holds 1 of the 2 shards of its 80x8 table \(40 rows missing, "
                                             r"rows 40\.\.79\): it is one rank's part"):
        load(DATA / "dmp_rank0_of_2.pt")


@pytest.mark.usefixtures("torchrec_installed")
def test_dmp_state_dict_saved_with_the_default_protocol() -> None:
    bundle = load(DATA / "dmp_two_tower_protocol2.pt")
    np.testing.assert_array_equal(bundle.item_table[0], np.float32(EXPECTED["row0"]))
