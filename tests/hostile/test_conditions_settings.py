"""Hostile training settings for the conditions C1–C5: a checkpoint whose stored learning
rates disagree (a scheduler's last rate, a config from another run) or are nonsense, loss
names that only look cosine-based, declarations that contradict each other. The audit
runs (exit 0), says what it found in its warnings and conditions, and never crashes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from .corpus import EXIT_OK, Built, Case, Outcome, check_args, log, params, run_case, strict_json, table, write

N_ITEMS, N_USERS, DIM = 10, 5, 4


def _checkpoint(lr: float, initial_lr: Any = None, config: dict[str, Any] | None = None) -> Any:
    """A generic checkpoint (model and optimizer state dicts) whose SGD group a scheduler
    left at ``lr`` (``initial_lr``: what torch's schedulers add), with a recorded config."""

    def build(d: Path) -> Built:
        log(d)
        gen = torch.Generator().manual_seed(0)
        item = torch.nn.Parameter(torch.randn(N_ITEMS, DIM, generator=gen))
        user = torch.nn.Parameter(torch.randn(N_USERS, DIM, generator=gen))
        opt = torch.optim.SGD([item, user], lr=1.0)
        state = opt.state_dict()
        for group in state["param_groups"]:
            group["lr"] = lr
            if initial_lr is not None:
                group["initial_lr"] = initial_lr
        ck: dict[str, Any] = {"model_state_dict": {"item_emb.weight": item.detach(), "user_emb.weight": user.detach()},
                              "optimizer_state_dict": state}
        if config is not None:
            ck["config"] = config
        torch.save(ck, d / "model.pt")
        return Built(check_args("model.pt", "--format", "json", "-o", "report.json"), outputs=["report.json"],
                     must_exist=["report.json"], check=_lr_is(initial_lr if isinstance(initial_lr, float)
                                                              and 0 < initial_lr < float("inf") else None))

    return build


def _lr_is(initial: float | None) -> Any:
    def check(d: Path, outcome: Outcome) -> None:
        report = strict_json(d / "report.json")
        differ = [w for w in report["warnings"] if "stored learning rates differ" in w]
        c1 = report["conditions"]["C1"]["details"]
        if initial is not None:
            assert c1["lr"] == initial and len(differ) == 1, (c1, report["warnings"])
        else:  # a nonsense initial_lr is no rate: the state's lr stands, unwarned
            assert c1["lr"] == 0.01 and not differ, (c1, report["warnings"])

    return check


def _declared(*options: str, expect: dict[str, str], warning: str | None = None) -> Any:
    """``check`` of a plain table with training settings declared (``options``); the
    conditions' statuses must be ``expect`` and a warning must match ``warning``."""

    def build(d: Path) -> Built:
        log(d)

        def check(d: Path, outcome: Outcome) -> None:
            report = strict_json(d / "report.json")
            got = {k: report["conditions"][k]["status"] for k in expect}
            assert got == expect, {k: report["conditions"][k]["evidence"] for k in expect}
            if warning is not None:
                assert any(re.search(warning, w) for w in report["warnings"]), report["warnings"]

        return Built(check_args(table(d), *options, "--format", "json", "-o", "report.json"),
                     outputs=["report.json"], must_exist=["report.json"], check=check)

    return build


def _recorded_loss(loss: str, expect: str) -> Any:
    """A checkpoint whose recorded config names ``loss``; C4 must be ``expect``."""

    def build(d: Path) -> Built:
        log(d)
        gen = torch.Generator().manual_seed(0)
        torch.save({"model_state_dict": {"item_emb.weight": torch.randn(N_ITEMS, DIM, generator=gen),
                                         "user_emb.weight": torch.randn(N_USERS, DIM, generator=gen)},
                    "config": {"loss": loss, "epochs": 3}}, d / "model.pt")

        def check(d: Path, outcome: Outcome) -> None:
            c4 = strict_json(d / "report.json")["conditions"]["C4"]
            assert c4["status"] == expect, c4

        return Built(check_args("model.pt", "--format", "json", "-o", "report.json"), outputs=["report.json"],
                     must_exist=["report.json"], check=check)

    return build


def _user_tower_optimizer(momentum: float) -> Any:
    """A checkpoint whose one saved optimizer trains the user table and a user MLP only (the
    item table's optimizer was not saved): C1 must be unknown, the reason stated (QA N3)."""

    def build(d: Path) -> Built:
        log(d)
        gen = torch.Generator().manual_seed(0)
        item = torch.nn.Parameter(torch.randn(N_ITEMS, DIM, generator=gen))
        user = torch.nn.Parameter(torch.randn(N_USERS, DIM, generator=gen))
        mlp = torch.nn.Linear(DIM, DIM)
        opt = torch.optim.SGD([user, *mlp.parameters()], lr=1.0, momentum=momentum)
        for p in (user, *mlp.parameters()):
            p.grad = torch.ones_like(p)
        opt.step()
        torch.save({"model_state_dict": {"item_emb.weight": item.detach(), "user_emb.weight": user.detach(),
                                         "user_mlp.weight": mlp.weight.detach(), "user_mlp.bias": mlp.bias.detach()},
                    "optimizer_state_dict": opt.state_dict()}, d / "model.pt")

        def check(d: Path, outcome: Outcome) -> None:
            c1 = strict_json(d / "report.json")["conditions"]["C1"]
            assert c1["status"] == "unknown" and "holds 3 parameters of the model's 4 tensors" in c1["evidence"], c1

        return Built(check_args("model.pt", "--format", "json", "-o", "report.json"), outputs=["report.json"],
                     must_exist=["report.json"], check=check)

    return build


def _trace_config(config: dict[str, Any], expect: dict[str, str]) -> Any:
    """``check --trace`` of a bare table whose trace's config records ``config`` (text or
    nonsense where numbers belong: no fact, never a crash); statuses must be ``expect``."""

    def build(d: Path) -> Built:
        from auditor.monitor import TrainingMonitor

        table = torch.zeros(N_ITEMS, 2, dtype=torch.float64)
        table[:, 0] = 1.0 + torch.arange(N_ITEMS, dtype=torch.float64) / 100
        with TrainingMonitor(table, counts=np.arange(N_ITEMS, 0, -1), interval=1, trace=d / "t.jsonl",
                             config=config, fsync=False) as monitor:
            monitor.before_step(torch.arange(N_ITEMS))
            table[:, 1] += 0.1
            monitor.after_step()
        np.save(d / "items.npy", table.numpy())
        write(d, "counts.csv", "item_id,count\n" + "".join(f"{i},{N_ITEMS - i}\n" for i in range(N_ITEMS)))

        def check(d: Path, outcome: Outcome) -> None:
            report = strict_json(d / "report.json")
            got = {k: report["conditions"][k]["status"] for k in expect}
            assert got == expect, {k: report["conditions"][k]["evidence"] for k in expect}

        return Built(["check", "items.npy", "--frequencies", "counts.csv", "--trace", "t.jsonl", "--bootstrap", "0",
                      "--no-probes", "-q", "--format", "json", "-o", "report.json"], outputs=["report.json"],
                     must_exist=["report.json"], check=check)

    return build


CASES = [
    Case("conditions-trace-momentum-text",
         _trace_config({"optimizer": "sgd", "momentum": "lots", "weight_decay": None}, {"C1": "holds"}),
         EXIT_OK, None),
    Case("conditions-trace-momentum-recorded",
         _trace_config({"optimizer": "momentum", "momentum": 0.9, "weight_decay": 0.0}, {"C1": "violated"}),
         EXIT_OK, None),
    Case("conditions-loss-log-cosh", _declared("--loss", "log_cosh", expect={"C4": "violated"}), EXIT_OK, None),
    Case("conditions-loss-cost-sensitive-bpr", _declared("--loss", "cost_sensitive_bpr", expect={"C4": "violated"}),
         EXIT_OK, None),
    Case("conditions-loss-unrecognised", _declared("--loss", "costly", expect={"C4": "unknown"}), EXIT_OK, None),
    Case("conditions-loss-run-together-both-kinds", _declared("--loss", "cosinebpr", expect={"C4": "unknown"}),
         EXIT_OK, None),
    Case("conditions-loss-run-together-cosine", _declared("--loss", "sphericalloss", expect={"C4": "holds"}),
         EXIT_OK, None),
    Case("conditions-loss-version-tag", _declared("--loss", "bpr_v2", expect={"C4": "violated"}), EXIT_OK, None),
    Case("conditions-loss-temperature-tag", _declared("--loss", "cos_t0.07", expect={"C4": "holds"}), EXIT_OK, None),
    Case("conditions-recorded-loss-tagged", _recorded_loss("infonce_cos_tau", "holds"), EXIT_OK, None),
    Case("conditions-loss-l2-normalize", _declared("--loss", "l2_normalize", expect={"C4": "holds"}), EXIT_OK, None),
    Case("conditions-loss-l2norm-infonce", _declared("--loss", "l2norm_infonce", expect={"C4": "holds"}), EXIT_OK, None),
    Case("conditions-loss-plain-l2", _declared("--loss", "l2_loss", expect={"C4": "violated"}), EXIT_OK, None),
    Case("conditions-recorded-loss-l2-normalized", _recorded_loss("L2NormalizedInfoNCE", "holds"), EXIT_OK, None),
    # conditions QA round 2, N3: negated cosine words and a non-adjacent l2 read as no cosine
    Case("conditions-loss-no-normalize", _declared("--loss", "no_normalize_infonce", expect={"C4": "unknown"}),
         EXIT_OK, None),
    Case("conditions-loss-without-cosine", _declared("--loss", "without_cosine", expect={"C4": "unknown"}),
         EXIT_OK, None),
    Case("conditions-loss-non-normalized-run-together",
         _declared("--loss", "nonnormalized_infonce", expect={"C4": "unknown"}), EXIT_OK, None),
    Case("conditions-loss-unnormalized-dot", _declared("--loss", "unnormalized_dot", expect={"C4": "violated"}),
         EXIT_OK, None),
    Case("conditions-loss-l2-apart-from-normalized",
         _declared("--loss", "l2_dist_normalized", expect={"C4": "unknown"}), EXIT_OK, None),
    Case("conditions-recorded-loss-non-normalized", _recorded_loss("NonNormalizedInfoNCE", "unknown"), EXIT_OK, None),
    Case("conditions-optimizer-of-the-user-tower-only", _user_tower_optimizer(0.9), EXIT_OK, None),
    Case("conditions-plain-optimizer-of-the-user-tower-only", _user_tower_optimizer(0.0), EXIT_OK, None),
    Case("conditions-momentum-optimizer-momentum-zero",
         _declared("--optimizer", "momentum", "--momentum", "0", "--weight-decay", "0", expect={"C1": "holds"},
                   warning=r"--optimizer momentum names momentum but --momentum 0 declares none"), EXIT_OK, None),
    Case("conditions-recorded-loss-logcosh", _recorded_loss("LogCosh", "violated"), EXIT_OK, None),
    Case("conditions-scheduled-lr", _checkpoint(0.01, 10.0, {"lr": 10.0}), EXIT_OK, None),
    Case("conditions-initial-lr-infinite", _checkpoint(0.01, float("inf")), EXIT_OK, None),
    Case("conditions-initial-lr-negative", _checkpoint(0.01, -3.0), EXIT_OK, None),
    Case("conditions-initial-lr-text", _checkpoint(0.01, "ten"), EXIT_OK, None),
]


@pytest.mark.parametrize("case", params(CASES))
def test_hostile_condition_settings(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_case(case, tmp_path, monkeypatch)
