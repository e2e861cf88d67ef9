"""The small checkpoint bundles the condition tests build: two seeded tables (40 items, 30
users, 8 dims), an optimizer's state after one step of unit gradients, and a bundle that
holds them as a checkpoint's tables (shared by test_conditions.py and test_conditions_ranking.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from auditor.model import ModelBundle

N_ITEMS, N_USERS, DIM = 40, 30, 8


def seeded_tables() -> tuple[torch.nn.Parameter, torch.nn.Parameter]:
    """The item and user tables, the same on every call."""
    gen = torch.Generator().manual_seed(0)
    return (torch.nn.Parameter(torch.randn(N_ITEMS, DIM, generator=gen)),
            torch.nn.Parameter(torch.randn(N_USERS, DIM, generator=gen)))


def stepped(opt: torch.optim.Optimizer) -> dict[str, Any]:
    """``opt``'s state dict after one step of unit gradients on every parameter."""
    for group in opt.param_groups:
        for p in group["params"]:
            p.grad = torch.ones_like(p)
    opt.step()
    return opt.state_dict()


def table_bundle(optimizer_state: Any = None, config: Any = None, fmt: str = "checkpoint", **kw: Any) -> ModelBundle:
    """A checkpoint of the seeded tables, with the optimizer state and config given."""
    item, user = seeded_tables()
    state_dict = kw.pop("state_dict", {"item_emb.weight": item.detach(), "user_emb.weight": user.detach()})
    return ModelBundle(
        source=Path("model.pt"), format=fmt, item_table=item.detach().numpy(), item_key="item_emb.weight",
        user_table=user.detach().numpy(), user_key="user_emb.weight", state_dict=state_dict,
        optimizer_state=optimizer_state, config=config, **kw,
    )
