"""The item tower's tangent kernel J Jᵀ on sampled items and output coordinates, with
plain reverse-mode autograd: Jacobian rows Jᵀe, and products J·v by differentiating the
linear map u ↦ Jᵀu once more (the double-backward trick).

Neither torch.func nor torch's forward mode is used: torch.func's vjp imports
torch._dynamo (with sympy and the compiler stack, about two seconds) even when nothing is
compiled, and forward mode loads its decompositions on first use (0.1-0.2 s) and keeps
one dual level per process, which two audits in threads would nest (QA Api F2). A small
audit pays neither.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

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

    K is the Gram matrix of the Jacobian rows Jᵀe (one reverse pass each) when they fit
    ``budget_bytes``: whole, or restricted to the parameters any of them moves (an id
    table's row moves only its own entries, so a large table's rows fit too). Otherwise
    each column of K is two reverse passes (Jᵀe, then J·Jᵀe), holding a single
    parameter-sized vector.
    """
    leaves = {name: p.detach().requires_grad_(True) for name, p in params.items()}
    out = f(leaves)
    m, dim = int(out.shape[0]), int(out.shape[1])
    cols = torch.arange(dim) if columns is None else columns
    k = int(cols.numel())
    pairs = [(i, int(c)) for i in range(m) for c in cols]
    n_params = sum(p.numel() for p in leaves.values())
    rows: torch.Tensor | None
    if len(pairs) * n_params * 8 <= budget_bytes:
        rows = torch.empty(len(pairs), n_params, dtype=torch.float64, device=out.device)
        for r, (i, c) in enumerate(pairs):
            torch.cat([g.reshape(-1) for g in vjp(out, leaves, i, c)], out=rows[r])
    else:
        rows = _rows_on_their_support(out, leaves, pairs, budget_bytes)
    if rows is not None:
        kernel = (rows @ rows.T).reshape(m, k, m, k)
    else:
        times_j = jacobian_product(out, leaves)
        kernel = torch.empty(len(pairs), m, k, dtype=torch.float64, device=out.device)
        for r, (i, c) in enumerate(pairs):
            kernel[r] = times_j(vjp(out, leaves, i, c))[:, cols]
        kernel = kernel.reshape(m, k, m, k)
    return kernel.permute(0, 2, 1, 3).cpu(), dim  # small (m, m, k, k): summarised on the host


def kernel_columns(f: ItemFunction, params: dict[str, torch.Tensor], columns: torch.Tensor) -> torch.Tensor:
    """K[i, j, s, t] = (J_i J_jᵀ)[s, c_t] in float64: the kernel's whole columns at the
    output coordinates ``columns`` of every item, every row coordinate s kept (dim × k
    blocks). Each column is two reverse passes (Jᵀe, then J·Jᵀe), the second of which
    yields the column over every item and coordinate at once; a column sample, unlike
    a principal sub-block, keeps each sampled column's whole mass, so the squared Frobenius
    norm of a block scaled by dim/k is an unbiased estimate of the whole block's."""
    leaves = {name: p.detach().requires_grad_(True) for name, p in params.items()}
    out = f(leaves)
    m, dim = int(out.shape[0]), int(out.shape[1])
    k = int(columns.numel())
    times_j = jacobian_product(out, leaves)
    kernel = torch.empty(m, k, m, dim, dtype=torch.float64, device=out.device)
    for i in range(m):
        for t, c in enumerate(columns.tolist()):
            kernel[i, t] = times_j(vjp(out, leaves, i, int(c)))
    return kernel.permute(2, 0, 3, 1).cpu()  # (j, i, s, t): B_ji[s, c_t]


def _rows_on_their_support(
    out: torch.Tensor, leaves: dict[str, torch.Tensor], pairs: list[tuple[int, int]], budget_bytes: int
) -> torch.Tensor | None:
    """The Jacobian rows Jᵀe of ``pairs`` (on the host, float64) restricted to the
    parameters at least one of them moves, or None as soon as those exceed
    ``budget_bytes``. The parameters left out are zero in every row, so the rows' Gram
    matrix is unchanged."""
    kept: list[tuple[np.ndarray, np.ndarray]] = []
    held = 0
    for i, c in pairs:
        row = torch.cat([g.reshape(-1) for g in vjp(out, leaves, i, c)]).double().cpu().numpy()
        at = np.flatnonzero(row != 0)  # 15x np.flatnonzero(row); torch.nonzero waits for its pool
        held += at.size * 16
        if held > budget_bytes:
            return None
        kept.append((at, row[at]))
    support = np.unique(np.concatenate([at for at, _ in kept]))
    if len(pairs) * support.size * 8 > budget_bytes:
        return None
    rows = np.zeros((len(pairs), support.size))
    for r, (at, values) in enumerate(kept):
        rows[r, np.searchsorted(support, at)] = values
    return torch.from_numpy(rows)


def vjp(out: torch.Tensor, leaves: dict[str, torch.Tensor], i: int, c: int) -> list[torch.Tensor]:
    """Jᵀe for the basis vector of item ``i``'s coordinate ``c``: ∇_θ out[i, c]."""
    grads = torch.autograd.grad(out[i, c], list(leaves.values()), retain_graph=True, allow_unused=True)
    return [torch.zeros_like(p) if g is None else g for g, p in zip(grads, leaves.values())]


def jacobian_product(
    out: torch.Tensor, leaves: dict[str, torch.Tensor]
) -> Callable[[list[torch.Tensor]], torch.Tensor]:
    """v ↦ J·v (float64, shaped like ``out``) by the double-backward trick: Jᵀu is linear
    in a dummy u, so the gradient of ⟨Jᵀu, v⟩ with respect to u is J·v. The graph of
    u ↦ Jᵀu is built once; each product is then one reverse pass through it."""
    u = torch.zeros_like(out, requires_grad=True)
    # ∇_θ⟨out, u⟩ rather than grad_outputs=u: torch checks a given grad_outputs' shape
    # with torch.fx's symbolic shapes, which imports sympy (a second).
    grads = torch.autograd.grad((out * u).sum(), list(leaves.values()), create_graph=True, allow_unused=True)
    moved = [(g, p) for g, p in zip(grads, leaves.values()) if g is not None and g.requires_grad]

    def times_j(v: list[torch.Tensor]) -> torch.Tensor:
        by_leaf = {id(p): t for p, t in zip(leaves.values(), v)}
        if not moved:  # the output does not depend on the parameters
            return torch.zeros(out.shape, dtype=torch.float64, device=out.device)
        inner = torch.stack([(g * by_leaf[id(p)].to(g.dtype)).sum().to(out.dtype) for g, p in moved]).sum()
        (product,) = torch.autograd.grad(inner, u, retain_graph=True)
        return product.detach().double()

    return times_j
