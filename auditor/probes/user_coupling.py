"""C3 across the towers: do the user tower's outputs read item-tower parameters?

Eq. 1 sums over every output whose Jacobian touches the item parameters. A user tower that
reads the item table (a history-average user, a YouTube-DNN user) makes J_i J_uᵀ ≠ 0: the
user side's gradients then move q_i, and not orthogonally to it. The item-item
cross-Jacobian (``numerics.cross_jacobian``) cannot see this; this probe measures the
blocks J_i J_uᵀ of the item outputs against sampled users' outputs, both as functions of
the item parameters, on the same normalisation ‖J_iJ_uᵀ‖/√(‖J_iJ_iᵀ‖‖J_uJ_uᵀ‖).
"""

from __future__ import annotations

import torch
from torch.func import functional_call

from auditor.model import LiveModel
from auditor.probe_results import UserCoupling
from auditor.probes.copies import item_function, module_device, probe_dtype, tolerance
from auditor.probes.jacobian import jacobian_product


class _UserEncoder(torch.nn.Module):
    """``live.encode_users`` as a forward, named like ``copies._ItemEncoder`` (``inner.*``)."""

    _live: LiveModel

    def __init__(self, live: LiveModel, module: torch.nn.Module) -> None:
        super().__init__()
        self.inner = module
        object.__setattr__(self, "_live", live)

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        return self._live.encode_users(self.inner, rows)


def user_coupling(
    live: LiveModel, module: torch.nn.Module, user_rows: torch.Tensor, item_rows: torch.Tensor,
    *, generator: torch.Generator | None = None, exhaustive: bool = False,
) -> UserCoupling:
    """The largest ‖J_iJ_uᵀr‖/√(‖J_iJ_iᵀr‖‖J_uJ_uᵀr‖) over ``user_rows`` × ``item_rows`` (J:
    Jacobians with respect to the item parameters; r: a seeded Gaussian direction per user),
    five reverse passes a user: J_uᵀr, then J·J_uᵀr over every item at once (the item of
    the largest block) and over the user, then J_iJ_iᵀr for that item. A zero block gives 0
    along any r and a nonzero one almost never does, so the verdict is exact; the figure is
    exact for isotropic blocks (a table read through a mean: c_i/√Σc²) and a one-direction
    estimate otherwise. A user tower that reads no item parameter costs one reverse pass.
    ``exhaustive``: ``item_rows`` is the whole catalogue (recorded with the result)."""
    f_items, params = item_function(live, module, item_rows)
    device = module_device(module)
    users_fn = _UserEncoder(live, module)
    leaves = {name: p.detach().requires_grad_(True) for name, p in params.items()}
    out_u = functional_call(users_fn, leaves, (user_rows.to(device),))
    out_i = f_items(leaves)
    tol = tolerance(probe_dtype(next(iter(params.values())).dtype, out_i.dtype))
    n_users = int(user_rows.numel())
    # One reverse pass shows whether any user output depends on an item parameter (the user
    # tower's own parameters make out_u require grad either way).
    reached = torch.autograd.grad(out_u.sum(), list(leaves.values()), retain_graph=True, allow_unused=True) \
        if out_u.requires_grad else [None]
    if all(g is None or not bool(g.any()) for g in reached):
        return UserCoupling(n_users=n_users, n_items=int(item_rows.numel()), max_relative=0.0, reads_items=False,
                            user=None, item=None, tolerance=tol, exhaustive=exhaustive)
    dim = int(out_u.shape[1])
    gen = generator if generator is not None else torch.Generator().manual_seed(0)
    times_items, times_users = jacobian_product(out_i, leaves), jacobian_product(out_u, leaves)
    ratios = torch.zeros(n_users, dtype=torch.float64)
    best_item = torch.zeros(n_users, dtype=torch.int64)
    reads = False
    for u in range(n_users):
        r = torch.randn(dim, generator=gen, dtype=torch.float64).to(device=out_u.device)
        g = _along(out_u, leaves, u, r)  # J_uᵀr
        user_self = float(times_users(g)[u].norm())  # ‖J_uJ_uᵀr‖
        reads = reads or user_self > 0
        cross = times_items(g).norm(dim=1).cpu()  # ‖J_iJ_uᵀr‖ for every item at once
        i = int(cross.argmax())
        best_item[u] = i
        if user_self > 0 and float(cross[i]) > 0:
            item_self = float(times_items(_along(out_i, leaves, i, r))[i].norm())  # ‖J_iJ_iᵀr‖
            ratios[u] = float(cross[i]) / (item_self * user_self) ** 0.5 if item_self > 0 else 0.0
    top = int(ratios.argmax())
    coupled = float(ratios[top]) > tol
    return UserCoupling(
        n_users=n_users, n_items=int(item_rows.numel()), max_relative=float(ratios[top]), reads_items=reads,
        user=int(user_rows[top]) if coupled else None, item=int(item_rows[int(best_item[top])]) if coupled else None,
        tolerance=tol, dim=dim, exhaustive=exhaustive,
    )


def _along(out: torch.Tensor, leaves: dict[str, torch.Tensor], row: int, r: torch.Tensor) -> list[torch.Tensor]:
    """Jᵀr for output ``row`` along the direction ``r``: ∇_θ⟨out[row], r⟩ (zeros where unused)."""
    grads = torch.autograd.grad((out[row] * r.to(out.dtype)).sum(), list(leaves.values()), retain_graph=True,
                                allow_unused=True)
    return [torch.zeros_like(p) if g is None else g for g, p in zip(grads, leaves.values())]
