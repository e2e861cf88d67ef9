"""Non-finite outputs of a plugin's live model (QA retrain F2): NaN rows from ``encode_items``
fail the run naming the plugin (before, ``difference > tolerance`` is False for NaN, so the
documented table-vs-encoder warning never fired and the probes measured nothing silently);
the table comparison is NaN-safe; and C4, falling back to the loss's name where its
gradient-alignment probe did not measure, says so (before, it fell back silently)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from auditor.audit import run_audit
from auditor.config import AuditConfig
from auditor.errors import PluginError
from auditor.model import ModelBundle
from auditor.plugins import get_plugin_manager
from auditor.probes.live_contract import CheckedLive
from auditor.probes.table_agreement import table_disagreement

N_ITEMS, N_USERS, DIM = 45, 12, 5

TOWER = '''
import os
from pathlib import Path
import numpy as np
import torch
from auditor.hookspecs import hookimpl
from auditor.model import ModelBundle


class Live:
    loss_name = "infonce-cos"

    def __init__(self, module):
        self.module = module

    def encode_items(self, module, rows):
        out = module.items(rows)
        if os.environ.get("LIVE_MODE") == "nan":
            out = torch.where((rows % 3 == 0)[:, None], torch.full_like(out, float("nan")), out)
        return out

    def encode_users(self, module, rows):
        return module.users(rows)

    def item_parameters(self, module):
        return [module.items.weight]

    def loss(self, users, items):
        mode = os.environ.get("LIVE_MODE")
        if mode == "nan_gradient":  # the value 0 is finite; d/dx sqrt(x) at 0 is not
            return torch.sqrt(((items - items.detach()) ** 2).sum())
        if mode == "no_grad" and items.requires_grad:
            raise RuntimeError("this loss cannot be differentiated")
        cos = torch.nn.functional.normalize(users, dim=1) @ torch.nn.functional.normalize(items, dim=1).T
        return torch.nn.functional.cross_entropy(cos / 0.1, torch.arange(len(users)))

    def make_optimizer(self, module):
        return torch.optim.SGD(module.parameters(), lr=0.1)


@hookimpl
def popaudit_load_model(path, options):
    if Path(path).suffix != ".tower":
        return None
    arrays = np.load(path, allow_pickle=False)
    module = torch.nn.Module()
    module.items = torch.nn.Embedding.from_pretrained(torch.tensor(arrays["items"]), freeze=False)
    module.users = torch.nn.Embedding.from_pretrained(torch.tensor(arrays["users"]), freeze=False)
    return ModelBundle(source=Path(path), format="nan_tower", item_table=arrays["items"], user_table=arrays["users"],
                       live=Live(module), replaced_globals={})
'''


@pytest.fixture(scope="module")
def tower(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("nan_tower")
    rng = np.random.default_rng(5)
    (d / "nan_plugin.py").write_text(TOWER)
    with open(d / "m.tower", "wb") as fh:
        np.savez(fh, items=rng.normal(size=(N_ITEMS, DIM)).astype(np.float32),
                 users=rng.normal(size=(N_USERS, DIM)).astype(np.float32))
    p = 1.0 / np.arange(1, N_ITEMS + 1)
    items = rng.choice(N_ITEMS, size=600, p=p / p.sum())
    pq.write_table(pa.table({"user_id": rng.integers(0, N_USERS, items.size), "item_id": items}), d / "log.parquet")
    return d


def _audit(d: Path, mode: str, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("LIVE_MODE", mode)
    config = AuditConfig(model=d / "m.tower", interactions=d / "log.parquet", bootstrap=0, ks=(5,), retrieval=False)
    return run_audit(config, pm=get_plugin_manager([d / "nan_plugin.py"], entry_points=False))


def test_nan_rows_from_encode_items_fail_the_run_naming_the_plugin(
    tower: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    nan_rows = np.arange(N_ITEMS)[np.arange(N_ITEMS) % 3 == 0]  # every probed row (the catalogue, < 1,024) % 3 == 0
    with pytest.raises(PluginError) as caught:
        _audit(tower, "nan", monkeypatch)  # before: exit 0, no warning naming the plugin
    assert str(caught.value) == (
        f"plugin 'file:{tower / 'nan_plugin.py'}': its live model's encode_items returned non-finite values "
        "(NaN or infinite) for "
        f"{len(nan_rows)} of {N_ITEMS} item rows probed (item row {nan_rows[0]} first), which no probe can measure"
    )


def test_the_table_comparison_counts_a_nan_row_as_differing() -> None:
    rng = np.random.default_rng(0)
    table = rng.normal(size=(6, 3)).astype(np.float32)
    bundle = ModelBundle(source=Path("t.npy"), format="npy", item_table=table, loader="the built-in loader")
    encoded = table.astype(np.float64)
    encoded[4] = np.nan
    rows = np.arange(6)
    said = table_disagreement(CheckedLive(encoded), bundle, rows)
    assert said is not None  # before: NaN > tolerance is False, so no row differed
    assert "differs from its live model's encode_items on 1 of the 6 probed items (row 4:" in said
    assert table_disagreement(CheckedLive(table.astype(np.float64)), bundle, rows) is None


def test_c4_says_its_probe_did_not_measure_a_non_finite_gradient(tower: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = _audit(tower, "nan_gradient", monkeypatch)
    assert result.probes is not None
    c4 = result.conditions["C4"]
    slots = result.probes.batch_size  # every slot of the batch has a NaN gradient
    # before: the probe graded n = 0 slots and C4 read the loss's name without a word of it
    assert c4.evidence == (
        "the live model's loss 'infonce-cos': scores items by cosine (direction only) (numeric check failed: the "
        f"loss's gradient is not finite in any of the {slots} item slots of the probe batch)"
    )
    assert c4.details["probe_error"].startswith("the loss's gradient is not finite")


def test_a_loss_raising_in_the_c4_probes_call_is_the_plugins_failure(
    tower: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # retrain N1: plugin code raising in a probe's plain call fails the run naming the plugin
    # (before: "probe c4 could not run: RuntimeError: ..." and C4 from the loss's name)
    with pytest.raises(PluginError) as caught:
        _audit(tower, "no_grad", monkeypatch)
    assert str(caught.value) == (f"plugin 'file:{tower / 'nan_plugin.py'}': its live model's loss on the probe batch "
                                 "raised RuntimeError: this loss cannot be differentiated")
