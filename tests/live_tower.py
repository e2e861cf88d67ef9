"""One plugin whose live model is an id-embedding tower with switchable faults (``LIVE_MODE``),
shared by the tests of plugin code the probes call (tests/test_live_nonfinite.py,
tests/test_live_probe_calls.py): ``write_tower`` writes it, a model and a log; ``audit_tower``
audits them in one mode.

Modes: ``nan`` (every third item row NaN), ``nan_item_0`` (item row 0 NaN), ``nan_on_batch`` /
``raise_on_batch`` (a NaN row in, or a raise on, a call of the probe batch's 256 rows),
``nan_gradient`` (a finite loss whose gradient is not), ``no_grad`` (a loss that raises when
its input requires grad), ``loss_nan`` (a NaN loss), ``diverge`` (a probe step that sends every row with a gradient to infinity);
anything else: no fault."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from auditor.audit import run_audit
from auditor.config import AuditConfig
from auditor.plugins import get_plugin_manager

PROBE_BATCH = 256
"""Rows of the probe batch without a recorded batch size."""

PLUGIN = '''
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
        mode = os.environ.get("LIVE_MODE")
        if mode == "nan":
            out = torch.where((rows % 3 == 0)[:, None], torch.full_like(out, float("nan")), out)
        if mode == "nan_item_0":
            out = torch.where((rows == 0)[:, None], torch.full_like(out, float("nan")), out)
        if mode == "nan_on_batch" and len(rows) == PROBE_BATCH:
            out = out.clone(); out[5] = float("nan")
        if mode == "raise_on_batch" and len(rows) == PROBE_BATCH:
            raise RuntimeError("encoder exploded on the batch")
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
        loss = torch.nn.functional.cross_entropy(cos / 0.1, torch.arange(len(users)))
        return loss * float("nan") if mode == "loss_nan" else loss

    def make_optimizer(self, module):
        if os.environ.get("LIVE_MODE") == "diverge":
            return Diverging(module.parameters(), lr=0.1)
        return torch.optim.SGD(module.parameters(), lr=0.1)


class Diverging(torch.optim.SGD):
    """A step that sends every row with a gradient to infinity, as a diverging step does."""

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p[p.grad.abs().sum(dim=1) > 0] = float("inf")


@hookimpl
def popaudit_load_model(path, options):
    if Path(path).suffix != ".tower":
        return None
    arrays = np.load(path, allow_pickle=False)
    module = torch.nn.Module()
    module.items = torch.nn.Embedding.from_pretrained(torch.tensor(arrays["items"]), freeze=False)
    module.users = torch.nn.Embedding.from_pretrained(torch.tensor(arrays["users"]), freeze=False)
    return ModelBundle(source=Path(path), format="live_tower", item_table=arrays["items"], user_table=arrays["users"],
                       live=Live(module), replaced_globals={})
'''.replace("PROBE_BATCH", str(PROBE_BATCH))


def write_tower(d: Path, items: np.ndarray, users: np.ndarray, log_users: np.ndarray, log_items: np.ndarray) -> Path:
    """``d`` with the plugin (``plug.py``), the model (``m.tower``: ``items`` and ``users``) and
    the log (``log.parquet``: ``log_users`` beside ``log_items``)."""
    (d / "plug.py").write_text(PLUGIN)
    with open(d / "m.tower", "wb") as fh:
        np.savez(fh, items=items, users=users)
    pq.write_table(pa.table({"user_id": log_users, "item_id": log_items}), d / "log.parquet")
    return d


def audit_tower(d: Path, mode: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``run_audit`` of ``d``'s tower and log in ``mode`` (no retrieval, K = 5, no bootstrap)."""
    monkeypatch.setenv("LIVE_MODE", mode)
    config = AuditConfig(model=d / "m.tower", interactions=d / "log.parquet", bootstrap=0, ks=(5,), retrieval=False)
    return run_audit(config, pm=get_plugin_manager([d / "plug.py"], entry_points=False))
