"""The item tower's tangent kernel J Jᵀ on sampled items and output coordinates, with
plain autograd (reverse mode, and forward mode when the Jacobian rows do not fit).

torch.func's transforms are not used: its vjp imports torch._dynamo (and with it sympy
and the compiler stack, about two seconds) even when nothing is compiled, and a small
audit should not pay that.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.autograd.forward_ad as fwad

ItemFunction = Callable[[dict[str, torch.Tensor]], torch.Tensor]


def sampled_kernel(
    f: ItemFunction,
    params: dict[str, torch.Tensor],
    columns: torch.Tensor | None,
    *,
    budget_bytes: int,
) -> tuple[torch.Tensor, int]:
    """(K, dim): K[i, j, s, t] = (J_i J_jᵀ)[c_s, c_t] in float64 over the output
    coordinates ``columns`` (every coordinate when None), and the output width.

    When the Jacobian rows of the sampled coordinates fit ``budget_bytes`` they are held
    and K is one matrix product; otherwise each column of K is one reverse pass (Jᵀe)
    and one forward-mode pass (J·Jᵀe), holding a single parameter-sized tangent.
    """
    leaves = {name: p.detach().requires_grad_(True) for name, p in params.items()}
    out = f(leaves)
    m, dim = int(out.shape[0]), int(out.shape[1])
    cols = torch.arange(dim) if columns is None else columns
    k = int(cols.numel())
    n_params = sum(p.numel() for p in leaves.values())
    if m * k * n_params * 8 <= budget_bytes:
        rows = torch.empty(m * k, n_params, dtype=torch.float64, device=out.device)
        for r, (i, c) in enumerate((i, int(c)) for i in range(m) for c in cols):
            torch.cat([g.reshape(-1) for g in _vjp(out, leaves, i, c)], out=rows[r])
        kernel = (rows @ rows.T).reshape(m, k, m, k)
    else:
        kernel = torch.empty(m * k, m, k, dtype=torch.float64, device=out.device)
        for r, (i, c) in enumerate((i, int(c)) for i in range(m) for c in cols):
            kernel[r] = _jvp(f, leaves, _vjp(out, leaves, i, c), (m, dim))[:, cols]
        kernel = kernel.reshape(m, k, m, k)
    return kernel.permute(0, 2, 1, 3).cpu(), dim  # small (m, m, k, k): summarised on the host


def _vjp(out: torch.Tensor, leaves: dict[str, torch.Tensor], i: int, c: int) -> list[torch.Tensor]:
    """Jᵀe for the basis vector of item ``i``'s coordinate ``c``: ∇_θ out[i, c]."""
    grads = torch.autograd.grad(out[i, c], list(leaves.values()), retain_graph=True, allow_unused=True)
    return [torch.zeros_like(p) if g is None else g for g, p in zip(grads, leaves.values())]


def _jvp(
    f: ItemFunction, leaves: dict[str, torch.Tensor], tangent: list[torch.Tensor], shape: tuple[int, int]
) -> torch.Tensor:
    """J·v by forward-mode AD: one forward pass with dual parameters, in float64."""
    with fwad.dual_level():
        duals = {
            name: fwad.make_dual(p.detach(), t.to(p.dtype))  # type: ignore[no-untyped-call]
            for (name, p), t in zip(leaves.items(), tangent)
        }
        derivative = fwad.unpack_dual(f(duals)).tangent  # type: ignore[no-untyped-call]
    if derivative is None:  # the output does not depend on the parameters
        return torch.zeros(shape, dtype=torch.float64, device=next(iter(leaves.values())).device)
    return derivative.detach().double()
