"""The numeric checks of C2-C4 on a working copy of the live model.

* :func:`second_difference` - C2: f(θ+εv) + f(θ−εv) − 2f(θ) relative to f(θ);
* :func:`cross_jacobian` - C3: the blocks J_i J_jᵀ of the item tower's tangent kernel;
* :func:`gradient_alignment` - C4: |q·∇_qL| / (‖q‖‖∇_qL‖) on a real batch.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.func import jvp, vjp, vmap

from auditor.errors import ProbeError
from auditor.model import LiveModel
from auditor.probes.copies import item_function, tolerance
from auditor.probe_results import CrossJacobian, GradientAlignment, SecondDifference
from auditor.probes.sampling import ProbeBatch

EPSILONS = (1e-1, 1e-2, 1e-3)
"""Relative step sizes of the C2 second difference (‖εv_p‖ = ε‖θ_p‖ per tensor)."""
_TANGENT_BYTES = 64 * 2**20
"""Memory allowed for the batch of parameter-sized tangents in :func:`cross_jacobian`."""


def second_difference(
    live: LiveModel,
    module: torch.nn.Module,
    rows: torch.Tensor,
    *,
    generator: torch.Generator,
    epsilons: tuple[float, ...] = EPSILONS,
    n_directions: int = 3,
) -> SecondDifference:
    """C2: ‖f(θ+εv) + f(θ−εv) − 2f(θ)‖ / ‖f(θ)‖ over random directions v, per ε.

    Each direction is Gaussian, scaled per parameter tensor so that ‖εv_p‖ = ε‖θ_p‖ (a
    tensor that is all zeros gets the tower's RMS scale). Zero for a parameter-linear
    encoder (up to rounding), of order ε² for a curved one.
    """
    f, params = item_function(live, module, rows)
    dtype = next(iter(params.values())).dtype
    total = sum(float(p.double().pow(2).sum()) for p in params.values())
    rms = (total / max(1, sum(p.numel() for p in params.values()))) ** 0.5 or 1.0
    with torch.no_grad():
        base = f(params)
        base_norm = float(torch.linalg.vector_norm(base.double()))
        if base_norm == 0.0:
            raise ProbeError("the item encoder returns all-zero embeddings; C2 cannot be measured")
        relative = np.zeros((len(epsilons), n_directions))
        for d in range(n_directions):
            direction: dict[str, torch.Tensor] = {}
            for name, p in params.items():
                v = torch.randn(p.shape, generator=generator, dtype=torch.float64).to(p.dtype)
                scale = float(torch.linalg.vector_norm(p.double())) or rms * p.numel() ** 0.5
                direction[name] = v * (scale / float(torch.linalg.vector_norm(v.double())))
            for e, eps in enumerate(epsilons):
                plus = f({n: p + eps * direction[n] for n, p in params.items()})
                minus = f({n: p - eps * direction[n] for n, p in params.items()})
                second = (plus.double() + minus.double() - 2 * base.double())
                relative[e, d] = float(torch.linalg.vector_norm(second)) / base_norm
    worst = relative.max(axis=1)
    tol = tolerance(dtype)
    return SecondDifference(
        epsilons=tuple(epsilons), relative=tuple(float(x) for x in worst), n_directions=n_directions,
        n_items=int(rows.numel()), tolerance=tol, linear=bool(np.all(worst <= tol)),
    )


def cross_jacobian(live: LiveModel, module: torch.nn.Module, rows: torch.Tensor) -> CrossJacobian:
    """C3: the blocks B_ij = J_i J_jᵀ (dim × dim) of distinct items ``rows``.

    Columns of J Jᵀ come from one vjp (Jᵀe) and one jvp (J·Jᵀe) per basis vector e,
    batched with vmap in chunks so that only a few parameter-sized tangents are held.
    Reports, over pairs i≠j, ‖B_ij‖_F / sqrt(‖B_ii‖_F‖B_jj‖_F) (for a linear layer over
    features x this is |cos(x_i, x_j)|; 0 exactly for embedding rows) and, per item,
    how far B_ii is from a multiple of the identity.
    """
    f, params = item_function(live, module, rows)
    dtype = next(iter(params.values())).dtype
    out, vjp_fn, *_ = vjp(f, params)  # one forward gives both the output shape and the vjp
    m, dim = int(out.shape[0]), int(out.shape[1])
    n_out = m * dim

    def column(cotangent: torch.Tensor) -> torch.Tensor:
        (tangent,) = vjp_fn(cotangent)
        derivative: torch.Tensor = jvp(f, (params,), (tangent,))[1]
        return derivative

    n_params = sum(p.numel() for p in params.values())
    chunk = max(1, min(n_out, _TANGENT_BYTES // max(1, n_params * out.element_size())))
    basis = torch.eye(n_out, dtype=out.dtype).reshape(n_out, m, dim)
    columns: list[torch.Tensor] = []
    try:
        batched = vmap(column)
        for start in range(0, n_out, chunk):
            columns.append(batched(basis[start : start + chunk]).detach())
    except Exception:  # noqa: BLE001 - encoders vmap cannot batch are probed one vector at a time
        columns = [column(basis[i]).detach().unsqueeze(0) for i in range(n_out)]
    kernel = torch.cat(columns).reshape(m, dim, m, dim).permute(0, 2, 1, 3).double()
    norms = torch.linalg.matrix_norm(kernel)  # (m, m) Frobenius norms of the blocks
    diag = torch.diagonal(norms)
    live_items = diag > 0
    scale = torch.sqrt(torch.outer(diag, diag))
    rel = torch.where(scale > 0, norms / torch.where(scale > 0, scale, 1.0), torch.zeros_like(norms))
    off = rel[~torch.eye(m, dtype=torch.bool) & torch.outer(live_items, live_items)]
    blocks = kernel[torch.arange(m), torch.arange(m)]  # (m, dim, dim)
    alpha = torch.diagonal(blocks, dim1=1, dim2=2).mean(dim=1)
    eye = torch.eye(dim, dtype=torch.float64)
    dev = torch.linalg.matrix_norm(blocks - alpha[:, None, None] * eye) / torch.where(diag > 0, diag, 1.0)
    dev = dev[live_items]
    tol = tolerance(dtype)
    max_off = float(off.max()) if off.numel() else None
    max_dev = float(dev.max()) if dev.numel() else None
    return CrossJacobian(
        items=tuple(int(r) for r in rows.tolist()),
        n_items=m,
        n_pairs=int(off.numel()) // 2,
        max_offdiag_relative=max_off,
        median_offdiag_relative=float(np.median(off.numpy())) if off.numel() else None,
        max_isotropy_deviation=max_dev,
        n_items_without_parameters=int((~live_items).sum()),
        tolerance=tol,
        shared=None if max_off is None else bool(max_off > tol),
        isotropic=None if max_dev is None else bool(max_dev <= tol),
    )


def gradient_alignment(
    live: LiveModel, module: torch.nn.Module, batch: ProbeBatch
) -> GradientAlignment:
    """C4: |q_j·g_j| / (‖q_j‖‖g_j‖), g_j = ∇_{q_j}L, per item slot of a real batch.

    Zero (up to rounding) when the loss depends on each item embedding only through its
    direction; slots whose gradient vanishes are left out.
    """
    users = torch.as_tensor(batch.users, dtype=torch.int64)
    items = torch.as_tensor(batch.items, dtype=torch.int64)
    with torch.no_grad():
        u = live.encode_users(module, users)
        q = live.encode_items(module, items)
    q = q.detach().clone().requires_grad_(True)
    loss = live.loss(u.detach(), q)
    (g,) = torch.autograd.grad(loss, q)
    qd, gd = q.detach().double(), g.double()
    gn = torch.linalg.vector_norm(gd, dim=1)
    qn = torch.linalg.vector_norm(qd, dim=1)
    ok = (gn > 0) & (qn > 0)
    align = ((qd * gd).sum(dim=1).abs() / (qn * gn))[ok]
    tol = tolerance(q.dtype)
    n = int(align.numel())
    return GradientAlignment(
        n=n,
        median=float(np.median(align.numpy())) if n else None,
        max=float(align.max()) if n else None,
        tolerance=tol,
        orthogonal=bool(float(align.max()) <= tol) if n else None,
    )
