"""Hostile recorded configs (QA13 conditions F1–F3): an optimizer or loss recorded Hydra- or
LightningCLI-style, settings of another tower's optimizer, of a layer or of a ``user:``
block beside the item optimizer's, entries that name nothing or hold nonsense. The audit
runs (exit 0), reads each fact from the item optimizer's own blocks and says where it read
it, and never crashes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch

from .corpus import EXIT_OK, Built, Case, Outcome, check_args, log, params, run_case, strict_json

N_ITEMS, N_USERS, DIM = 10, 5, 4


def _recorded(config: dict[str, Any], expect: dict[str, str], evidence: dict[str, str] | None = None,
              state: bool = False) -> Any:
    """``check`` of a checkpoint recording ``config`` (with a plain-SGD optimizer state where
    ``state``): statuses must be ``expect``, evidence match ``evidence``; no warning is given."""

    def build(d: Path) -> Built:
        log(d)
        gen = torch.Generator().manual_seed(0)
        item = torch.nn.Parameter(torch.randn(N_ITEMS, DIM, generator=gen))
        user = torch.nn.Parameter(torch.randn(N_USERS, DIM, generator=gen))
        ck: dict[str, Any] = {"model_state_dict": {"item_emb.weight": item.detach(), "user_emb.weight": user.detach()},
                              "config": config}
        if state:
            ck["optimizer_state_dict"] = torch.optim.SGD([item, user], lr=1.0).state_dict()
        torch.save(ck, d / "model.pt")

        def check(d: Path, outcome: Outcome) -> None:
            report = strict_json(d / "report.json")
            got = {k: report["conditions"][k]["status"] for k in expect}
            assert got == expect, {k: report["conditions"][k]["evidence"] for k in expect}
            for key, pattern in (evidence or {}).items():
                assert re.search(pattern, report["conditions"][key]["evidence"]), report["conditions"][key]
            assert not [w for w in report["warnings"] if "recorded config" in w], report["warnings"]

        return Built(check_args("model.pt", "--no-probes", "--bootstrap", "0", "--format", "json", "-o",
                                "report.json"), outputs=["report.json"], must_exist=["report.json"], check=check)

    return build


_SGD_UNSETTLED = r"^config \(optimizer\) names SGD but not its momentum or weight decay"

CASES = [
    Case("config-hydra-target-adam", _recorded({"optimizer": {"_target_": "torch.optim.Adam", "lr": 0.01}},
                                               {"C1": "violated"}, {"C1": r"^config \(optimizer\._target_\): Adam"}),
         EXIT_OK, None),
    Case("config-hydra-target-sgd-momentum",
         _recorded({"optimizer": {"_target_": "torch.optim.SGD", "_partial_": True, "lr": 5.0, "momentum": 0.9}},
                   {"C1": "violated"}, {"C1": r"momentum 0\.9 \(from config \(optimizer\.momentum\)\)"}),
         EXIT_OK, None),
    Case("config-lightning-cli-adam",
         _recorded({"optimizer": {"class_path": "torch.optim.Adam", "init_args": {"lr": 0.01}}}, {"C1": "violated"},
                   {"C1": r"^config \(optimizer\.class_path\): Adam"}), EXIT_OK, None),
    Case("config-user-optimizer-weight-decay",
         _recorded({"optimizer": "sgd", "lr": 5.0, "momentum": 0.0,
                    "user_optimizer": {"name": "adamw", "lr": 0.01, "weight_decay": 0.05}}, {"C1": "unknown"},
                   {"C1": r"names SGD but not its weight decay"}), EXIT_OK, None),
    Case("config-batchnorm-momentum",
         _recorded({"optimizer": "sgd", "lr": 5.0, "model": {"user_tower": {"batchnorm": {"momentum": 0.1}}}},
                   {"C1": "unknown"}, {"C1": _SGD_UNSETTLED}), EXIT_OK, None),
    Case("config-batchnorm-momentum-beside-the-state",
         _recorded({"optimizer": "sgd", "lr": 5.0, "model": {"user_tower": {"batchnorm": {"momentum": 0.1}}}},
                   {"C1": "holds"}, state=True), EXIT_OK, None),
    Case("config-item-tower-momentum",
         _recorded({"optimizer": "sgd", "item_tower": {"norm": {"momentum": 0.1}, "momentum": 0.1}},
                   {"C1": "unknown"}, {"C1": _SGD_UNSETTLED}), EXIT_OK, None),
    Case("config-item-block-inside-the-model",
         _recorded({"optimizer": "sgd", "model": {"item": {"momentum": 0.1, "weight_decay": 0.1}}},
                   {"C1": "unknown"}, {"C1": _SGD_UNSETTLED}), EXIT_OK, None),
    Case("config-user-block-before-item-block",
         _recorded({"user": {"optimizer": "adam", "lr": 0.01}, "item": {"optimizer": "sgd", "lr": 5.0}},
                   {"C1": "unknown"}, {"C1": r"^config \(item\.optimizer\) names SGD"}), EXIT_OK, None),
    Case("config-user-block-only", _recorded({"user": {"optimizer": "adam", "momentum": 0.9}}, {"C1": "unknown"},
                                             {"C1": r"^no optimizer state, recorded optimizer"}), EXIT_OK, None),
    Case("config-loss-mapping-name-dot", _recorded({"loss": {"name": "infonce_dot", "temperature": 0.1}},
                                                   {"C4": "violated"},
                                                   {"C4": r"^recorded loss \(loss\.name\) 'infonce_dot'"}),
         EXIT_OK, None),
    Case("config-loss-hydra-bpr", _recorded({"loss": {"_target_": "mylib.losses.BPRLoss"}}, {"C4": "violated"},
                                            {"C4": r"^recorded loss \(loss\._target_\) 'BPRLoss': BPR"}),
         EXIT_OK, None),
    Case("config-loss-hydra-unrecognised", _recorded({"loss": {"_target_": "mylib.losses.Mystery"}}, {"C4": "unknown"},
                                                     {"C4": r"'Mystery': a loss name popaudit does not recognise"}),
         EXIT_OK, None),
    Case("config-loss-mapping-names-nothing", _recorded({"loss": {"temperature": 0.1}}, {"C4": "unknown"},
                                                        {"C4": r"loss entry \(loss\) names no loss"}), EXIT_OK, None),
    Case("config-optimizer-mapping-names-nothing", _recorded({"optimizer": {"lr": 0.1}}, {"C1": "unknown"},
                                                             {"C1": r"optimizer entry \(optimizer\) names no optimizer"}),
         EXIT_OK, None),
    Case("config-name-keys-hold-nonsense",
         _recorded({"optimizer": {"_target_": 3, "name": ["adam"], "lr": "fast"}, "loss": {"type": None, "name": ""},
                    "item": "sgd", "user": None}, {"C1": "unknown", "C4": "unknown"},
                   {"C1": r"names no optimizer", "C4": r"names no loss"}), EXIT_OK, None),
    Case("config-deeply-nested-blocks",
         _recorded({"a": {"b": {"c": {"d": {"optimizer": "adam"}}}}, "loss": {"_target_": "..."}},
                   {"C1": "unknown", "C4": "unknown"}), EXIT_OK, None),
]


@pytest.mark.parametrize("case", params(CASES))
def test_hostile_recorded_configs(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_case(case, tmp_path, monkeypatch)
