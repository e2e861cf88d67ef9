"""C1 never rests on a guess of which optimizer or param group trains the item table.

A per-parameter state of the item table's shape identifies the item table only when no
other parameter has that shape; a parameter with no state (plain SGD keeps none) can be
any parameter whose shape no state claims. When several groups remain and they differ,
C1 is unknown (or violated when every candidate breaks plain SGD), with the ambiguity
named; a recorded ``param_names`` settles it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from auditor.conditions import assess_conditions
from auditor.config import DeclaredTraining
from auditor.model import ModelBundle
from auditor.result import Condition

DIM = 8


def _tables(n_items: int, n_users: int) -> tuple[torch.nn.Parameter, torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(0)
    return (torch.nn.Parameter(torch.randn(n_items, DIM, generator=gen)),
            torch.nn.Parameter(torch.randn(n_users, DIM, generator=gen)))


def _step(*opts: torch.optim.Optimizer) -> None:
    for opt in opts:
        for group in opt.param_groups:
            for p in group["params"]:
                p.grad = torch.ones_like(p)
        opt.step()


def _c1(item: torch.Tensor, user: torch.Tensor, state: Any, fmt: str = "checkpoint") -> Condition:
    bundle = ModelBundle(
        source=Path("model.pt"), format=fmt, item_table=item.detach().numpy(), item_key="item_emb.weight",
        user_table=user.detach().numpy(), user_key="user_emb.weight",
        state_dict={"user_emb.weight": user.detach(), "item_emb.weight": item.detach()}, optimizer_state=state,
    )
    return assess_conditions(bundle, None, None, DeclaredTraining(), run_probes=False).conditions["C1"]


def _lightning(*opts: torch.optim.Optimizer) -> dict[str, Any]:
    states = [o.state_dict() for o in opts]
    return {**states[0], "optimizer_states": states}  # as the loader keeps a Lightning checkpoint


def test_param_groups_matched_only_by_a_shape_the_user_table_shares_are_unknown() -> None:
    item, user = _tables(40, 40)  # n_users == n_items
    opt = torch.optim.SGD([{"params": [item], "lr": 10.0}, {"params": [user], "lr": 1.0, "momentum": 0.9}])
    _step(opt)
    c1 = _c1(item, user, opt.state_dict())
    # the only (40, 8) state is the user table's momentum buffer: it was read as the item table's
    assert c1.status == "unknown", c1.evidence
    assert "user_emb.weight has the item table's shape (40, 8)" in c1.evidence
    assert "1 parameter has no optimizer state" in c1.evidence and "param_names" in c1.evidence
    # F6: remedies that settle it (recorded names, a plugin, a trace), not item_key, which does not
    assert "item_key" not in c1.evidence and "trace" in c1.evidence and "plugin's C1 evidence" in c1.evidence
    assert [g["group"] for g in c1.details["candidate_groups"]] == [0, 1]


def test_two_lightning_optimizers_matched_only_by_a_shared_shape_are_unknown() -> None:
    item, user = _tables(40, 40)
    user_opt, item_opt = torch.optim.Adam([user], lr=0.01), torch.optim.SGD([item], lr=10.0)
    _step(user_opt, item_opt)
    c1 = _c1(item, user, _lightning(user_opt, item_opt), fmt="lightning")
    assert c1.status == "unknown", c1.evidence
    assert "optimizer 1, param group 0: Adam" in c1.evidence and "optimizer 2, param group 0: SGD" in c1.evidence


def test_two_lightning_optimizers_the_item_one_found_by_elimination() -> None:
    item, user = _tables(40, 30)
    user_opt, item_opt = torch.optim.Adam([user], lr=0.01), torch.optim.SGD([item], lr=10.0)
    _step(user_opt, item_opt)
    c1 = _c1(item, user, _lightning(user_opt, item_opt), fmt="lightning")
    # Adam's state has the user table's shape (30, 8): the item table is SGD's parameter (was: the first
    # optimizer, Adam, "violated")
    assert c1.status == "holds", c1.evidence
    assert "optimizer 2 of 2, param group 0" in c1.evidence and c1.details["lr"] == 10.0


def test_recorded_param_names_settle_a_shared_shape() -> None:
    item, user = _tables(40, 40)
    named = [("user_emb.weight", user), ("item_emb.weight", item)]
    opt = torch.optim.SGD([{"params": [named[1]], "lr": 10.0}, {"params": [named[0]], "momentum": 0.9}], lr=1.0)
    _step(opt)
    assert opt.state_dict()["param_groups"][0]["param_names"] == ["item_emb.weight"]
    c1 = _c1(item, user, opt.state_dict())
    assert c1.status == "holds", c1.evidence
    assert "param group 0" in c1.evidence and "recorded name" in c1.evidence and c1.details["lr"] == 10.0


def test_candidates_alike_settle_c1_but_not_a_learning_rate_they_disagree_on() -> None:
    item, user = _tables(40, 40)
    opt = torch.optim.SGD([{"params": [item], "lr": 10.0}, {"params": [user], "lr": 1.0}], momentum=0.0)
    _step(opt)
    c1 = _c1(item, user, opt.state_dict())
    assert c1.status == "holds", c1.evidence
    assert "all alike, their learning rates differ" in c1.evidence and c1.details["lr"] is None


def test_candidates_that_all_break_plain_sgd_are_violated() -> None:
    item, user = _tables(40, 40)
    user_opt, item_opt = torch.optim.Adam([user], lr=0.01), torch.optim.SGD([item], lr=1.0, momentum=0.9)
    _step(user_opt, item_opt)
    c1 = _c1(item, user, _lightning(user_opt, item_opt), fmt="lightning")
    assert c1.status == "violated" and "every one breaks plain SGD" in c1.evidence, c1.evidence
