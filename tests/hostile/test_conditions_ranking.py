"""Hostile evidence for C1–C5 that disagrees with itself (conditions QA11): a plugin declaring
what the checkpoint's optimizer state contradicts (F1), declarations against param groups
that cannot be told apart (F2), a recorded config whose momentum or weight decay the
optimizer state contradicts (F3), declarations that leave the optimizer unnamed (F5), an
item tower under a name that says neither tower (F6), a declared rate that none of the
candidate groups' differing rates matches (N2). The
audit runs (exit 0), ranks the evidence (measured > recorded config > declared), and says
in a warning where a weaker source lost."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable

import pytest
import torch

from .corpus import EXIT_OK, Built, Case, Outcome, check_args, log, params, run_case, strict_json

N_ITEMS, N_USERS, DIM = 10, 5, 4
DECLARES_C1_HOLDS = """from auditor.hookspecs import hookimpl
from auditor.result import Condition
@hookimpl
def popaudit_condition_evidence(bundle):
    return {"C1": Condition("plain SGD", "holds", "the author says plain SGD")}
"""


def _checkpoint(optimizer: Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer] | None, *options: str,
                config: dict[str, Any] | None = None, plugin: str | None = None, expect: dict[str, str],
                warning: str | None = None, evidence: str | None = None) -> Any:
    """A generic checkpoint (item and user tables, the optimizer ``optimizer`` builds over
    [item, user], stepped once; ``config`` as its recorded config), checked with ``options``
    (and ``plugin`` as plug.py): the statuses must be ``expect``, a warning must match
    ``warning`` (None: no warning may name a conflict), C1's evidence must match ``evidence``."""

    def build(d: Path) -> Built:
        log(d)
        gen = torch.Generator().manual_seed(0)
        item = torch.nn.Parameter(torch.randn(N_ITEMS, DIM, generator=gen))
        user = torch.nn.Parameter(torch.randn(N_USERS, DIM, generator=gen))
        ck: dict[str, Any] = {"model_state_dict": {"item_emb.weight": item.detach(), "user_emb.weight": user.detach()}}
        if optimizer is not None:
            opt = optimizer([item, user])
            for p in (item, user):
                p.grad = torch.ones_like(p)
            opt.step()
            ck["optimizer_state_dict"] = opt.state_dict()
        if config is not None:
            ck["config"] = config
        torch.save(ck, d / "model.pt")
        extra = ["--plugin", "plug.py"] if plugin else []
        if plugin:
            (d / "plug.py").write_text(plugin)
        return Built(check_args("model.pt", *extra, *options, "--format", "json", "-o", "report.json"),
                     outputs=["report.json"], must_exist=["report.json"], check=check)

    def check(d: Path, outcome: Outcome) -> None:
        report = strict_json(d / "report.json")
        got = {k: report["conditions"][k]["status"] for k in expect}
        assert got == expect, {k: report["conditions"][k]["evidence"] for k in expect}
        if warning is not None:
            assert any(re.search(warning, w) for w in report["warnings"]), report["warnings"]
        else:
            assert not any(re.search(r"conflict|differs|matches none|stands", w) for w in report["warnings"]), \
                report["warnings"]
        if evidence is not None:
            assert re.search(evidence, report["conditions"]["C1"]["evidence"]), report["conditions"]["C1"]

    return build


def _adamw(params_: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params_, lr=0.01, weight_decay=0.0)


def _groups(params_: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """Item and user tables in differing plain-SGD groups: no state shows which is which."""
    item, user = params_
    return torch.optim.SGD([{"params": [user]}, {"params": [item], "weight_decay": 1e-3}], lr=5.0)


def _rates_differ(params_: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """Item and user tables in plain-SGD groups alike but for their rates (user 1, item 5)."""
    item, user = params_
    return torch.optim.SGD([{"params": [user], "lr": 1.0}, {"params": [item]}], lr=5.0)


def _sgd(params_: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.SGD(params_, lr=5.0)


_AMBIGUOUS = r"can be in any of 2 param groups that differ"
CASES = [
    # F1: the file's AdamW state outranks a plugin's "plain SGD" (before: C1 holds, no warning)
    Case("conditions-plugin-c1-against-adamw-state", _checkpoint(
        _adamw, plugin=DECLARES_C1_HOLDS, expect={"C1": "violated"},
        warning=r"^C1: plugin 'file:plug\.py' declares it holds, but the checkpoint's optimizer state shows it "
                r"violated; the optimizer state stands"), EXIT_OK, None),
    # F2: a declaration that matches one of the differing candidate groups settles C1
    Case("conditions-ambiguous-groups-declared-weight-decay", _checkpoint(
        _groups, "--weight-decay", "0.001", expect={"C1": "violated"}, warning=None,
        evidence=r"param group 1 \(the item table: of the 2 differing param groups .* the only one that matches the "
                 r"declared --weight-decay 0\.001\): weight decay 0\.001"), EXIT_OK, None),
    Case("conditions-ambiguous-groups-declared-plain-sgd", _checkpoint(
        _groups, "--optimizer", "sgd", "--momentum", "0", "--weight-decay", "0", expect={"C1": "holds"},
        warning=None, evidence=r"param group 0 .*the only one that matches the declared --optimizer sgd --momentum 0 "
                               r"--weight-decay 0"), EXIT_OK, None),
    Case("conditions-ambiguous-groups-declaration-matches-none", _checkpoint(
        _groups, "--optimizer", "adam", expect={"C1": "unknown"},
        warning=r"^the declared --optimizer adam matches none of the 2 param groups that can hold the item table"),
        EXIT_OK, None),
    Case("conditions-ambiguous-groups-declaration-matches-both", _checkpoint(
        _groups, "--optimizer", "sgd", expect={"C1": "unknown"}, warning=None,
        evidence=_AMBIGUOUS + r".*--optimizer/--momentum/--weight-decay matching one group.*"
                              r"\(the declared --optimizer sgd matches 2 of them\)"), EXIT_OK, None),
    # N2: --lr matching none of the candidate groups' differing rates loses, warned (before: silent, and shown
    # as the optimizer state's lr); one of their rates is taken, named as --lr's
    Case("conditions-groups-rates-differ-declared-lr-matches-none", _checkpoint(
        _rates_differ, "--lr", "7", expect={"C1": "holds"}, evidence=r"\): SGD \(momentum=0, weight_decay=0\)$",
        warning=r"^--lr 7 matches none of the learning rates of the 2 param groups that can hold the item table "
                r"\(param group 0: lr 1; param group 1: lr 5\); the optimizer state wins"), EXIT_OK, None),
    Case("conditions-groups-rates-differ-declared-lr-matches-one", _checkpoint(
        _rates_differ, "--lr", "5", expect={"C1": "holds"}, warning=None,
        evidence=r"SGD \(lr=5, momentum=0, weight_decay=0\) \[lr from --lr\]$"), EXIT_OK, None),
    # F3: the recorded config's momentum / weight decay against the optimizer state's
    Case("conditions-config-momentum-against-state", _checkpoint(
        _sgd, config={"optimizer": "sgd", "momentum": 0.9}, expect={"C1": "holds"},
        warning=r"^the recorded config's momentum 0\.9 \(momentum\) differs from the optimizer state's 0; the "
                r"optimizer state wins"), EXIT_OK, None),
    Case("conditions-config-weight-decay-against-state", _checkpoint(
        _sgd, config={"weight_decay": 0.01}, expect={"C1": "holds"},
        warning=r"^the recorded config's weight decay 0\.01 \(weight_decay\) differs from the optimizer state's 0"),
        EXIT_OK, None),
    # F5: declarations that leave the optimizer unnamed, or name it with momentum 0
    Case("conditions-declared-zeros-without-optimizer", _checkpoint(
        None, "--momentum", "0", "--weight-decay", "0", expect={"C1": "unknown"}, warning=None,
        evidence=r"^momentum 0 \(--momentum\) and weight decay 0 \(--weight-decay\) known, but the optimizer itself "
                 r"is not named \(--optimizer\)$"), EXIT_OK, None),
    Case("conditions-declared-momentum-optimizer-momentum-zero", _checkpoint(
        None, "--optimizer", "momentum", "--momentum", "0", expect={"C1": "holds"},
        warning=r"--optimizer momentum names momentum but --momentum 0 declares none",
        evidence=r"weight decay from torch\.optim\.SGD's default, assumed from --optimizer momentum"), EXIT_OK, None),
]



def _neutral_tower(d: Path) -> Built:
    """A state dict whose item MLP is named ``tower.*`` (no 'item' in its keys)."""
    log(d)
    gen = torch.Generator().manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(DIM, 8), torch.nn.ReLU(), torch.nn.Linear(8, DIM))
    torch.save({"item_embedding.weight": torch.randn(N_ITEMS, DIM, generator=gen),
                "user_embedding.weight": torch.randn(N_USERS, DIM, generator=gen),
                **{f"tower.{k}": v.detach() for k, v in mlp.state_dict().items()}}, d / "model.pt")

    def check(d: Path, outcome: Outcome) -> None:
        report = strict_json(d / "report.json")
        assert report["warnings"][0].startswith(
            "audited the stored id table `item_embedding.weight` only: the checkpoint's tensors `tower.0.weight`, "
            "`tower.2.weight`, which name neither tower but can be layers over the 4-wide item embeddings, are "
            "ignored, so these, audited as the served ones, may not be the item vectors"), report["warnings"]
        assert report["served_vectors"]["as_served"] is True  # a warning: such layers may be the query side's alone

    return Built(check_args("model.pt", "--format", "json", "-o", "report.json"), outputs=["report.json"],
                 must_exist=["report.json"], check=check)


CASES += [Case("conditions-neutrally-named-item-mlp", _neutral_tower, EXIT_OK, None)]


@pytest.mark.parametrize("case", params(CASES))
def test_hostile_condition_evidence_ranking(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_case(case, tmp_path, monkeypatch)
