"""The item tower's tangent kernel J Jᵀ on sampled items and output coordinates, with
plain autograd (reverse mode, and forward mode when the Jacobian rows do not fit even on
the parameters they move).

torch.func's transforms are not used: its vjp imports torch._dynamo (and with it sympy
and the compiler stack, about two seconds) even when nothing is compiled, and a small
audit should not pay that.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import torch
import torch.autograd.forward_ad as fwad

ItemFunction = Callable[[dict[str, torch.Tensor]], torch.Tensor]

_DUAL_LEVEL = threading.Lock()
"""torch's forward-AD level is one for the whole process, not per thread: two audits in
threads would nest it ("Nested forward mode AD is not supported") and lose the C3 probe
at random (QA Api F2), so one forward-mode pass runs at a time."""


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
    each column of K is one reverse pass and one forward-mode pass (J·Jᵀe), holding a
    single parameter-sized tangent; torch's forward mode loads its decompositions on
    first use (0.2 s), which the Gram paths never pay.
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
            torch.cat([g.reshape(-1) for g in _vjp(out, leaves, i, c)], out=rows[r])
    else:
        rows = _rows_on_their_support(out, leaves, pairs, budget_bytes)
    if rows is not None:
        kernel = (rows @ rows.T).reshape(m, k, m, k)
    else:
        kernel = torch.empty(len(pairs), m, k, dtype=torch.float64, device=out.device)
        for r, (i, c) in enumerate(pairs):
            kernel[r] = _jvp(f, leaves, _vjp(out, leaves, i, c), (m, dim))[:, cols]
        kernel = kernel.reshape(m, k, m, k)
    return kernel.permute(0, 2, 1, 3).cpu(), dim  # small (m, m, k, k): summarised on the host


def kernel_columns(f: ItemFunction, params: dict[str, torch.Tensor], columns: torch.Tensor) -> torch.Tensor:
    """K[i, j, s, t] = (J_i J_jᵀ)[s, c_t] in float64: the kernel's whole columns at the
    output coordinates ``columns`` of every item, every row coordinate s kept (dim × k
    blocks). Each column is one reverse pass (Jᵀe) and one forward-mode pass (J·Jᵀe),
    which yields the column over every item and coordinate at once; a column sample, unlike
    a principal sub-block, keeps each sampled column's whole mass, so the squared Frobenius
    norm of a block scaled by dim/k is an unbiased estimate of the whole block's."""
    leaves = {name: p.detach().requires_grad_(True) for name, p in params.items()}
    out = f(leaves)
    m, dim = int(out.shape[0]), int(out.shape[1])
    k = int(columns.numel())
    kernel = torch.empty(m, k, m, dim, dtype=torch.float64, device=out.device)
    for i in range(m):
        for t, c in enumerate(columns.tolist()):
            kernel[i, t] = _jvp(f, leaves, _vjp(out, leaves, i, int(c)), (m, dim))
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
        row = torch.cat([g.reshape(-1) for g in _vjp(out, leaves, i, c)]).double().cpu().numpy()
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


def _vjp(out: torch.Tensor, leaves: dict[str, torch.Tensor], i: int, c: int) -> list[torch.Tensor]:
    """Jᵀe for the basis vector of item ``i``'s coordinate ``c``: ∇_θ out[i, c]."""
    grads = torch.autograd.grad(out[i, c], list(leaves.values()), retain_graph=True, allow_unused=True)
    return [torch.zeros_like(p) if g is None else g for g, p in zip(grads, leaves.values())]


def _jvp(
    f: ItemFunction, leaves: dict[str, torch.Tensor], tangent: list[torch.Tensor], shape: tuple[int, int]
) -> torch.Tensor:
    """J·v by forward-mode AD: one forward pass with dual parameters, in float64."""
    with _DUAL_LEVEL, fwad.dual_level():
        duals = {
            name: fwad.make_dual(p.detach(), t.to(p.dtype))  # type: ignore[no-untyped-call]
            for (name, p), t in zip(leaves.items(), tangent)
        }
        derivative = fwad.unpack_dual(f(duals)).tangent  # type: ignore[no-untyped-call]
    if derivative is None:  # the output does not depend on the parameters
        return torch.zeros(shape, dtype=torch.float64, device=next(iter(leaves.values())).device)
    return derivative.detach().double()
