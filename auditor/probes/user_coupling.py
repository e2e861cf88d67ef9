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
from auditor.probes.jacobian import jacobian_product, vjp

MAX_COLUMNS = 1024
"""Reverse-pass pairs (user, output coordinate) at most, as for the item-item kernel."""


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
    *, generator: torch.Generator | None = None,
) -> UserCoupling:
    """The largest ‖J_iJ_uᵀ‖_F/√(‖J_iJ_iᵀ‖_F‖J_uJ_uᵀ‖_F) over ``user_rows`` × ``item_rows``
    (J: Jacobians with respect to the item parameters), on a seeded sample of output
    coordinates (the same for every user: the dim/k scaling cancels in the ratio). A user
    tower that reads no item parameter gives 0 without a pass."""
    f_items, params = item_function(live, module, item_rows)
    device = module_device(module)
    users_fn = _UserEncoder(live, module)
    leaves = {name: p.detach().requires_grad_(True) for name, p in params.items()}
    out_u = functional_call(users_fn, leaves, (user_rows.to(device),))
    out_i = f_items(leaves)
    tol = tolerance(probe_dtype(next(iter(params.values())).dtype, out_i.dtype))
    n_users = int(user_rows.numel())
    if not out_u.requires_grad:  # nothing in the user tower depends on an item parameter
        return UserCoupling(n_users=n_users, n_items=int(item_rows.numel()), max_relative=0.0, reads_items=False,
                            user=None, item=None, tolerance=tol)
    dim = int(out_u.shape[1])
    k = min(dim, max(1, MAX_COLUMNS // max(1, n_users)))
    gen = generator if generator is not None else torch.Generator().manual_seed(0)
    columns = torch.sort(torch.randperm(dim, generator=gen)[:k]).values.tolist() if k < dim else list(range(dim))
    times_items, times_users = jacobian_product(out_i, leaves), jacobian_product(out_u, leaves)
    cross = torch.zeros(n_users, int(out_i.shape[0]), dtype=torch.float64)
    user_self = torch.zeros(n_users, dtype=torch.float64)
    for u in range(n_users):
        for c in columns:
            g = vjp(out_u, leaves, u, int(c))
            cross[u] += times_items(g).cpu().pow(2).sum(dim=1)
            user_self[u] += times_users(g)[u].cpu().pow(2).sum()
    reads = bool((user_self > 0).any())
    best_item = cross.argmax(dim=1)
    ratios = torch.zeros(n_users, dtype=torch.float64)
    for u in torch.nonzero(cross.max(dim=1).values > 0).flatten().tolist():
        i = int(best_item[u])
        item_self = sum(float(times_items(vjp(out_i, leaves, i, int(c)))[i].cpu().pow(2).sum()) for c in columns)
        if item_self > 0:
            ratios[u] = float(cross[u, i].sqrt()) / (item_self * float(user_self[u])) ** 0.25
    top = int(ratios.argmax())
    coupled = float(ratios[top]) > tol
    return UserCoupling(
        n_users=n_users, n_items=int(item_rows.numel()), max_relative=float(ratios[top]), reads_items=reads,
        user=int(user_rows[top]) if coupled else None, item=int(item_rows[int(best_item[top])]) if coupled else None,
        tolerance=tol, n_coordinates=len(columns), dim=dim,
    )
