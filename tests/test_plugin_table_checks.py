"""A plugin loader's item table is checked as the shared validation checks every table:
floating point only (an integer table's truncated norms were audited silently), and, when
the probes run its live model, equal to ``encode_items`` on the probed rows (a stale
table joined a ρ of one set of vectors with probes of another) (QA plugins F4)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from auditor.audit import run_audit
from auditor.cli import cli
from auditor.config import AuditConfig
from auditor.plugins import get_plugin_manager

N_ITEMS, N_USERS, DIM, N_FEATURES = 60, 40, 6, 3

TOWER = '''
import os
from pathlib import Path
import numpy as np
import torch
from auditor.hookspecs import hookimpl
from auditor.model import ModelBundle


class Tower(torch.nn.Module):
    def __init__(self, ids, features, weight, users):
        super().__init__()
        self.ids = torch.nn.Embedding.from_pretrained(torch.tensor(ids), freeze=False)
        self.mix = torch.nn.Linear(features.shape[1], ids.shape[1], bias=False)
        self.mix.weight.data.copy_(torch.tensor(weight))
        self.users = torch.nn.Embedding.from_pretrained(torch.tensor(users), freeze=False)
        self.register_buffer("features", torch.tensor(features))

    def items(self, rows):
        return self.ids(rows) + self.mix(self.features[rows])


class Live:
    loss_name = "infonce-cos"

    def __init__(self, module):
        self.module = module

    def encode_items(self, module, rows):
        return module.items(rows)

    def encode_users(self, module, rows):
        return module.users(rows)

    def item_parameters(self, module):
        return [module.ids.weight, module.mix.weight]

    def loss(self, users, items):
        return -(torch.nn.functional.normalize(users, dim=1) * torch.nn.functional.normalize(items, dim=1)).sum()

    def make_optimizer(self, module):
        return torch.optim.SGD(module.parameters(), lr=0.1)


@hookimpl
def popaudit_load_model(path, options):
    if Path(path).suffix != ".tower":
        return None
    arrays = np.load(path, allow_pickle=False)
    module = Tower(arrays["ids"], arrays["features"], arrays["weight"], arrays["users"])
    with torch.no_grad():
        items = module.items(torch.arange(len(arrays["ids"]))).numpy()
    mode = os.environ.get("TOWER_MODE", "")
    if mode == "stale":  # the id embeddings alone, while the encoder adds the features
        items = arrays["ids"]
    if mode == "int":
        items = items.astype(np.int64)
    return ModelBundle(source=Path(path), format="mixed_tower", item_table=items, user_table=arrays["users"],
                       live=Live(module), replaced_globals={})
'''


@pytest.fixture(scope="module")
def tower(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("tower")
    rng = np.random.default_rng(2)
    (d / "tower_plugin.py").write_text(TOWER)
    with open(d / "m.tower", "wb") as fh:
        np.savez(fh, ids=rng.normal(size=(N_ITEMS, DIM)).astype(np.float32),
                 features=rng.normal(size=(N_ITEMS, N_FEATURES)).astype(np.float32),
                 weight=rng.normal(size=(DIM, N_FEATURES)).astype(np.float32),
                 users=rng.normal(size=(N_USERS, DIM)).astype(np.float32))
    p = 1.0 / np.arange(1, N_ITEMS + 1)
    items = rng.choice(N_ITEMS, size=800, p=p / p.sum())
    pq.write_table(pa.table({"user_id": rng.integers(0, N_USERS, items.size), "item_id": items}), d / "log.parquet")
    return d


def _warnings(d: Path, mode: str, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.setenv("TOWER_MODE", mode)
    config = AuditConfig(model=d / "m.tower", interactions=d / "log.parquet", bootstrap=0, ks=(5,), retrieval=False)
    result = run_audit(config, pm=get_plugin_manager([d / "tower_plugin.py"], entry_points=False))
    assert result.probes is not None  # the live model was probed
    return list(result.warnings)


def test_a_table_that_is_not_the_encoders_output_is_warned(tower: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    said = [w for w in _warnings(tower, "stale", monkeypatch) if "encode_items" in w]
    assert len(said) == 1, said  # before: no warning at all
    assert f"differs from its live model's encode_items on {N_ITEMS} of the {N_ITEMS} probed items" in said[0]
    assert "plugin 'file:" in said[0] and "tower_plugin.py' (popaudit_load_model)" in said[0]
    assert "format 'mixed_tower'" in said[0]
    assert not [w for w in _warnings(tower, "", monkeypatch) if "encode_items" in w]  # the encoder's own outputs


def test_an_integer_item_table_is_refused_naming_the_plugin(tower: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOWER_MODE", "int")
    result = CliRunner().invoke(cli, ["check", str(tower / "m.tower"), "--plugin", str(tower / "tower_plugin.py"),
                                      "--interactions", str(tower / "log.parquet"), "--bootstrap", "0", "-q"])
    assert result.exit_code == 1, result.output  # before: exit 0, the truncated norms audited
    assert "item table in " in result.stderr and "holds integer values (int64)" in result.stderr
    assert "must be floating point" in result.stderr and "tower_plugin.py" in result.stderr
