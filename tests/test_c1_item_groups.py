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


# Conditions QA round 2, N3: an optimizer that provably does not hold the item table (the items
# had another optimizer that was not saved, or were frozen) was read for it.
def _c1_mlp(state: Any, item: torch.Tensor, user: torch.Tensor, mlp: torch.nn.Linear,
            declared: DeclaredTraining | None = None) -> Condition:
    bundle = ModelBundle(
        source=Path("model.pt"), format="checkpoint", item_table=item.detach().numpy(), item_key="item_emb.weight",
        user_table=user.detach().numpy(), user_key="user_emb.weight",
        state_dict={"user_emb.weight": user.detach(), "item_emb.weight": item.detach(),
                    "user_mlp.weight": mlp.weight.detach(), "user_mlp.bias": mlp.bias.detach()},
        optimizer_state=state,
    )
    return assess_conditions(bundle, None, None, declared or DeclaredTraining(), run_probes=False).conditions["C1"]


def test_a_saved_user_tower_optimizer_says_nothing_of_the_item_table() -> None:
    item, user = _tables(30, 20)
    mlp = torch.nn.Linear(DIM, DIM)
    user_opt = torch.optim.SGD([user, *mlp.parameters()], lr=1.0, momentum=0.9)  # the one saved
    item_opt = torch.optim.SGD([item], lr=10.0)  # plain SGD on the items, not saved
    _step(user_opt, item_opt)
    c1 = _c1_mlp(user_opt.state_dict(), item, user, mlp)
    # every held parameter has a momentum buffer of its own shape, none (30, 8): was "violated,
    # one param group, so it covers the item table: momentum 0.9 on the item parameters"
    assert c1.status == "unknown", c1.evidence
    assert "holds 3 parameters of the model's 4 tensors" in c1.evidence
    assert "none with the item table's shape (30, 8): the item table is not among them" in c1.evidence
    assert c1.details["item_table_outside_optimizer_state"]


def test_a_plain_sgd_user_optimizer_does_not_vouch_for_an_adam_item_table() -> None:
    item, user = _tables(30, 20)
    mlp = torch.nn.Linear(DIM, DIM)
    user_opt, item_opt = torch.optim.SGD([user, *mlp.parameters()], lr=1.0), torch.optim.Adam([item], lr=0.01)
    _step(user_opt, item_opt)
    c1 = _c1_mlp(user_opt.state_dict(), item, user, mlp)
    assert c1.status == "unknown", c1.evidence  # was "holds: SGD (lr=1 ...)"; the items were on Adam
    assert "whether it is among the 3 without state" in c1.evidence


def test_a_frozen_item_table_is_not_found_by_elimination() -> None:
    item, user = _tables(30, 20)
    mlp = torch.nn.Linear(DIM, DIM)
    opt = torch.optim.SGD([{"params": list(mlp.parameters())}, {"params": [user], "momentum": 0.9}], lr=1.0)
    _step(opt)
    c1 = _c1_mlp(opt.state_dict(), item, user, mlp)
    # was "holds, param group 0 (item table: 2 parameters have no optimizer state that shows their shape)"
    assert c1.status == "unknown", c1.evidence
    assert "holds 3 parameters of the model's 4 tensors" in c1.evidence


def test_one_group_over_every_tensor_still_covers_the_item_table() -> None:
    item, user = _tables(30, 20)
    mlp = torch.nn.Linear(DIM, DIM)
    opt = torch.optim.SGD([user, item, *mlp.parameters()], lr=1.0, momentum=0.9)
    _step(opt)
    c1 = _c1_mlp(opt.state_dict(), item, user, mlp)
    assert c1.status == "violated" and "covers the item table" in c1.evidence, c1.evidence
    # a declared optimizer still speaks for an item table the saved state does not hold
    item_opt = torch.optim.SGD([user, *mlp.parameters()], lr=1.0, momentum=0.9)
    _step(item_opt)
    declared = DeclaredTraining(optimizer="sgd", momentum=0.0, weight_decay=0.0)
    c1 = _c1_mlp(item_opt.state_dict(), item, user, mlp, declared)
    assert c1.status == "holds" and "not read for the item table" in c1.evidence, c1.evidence
