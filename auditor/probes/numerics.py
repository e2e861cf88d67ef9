"""The numeric checks of C2-C4 on a working copy of the live model.

* :func:`second_difference` - C2: f(θ+εv) + f(θ−εv) − 2f(θ) relative to f(θ);
* :func:`cross_jacobian` - C3: the blocks J_i J_jᵀ of the item tower's tangent kernel;
* :func:`gradient_alignment` - C4: |q·∇_qL| / (‖q‖‖∇_qL‖) on a real batch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.overrides import TorchFunctionMode

from auditor.errors import ProbeError
from auditor.model import LiveModel
from auditor.probes.copies import item_function, module_device, one_dtype, probe_dtype, tolerance
from auditor.probes.jacobian import kernel_columns, sampled_kernel
from auditor.probes.live_contract import plain_call, plain_loss, plain_rows
from auditor.probe_results import CrossJacobian, GradientAlignment, SecondDifference
from auditor.probes.sampling import ProbeBatch

EPSILONS = (1e-1, 1e-2, 1e-3)
"""Relative step sizes of the C2 second difference (‖εv_p‖ = ε‖θ_p‖ per tensor)."""
_TANGENT_BYTES = 64 * 2**20
"""Memory allowed for the Jacobian rows :func:`cross_jacobian` holds (beyond it, one tangent at a time)."""
_LEVEL_EPS = 8.0
"""The rounding level in eps of the tower's coarsest dtype (:func:`rounding_level`)."""
MAX_KERNEL_COLUMNS = 64
"""Columns of J Jᵀ :func:`cross_jacobian` computes (two reverse passes each)."""


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
                v = torch.randn(p.shape, generator=generator, dtype=torch.float64).to(p.device, p.dtype)
                scale = float(torch.linalg.vector_norm(p.double())) or rms * p.numel() ** 0.5
                direction[name] = v * (scale / float(torch.linalg.vector_norm(v.double())))
            for e, eps in enumerate(epsilons):
                plus = f({n: p + eps * direction[n] for n, p in params.items()})
                minus = f({n: p - eps * direction[n] for n, p in params.items()})
                second = (plus.double() + minus.double() - 2 * base.double())
                relative[e, d] = float(torch.linalg.vector_norm(second)) / base_norm
    worst = relative.max(axis=1)
    out_dtype = probe_dtype(dtype, base.dtype)
    tol = tolerance(out_dtype)
    level = rounding_level(narrowest_dtype(f, params, base.dtype))
    flat = not bool(np.all(worst <= tol)) and is_rounding(worst, epsilons, level, tol)
    return SecondDifference(
        epsilons=tuple(epsilons), relative=tuple(float(x) for x in worst), n_directions=n_directions,
        n_items=int(rows.numel()), tolerance=tol, linear=bool(np.all(worst <= tol)) or flat,
        output_dtype=str(base.dtype).removeprefix("torch."), flat_over_epsilon=flat, rounding_level=level,
    )


class _FloatDtypes(TorchFunctionMode):
    """Records the floating dtype of every tensor the torch calls inside it return."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[torch.dtype] = set()

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for value in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(value, torch.Tensor) and value.is_floating_point():
                self.seen.add(value.dtype)
        return out


def narrowest_dtype(f: Any, params: dict[str, torch.Tensor], output: torch.dtype) -> torch.dtype:
    """The coarsest floating dtype the encoder computes in (a ``.float()`` or a half-precision
    layer behind a float64 output shows here, never in the output), from one forward pass."""
    recorder = _FloatDtypes()
    try:
        with torch.no_grad(), recorder:
            f(params)
    except Exception:  # noqa: BLE001 - an encoder the mode upsets: float32, the old assumption
        recorder.seen.add(torch.float32)
    return max(recorder.seen | {output}, key=lambda d: torch.finfo(d).eps)


def rounding_level(dtype: torch.dtype) -> float:
    """The largest second difference, relative to ‖f‖, that rounding in ``dtype`` (at least
    float32, which an op the recording cannot see may compute in) can make: each of the
    three outputs carries a relative error of at most eps/2 per coordinate, so the sum is
    within 2·eps; eight eps leave room for the error earlier layers pass on."""
    return _LEVEL_EPS * max(torch.finfo(dtype).eps, torch.finfo(torch.float32).eps)


def is_rounding(
    worst: np.ndarray, epsilons: tuple[float, ...], level: float | None = None, tol: float = 1e-9,
) -> bool:
    """Whether second differences above the tolerance ``tol`` are rounding, not curvature.

    Rounding is bounded by ``level`` (:func:`rounding_level` of the tower's coarsest dtype,
    :data:`_LEVEL_EPS` of its eps) at every ε and does not follow ε; curvature scales as ε²
    (×100 per decade). Figures all within ``level`` are rounding unless they show curvature:
    those measurable (above ``tol``) shrink as ε² (at least ε^1.5) over every step; or one
    step does, from a figure above one eps (a bfloat16 tower whose small-ε steps sit on its
    rounding floor); or the largest-ε figure is above two eps and more than twice the
    smallest-ε one (rounding there is about 0.7 eps and does not grow with ε). Exact zeros,
    where a step εv rounds away below half a unit in the last place, are rounding too. Two
    decades of ε are needed.
    """
    level = rounding_level(torch.float32) if level is None else level
    if len(epsilons) < 2 or max(epsilons) / min(epsilons) < 100 or float(worst.max()) > level:
        return False
    eps_unit = level / _LEVEL_EPS
    order = np.argsort(np.asarray(epsilons))[::-1]
    eps, figs = np.asarray(epsilons, dtype=float)[order], np.asarray(worst, dtype=float)[order]
    steps = [(i, i + 1) for i in range(len(eps) - 1) if figs[i] > tol and figs[i + 1] > tol]
    shrinks = [figs[i] / figs[j] >= (eps[i] / eps[j]) ** 1.5 for i, j in steps]
    every_step = bool(steps) and all(shrinks)
    one_step_above_eps = any(ok and figs[i] > eps_unit for ok, (i, _) in zip(shrinks, steps))
    grows_past_floor = figs[0] > 2 * eps_unit and figs[0] > 2 * figs[-1]
    return not (every_step or one_step_above_eps or grows_past_floor)


def cross_jacobian(
    live: LiveModel,
    module: torch.nn.Module,
    rows: torch.Tensor,
    *,
    generator: torch.Generator | None = None,
    max_columns: int = MAX_KERNEL_COLUMNS,
    budget_bytes: int = _TANGENT_BYTES,
) -> CrossJacobian:
    """C3: the blocks B_ij = J_i J_jᵀ of distinct items ``rows``, on sampled coordinates.

    Each column of J Jᵀ costs two reverse passes, so at most ``max_columns``
    are computed: every output coordinate when m·dim fits, else the same seeded sample of
    k coordinates for every item, whose whole columns B_ij[:, S] (every row coordinate,
    :func:`~auditor.probes.jacobian.kernel_columns`) stand for the blocks: a uniform column
    sample makes dim/k times their squared Frobenius norm, and their diagonal entries'
    sum, unbiased estimates of the whole block's, so the ratios below estimate the full
    figures without the bias of a principal sub-block B_ij[S, S] (whose diagonal carries
    more of the block's mass than the whole block's diagonal does); an embedding row's 0
    and a linear layer's |cos(x_i, x_j)| come out exactly either way. Reports, over pairs
    i≠j, ‖B_ij‖_F / sqrt(‖B_ii‖_F‖B_jj‖_F) (for a linear layer over features x this is
    |cos(x_i, x_j)|; 0 exactly for embedding rows) and, per item, how far B_ii is from a
    multiple of the identity; when coordinates were sampled, the jackknife standard
    errors of both maxima over the sampled columns state the sampling uncertainty.
    """
    f, params = item_function(live, module, rows)
    dtype = next(iter(params.values())).dtype
    with torch.no_grad():
        sample = f(params)
    dim = int(sample.shape[1])
    m = int(rows.numel())
    k = min(dim, max(1, max_columns // max(1, m)))
    if k < dim:
        gen = generator if generator is not None else torch.Generator().manual_seed(0)
        columns = torch.sort(torch.randperm(dim, generator=gen)[:k]).values
        kernel = kernel_columns(f, params, columns)
    else:
        columns = torch.arange(dim)
        kernel, _ = sampled_kernel(f, params, None, budget_bytes=budget_bytes)
    off, dev, live_items = _kernel_summaries(kernel, columns)
    max_off = float(off.max()) if off.numel() else None
    max_dev = float(dev.max()) if dev.numel() else None
    se_off, se_dev = _jackknife(kernel, columns) if k < dim else (0.0, 0.0)
    tol = tolerance(probe_dtype(dtype, sample.dtype))
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
        dim=dim,
        n_coordinates=k,
        max_offdiag_standard_error=None if max_off is None else se_off,
        max_isotropy_standard_error=None if max_dev is None else se_dev,
    )


def _kernel_summaries(
    kernel: torch.Tensor, columns: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(normalised off-diagonal block norms, per-item isotropy deviations, items with
    parameters) of a kernel K[i, j, s, t] = B_ij[s, c_t] over the columns ``columns`` (all
    of them: the blocks whole). The isotropy deviation is ‖B − αI‖_F / ‖B‖_F with α the
    mean diagonal entry, both norms over the same columns (the dim/k scale cancels)."""
    m, k = int(kernel.shape[0]), int(kernel.shape[3])
    norms = torch.linalg.matrix_norm(kernel)  # (m, m) Frobenius norms of the (column-sampled) blocks
    diag = torch.diagonal(norms)
    live_items = diag > 0
    scale = torch.sqrt(torch.outer(diag, diag))
    rel = torch.where(scale > 0, norms / torch.where(scale > 0, scale, 1.0), torch.zeros_like(norms))
    off = rel[~torch.eye(m, dtype=torch.bool) & torch.outer(live_items, live_items)]
    blocks = kernel[torch.arange(m), torch.arange(m)]  # (m, dim, k)
    eye = torch.zeros(int(kernel.shape[2]), k, dtype=torch.float64)
    eye[columns, torch.arange(k)] = 1.0  # I's columns at the sampled coordinates
    alpha = blocks[:, columns, torch.arange(k)].mean(dim=1)
    dev = torch.linalg.matrix_norm(blocks - alpha[:, None, None] * eye) / torch.where(diag > 0, diag, 1.0)
    return off, dev[live_items], live_items


def _jackknife(kernel: torch.Tensor, columns: torch.Tensor) -> tuple[float, float]:
    """Jackknife standard errors of the largest off-diagonal ratio and isotropy
    deviation over the sampled columns (each left out once)."""
    k = int(kernel.shape[3])
    if k < 2:
        return float("nan"), float("nan")
    stats = np.zeros((k, 2))
    for s in range(k):
        # Integer indices: boolean masks call nonzero(), which on busy cores waits for
        # torch's thread pool (0.35 s for these 8 x 8 x 8 x 8 blocks instead of 0.03 s).
        keep = torch.cat([torch.arange(s), torch.arange(s + 1, k)])
        off, dev, _ = _kernel_summaries(kernel.index_select(3, keep), columns.index_select(0, keep))
        stats[s] = (float(off.max()) if off.numel() else 0.0, float(dev.max()) if dev.numel() else 0.0)
    se = np.sqrt((k - 1) / k * ((stats - stats.mean(axis=0)) ** 2).sum(axis=0))
    return float(se[0]), float(se[1])


def gradient_alignment(
    live: LiveModel, module: torch.nn.Module, batch: ProbeBatch
) -> GradientAlignment:
    """C4: |q_j·g_j| / (‖q_j‖‖g_j‖), g_j = ∇_{q_j}L, per item slot of a real batch.

    Zero (up to rounding) when the loss depends on each item embedding only through its
    direction; slots whose gradient vanishes, or is at rounding level
    (:func:`gradient_rounding_floor`), are left out and counted.
    """
    users = torch.as_tensor(batch.users, dtype=torch.int64, device=module_device(module))
    items = torch.as_tensor(batch.items, dtype=torch.int64, device=module_device(module))
    with torch.no_grad():  # plain calls of the live model's code: a failure there is its own (live_contract)
        u = plain_rows("encode_users", plain_call("encode_users", lambda: live.encode_users(module, users)), users, "user")
        q = plain_rows("encode_items", plain_call("encode_items", lambda: live.encode_items(module, items)), items, "item")
        u, q = one_dtype(u, q)
    q = q.detach().clone().requires_grad_(True)
    loss = plain_loss(plain_call("loss", lambda: live.loss(u.detach(), q)), len(items))
    (g,) = torch.autograd.grad(loss, q)
    qd, gd = q.detach().double(), g.double()
    gn = torch.linalg.vector_norm(gd, dim=1)
    qn = torch.linalg.vector_norm(qd, dim=1)
    tol = tolerance(q.dtype)
    finite = torch.isfinite(gn) & torch.isfinite(qn)
    if not bool(finite.any()):
        raise ProbeError(f"the loss's gradient is not finite in any of the {int(q.shape[0])} item slots of the probe batch")
    nonzero = (gn > 0) & (qn > 0) & finite
    ok = nonzero & (qn * gn > gradient_rounding_floor(float(loss.detach()), int(q.shape[0]), q.dtype))
    align = ((qd * gd).sum(dim=1).abs() / (qn * gn))[ok]
    n, n_rounding = int(align.numel()), int((nonzero & ~ok).sum())
    return GradientAlignment(
        n=n,
        median=float(np.median(align.cpu().numpy())) if n else None,
        max=float(align.max()) if n else None,
        tolerance=tol,
        orthogonal=bool(float(align.max()) <= tol) if n else None,
        n_rounding=n_rounding,
        unmeasured=None if n or not n_rounding else (
            f"the gradient of all {n_rounding} item slots is at rounding level (‖q‖‖∇_qL‖ at most "
            f"{float((qn * gn)[nonzero].max()):.1e} beside a loss of {float(loss.detach()):.3g}), so it has no direction "
            "to grade" + (": in one dimension a loss of q's direction alone (cosine) has a gradient of exactly 0"
                          if q.shape[1] == 1 else "")
        ),
    )


def gradient_rounding_floor(loss: float, n_slots: int, dtype: torch.dtype) -> float:
    """Below this ‖q_j‖·‖∇_{q_j}L‖ a slot's gradient is rounding, with no direction to grade.

    A loss of q's direction alone has q·∇_qL = 0 exactly (Euler, degree 0), so what its
    computed gradient shows along q is rounding, about eps·|L|/n per slot of an n-slot
    batch mean. That rounding stays a tenth of the tolerance only while ‖q‖‖∇_qL‖ is at
    least 10·eps/tolerance times |L|/n; below it, as in one dimension (where the cosine
    loss's gradient is exactly 0, every vector being parallel to q), |cos(q, ∇_qL)| is
    noise and would grade C4 violated.
    """
    eps = torch.finfo(dtype).eps if dtype.is_floating_point else torch.finfo(torch.float32).eps
    return 10.0 * eps / tolerance(dtype) * abs(loss) / max(1, n_slots)
