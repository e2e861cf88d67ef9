"""Hostile live models: a plugin's live model is plugin code, so its methods, called by the
probes, fail the run as any plugin hook does, with one ``Error:`` line naming the plugin and
the method (plugins/README.md), not as anonymous "probe ... could not run" warnings (QA
retrain F1, F2). A tower that only refuses many rows at once is the model's limit: the
audit runs and says what it could not compare."""

from __future__ import annotations

from pathlib import Path

import pytest

from .corpus import EXIT_ERROR, EXIT_OK, Built, Case, Outcome, params, run_case, standard, strict_json, write

LIVE = """import numpy as np
import torch
from pathlib import Path
from auditor.errors import InputError
from auditor.hookspecs import hookimpl
from auditor.model import ModelBundle


class Live:
    def __init__(self, module):
        self.module = module
        self.loss_name = "infonce-cos"

    def encode_items(self, module, rows):
        out = module(rows)
        ITEMS
        return out

    def encode_users(self, module, rows):
        USERS
        return module(rows)

    def item_parameters(self, module):
        PARAMETERS
        return list(module.parameters())

    def loss(self, users, items):
        LOSS
        return -(torch.nn.functional.normalize(users, dim=1) * torch.nn.functional.normalize(items, dim=1)).sum()

    def make_optimizer(self, module):
        return torch.optim.SGD(module.parameters(), lr=0.1)


@hookimpl
def popaudit_load_model(path, options):
    table = np.load(path)
    module = torch.nn.Embedding.from_pretrained(torch.tensor(table), freeze=False)
    return ModelBundle(source=Path(path), format="live_tower", item_table=table, user_table=table[:5].copy(),
                       live=Live(module))
"""


def _live(items: str = "pass", users: str = "pass", parameters: str = "pass", loss: str = "pass",
          check: object = None) -> object:
    source = (LIVE.replace("ITEMS", items).replace("USERS", users).replace("PARAMETERS", parameters)
              .replace("LOSS", loss))

    def build(d: Path) -> Built:
        standard(d)
        write(d, "plug.py", source)
        return Built(["check", "items.npy", "--interactions", "log.parquet", "--bootstrap", "0", "-q",
                      "--plugin", "plug.py", "--json", "r.json"], outputs=("r.json",) if check else (),
                     check=check)  # type: ignore[arg-type]

    return build


def _compared_nothing(d: Path, outcome: Outcome) -> None:
    report = strict_json(d / "r.json")
    said = [w for w in report["warnings"] if "encode_items" in w and not w.startswith("probe ")]
    # the probe batch meets the same limit: each probe that reads it says so (a warning, not the plugin failing)
    assert "probe c4 could not run: the live model's encode_items on the probe batch raised ValueError: batch too " \
        "large" in report["warnings"], report["warnings"]
    assert said == ["the item table plugin 'file:plug.py' (popaudit_load_model) returned (format 'live_tower') was "
                    "not compared with its live model's encode_items: its encode_items refuses 10 item rows at once "
                    "(ValueError: batch too large); the frequency-norm figures and retrieval are of the table, the "
                    "probes and C2-C5 of the encoder"], said


WHO = r"^Error: plugin 'file:plug\.py': its live model's "
CASES = [
    Case("live-encode-items-raises", _live(items="raise RuntimeError('encoder exploded')"), EXIT_ERROR,
         WHO + r"encode_items raised RuntimeError: encoder exploded\n$", absent="could not run"),
    Case("live-encode-items-raises-keyboard-interrupt", _live(items="raise KeyboardInterrupt"), EXIT_ERROR,
         WHO + r"encode_items raised KeyboardInterrupt\n$"),
    Case("live-encode-items-raises-an-input-error", _live(items="raise InputError('no features for these rows')"),
         EXIT_ERROR, WHO + r"encode_items: no features for these rows\n$"),
    Case("live-encode-items-returns-ints", _live(items="out = out.round().long()"), EXIT_ERROR,
         WHO + r"encode_items returned a tensor of dtype int64, shape \[10, 4\], not a floating-point tensor\n$"),
    Case("live-encode-items-returns-an-array", _live(items="out = out.detach().numpy()"), EXIT_ERROR,
         WHO + r"encode_items returned a ndarray, not a floating-point tensor\n$"),
    Case("live-encode-items-drops-a-column", _live(items="out = out[:, :-1]"), EXIT_ERROR,
         WHO + r"encode_items returned shape \[10, 3\] for 10 item rows; the probes read \(10, 4\): one vector per "
         r"row, as wide as the item table\n$"),
    Case("live-encode-items-returns-nan-rows", _live(items="out = out.clone(); out[::2] = float('nan')"), EXIT_ERROR,
         WHO + r"encode_items returned non-finite values \(NaN or infinite\) for 5 of 10 item rows probed \(item row 0 "
         r"first\), which no probe can measure\n$", absent="could not run"),
    Case("live-encode-users-returns-inf", _live(users="return module(rows) / 0.0"), EXIT_ERROR,
         WHO + r"encode_users returned non-finite values \(NaN or infinite\) for 5 of 5 user rows probed"),
    Case("live-encode-users-raises", _live(users="raise ZeroDivisionError('no users')"), EXIT_ERROR,
         WHO + r"encode_users raised ZeroDivisionError: no users\n$"),
    Case("live-encode-users-returns-one-vector", _live(users="return module(rows)[:1]"), EXIT_ERROR,
         WHO + r"encode_users returned shape \[1, 4\] for 5 user rows; the probes read \(5, 4\)"),
    Case("live-item-parameters-raises", _live(parameters="raise AttributeError('no tower')"), EXIT_ERROR,
         WHO + r"item_parameters raised AttributeError: no tower\n$"),
    Case("live-loss-raises", _live(loss="raise RuntimeError('loss exploded')"), EXIT_ERROR,
         WHO + r"loss raised RuntimeError: loss exploded\n$"),
    Case("live-loss-returns-a-float", _live(loss="return 0.5"), EXIT_ERROR,
         WHO + r"loss returned a float, not a float scalar tensor\n$"),
    Case("live-encode-items-exits-in-the-contract-call", _live(items="raise SystemExit(3)"), EXIT_ERROR,
         WHO + r"encode_items called sys\.exit\(3\); a plugin cannot end the run\n$"),  # was "raised it called"
    Case("live-encode-items-exits-inside-a-probe",  # the plain calls run without grad; the probes with it
         _live(items="if torch.is_grad_enabled():\n            raise SystemExit(3)"), EXIT_ERROR,
         r"^Error: plugin 'file:plug\.py': its live model failed while the probes ran it: it called "
         r"sys\.exit\(3\); a plugin cannot end the run\n$"),
    Case("live-loss-returns-nan", _live(loss="return torch.tensor(float('nan'))"), EXIT_ERROR,
         WHO + r"loss returned a non-finite value \(nan\) on 5 finite user and item rows, which no probe can "
         r"measure\n$", absent="could not run"),
    Case("live-encode-items-nan-on-the-probe-batch-only",  # the contract reads 10 rows; the batch is larger
         _live(items="if len(rows) > 10:\n            out = out * float('nan')"), EXIT_ERROR,
         WHO + r"encode_items returned non-finite values \(NaN or infinite\) for (\d+) of \1 item rows of the probe "
         r"batch \(item row \d+ first\), which no probe can measure\n$", absent="could not run"),
    Case("live-encode-items-raises-on-the-probe-batch-only",
         _live(items="if len(rows) > 10:\n            raise RuntimeError('exploded on the batch')"), EXIT_ERROR,
         WHO + r"encode_items on the probe batch raised RuntimeError: exploded on the batch\n$", absent="could not run"),
    Case("live-loss-nan-on-the-probe-batch-only",
         _live(loss="if len(users) > 10:\n            return torch.tensor(float('nan'))"), EXIT_ERROR,
         WHO + r"loss returned a non-finite value \(nan\) on the probe batch's \d+ finite user and item rows, which "
         r"no probe can measure\n$", absent="could not run"),
    Case("live-tower-refuses-many-rows-at-once",
         _live(items="if len(rows) > 4:\n            raise ValueError('batch too large')", check=_compared_nothing),
         EXIT_OK, None),
]


@pytest.mark.parametrize("case", params(CASES))
def test_hostile_live_model(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_case(case, tmp_path, monkeypatch)
