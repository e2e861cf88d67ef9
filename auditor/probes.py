"""Numeric probes on a live two-tower model (SCIENCE.md §1-3, §6).

Every probe works on a deep copy of ``live.module`` (cast to float64 where the model
allows it), never on the user's model or files:

* :func:`second_difference` - C2: f(θ+εv) + f(θ−εv) − 2f(θ) relative to f(θ);
* :func:`cross_jacobian` - C3: the blocks J_i J_jᵀ of the item tower's tangent kernel;
* :func:`gradient_alignment` - C4: |q·∇_qL| / (‖q‖‖∇_qL‖) on a real batch;
* :func:`update_step` - one (or a few) real optimisation steps: update angles θ_i, the
  Pythagorean residual and the per-update growth c/s² = ‖Δq‖²/‖q‖² (eq. 3).

:func:`run_probes` runs them all and :meth:`ProbeOutcome.to_dict` gives CLI.md's
``probes`` section. All randomness comes from the ``seed`` argument.
"""

from __future__ import annotations

import copy
import io
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch.func import functional_call, jvp, vjp, vmap

from auditor.errors import ProbeError
from auditor.model import InteractionPairs, LiveModel, ModelBundle
from auditor.progress import SILENT, Progress

ANGLE_BIN_WIDTH = 4.0
"""Histogram bins of 4° put 90° in the middle of the bin [88°, 92°)."""
EPSILONS = (1e-1, 1e-2, 1e-3)
"""Relative step sizes of the C2 second difference (‖εv_p‖ = ε‖θ_p‖ per tensor)."""
NUMERIC_PARAMETER_LIMIT = 5_000_000
"""Item towers with more parameters skip the C2/C3 numerics (memory: one tangent per vector)."""
_TANGENT_BYTES = 64 * 2**20
"""Memory allowed for the batch of parameter-sized tangents in :func:`cross_jacobian`."""

_NONLINEAR = {
    "relu", "relu6", "leakyrelu", "prelu", "rrelu", "elu", "selu", "celu", "gelu", "silu",
    "mish", "sigmoid", "tanh", "softplus", "softsign", "hardtanh", "hardswish",
    "hardsigmoid", "logsigmoid", "softmax", "logsoftmax", "glu", "tanhshrink",
    "layernorm", "rmsnorm", "groupnorm", "batchnorm1d", "batchnorm2d", "instancenorm1d",
    "multiheadattention", "transformerencoderlayer", "transformerencoder",
    "transformerdecoderlayer", "lstm", "gru", "rnn", "bilinear",
}
_LINEAR = {"linear", "lazylinear", "conv1d", "conv2d"}
_EMBEDDING = {"embedding", "embeddingbag"}
_NEUTRAL = {"dropout", "identity", "flatten", "unflatten", "sequential", "modulelist",
            "moduledict", "alphadropout"}


def tolerance(dtype: torch.dtype) -> float:
    """Relative tolerance below which a probe quantity counts as zero for ``dtype``."""
    return 1e-9 if dtype == torch.float64 else 1e-4


# ---------------------------------------------------------------------------- batches


@dataclass
class ProbeBatch:
    """Matched (user row, item row) pairs for one probe step."""

    users: np.ndarray
    items: np.ndarray
    source: str


def sample_batches(
    bundle: ModelBundle,
    pairs: InteractionPairs | None,
    live: LiveModel,
    *,
    size: int,
    steps: int,
    rng: np.random.Generator,
) -> list[ProbeBatch]:
    """``steps`` batches of real training pairs (or, without a log, sampled pairs).

    Users of the log are mapped to user-table rows through ``bundle.user_ids``; without
    ids, integer user ids inside the table's range are taken as rows. Without a usable
    log, items are drawn by training frequency (when known) and users uniformly.
    """
    n_users = _n_users(bundle, live)
    if pairs is None:  # a popaudit checkpoint records its training pairs
        pairs = getattr(bundle, "train_pairs", None)
    users_items = _log_pairs(bundle, pairs, n_users)
    batches: list[ProbeBatch] = []
    for _ in range(steps):
        if users_items is not None:
            users, items, source = users_items
            take = rng.choice(len(items), size=min(size, len(items)), replace=False)
            batches.append(ProbeBatch(users[take], items[take], source))
            continue
        if n_users is None:
            raise ProbeError(
                "cannot form a probe batch: no interaction log maps onto the user tower and "
                "the number of users is unknown"
            )
        freq = bundle.item_frequencies
        if freq is not None and len(freq) == bundle.n_items and float(np.sum(freq)) > 0:
            p = np.asarray(freq, dtype=np.float64) / float(np.sum(freq))
            items = rng.choice(bundle.n_items, size=size, p=p)
            source = "sampled pairs: items by recorded training frequency, users uniform"
        else:
            items = rng.integers(0, bundle.n_items, size=size)
            source = "sampled pairs: items and users uniform (no interaction log)"
        users = rng.integers(0, n_users, size=size)
        batches.append(ProbeBatch(users.astype(np.int64), items.astype(np.int64), source))
    return batches


def _n_users(bundle: ModelBundle, live: LiveModel) -> int | None:
    if bundle.user_table is not None:
        return int(bundle.user_table.shape[0])
    n = getattr(live, "n_users", None)
    return int(n) if isinstance(n, (int, np.integer)) else None


def _log_pairs(
    bundle: ModelBundle, pairs: InteractionPairs | None, n_users: int | None
) -> tuple[np.ndarray, np.ndarray, str] | None:
    """(user rows, item rows, description) of the log's pairs the model can encode."""
    if pairs is None or len(pairs) == 0:
        return None
    raw_users = np.asarray(pairs.user_ids)[pairs.user_index]
    if bundle.user_ids is not None:
        model_ids = np.asarray(bundle.user_ids)
        order = np.argsort(model_ids, kind="stable")
        try:
            pos = np.searchsorted(model_ids[order], raw_users)
        except TypeError:  # raw ids of different types (str vs int) never match
            return None
        pos = np.clip(pos, 0, len(order) - 1)
        ok = model_ids[order][pos] == raw_users
        rows = order[pos]
        source = "interaction log (users mapped through the model's user ids)"
    elif n_users is not None and np.issubdtype(raw_users.dtype, np.integer):
        ok = (raw_users >= 0) & (raw_users < n_users)
        rows = raw_users
        source = "interaction log (user ids taken as user-table rows)"
    else:
        return None
    if not np.any(ok):
        return None
    return rows[ok].astype(np.int64), pairs.item_rows[ok].astype(np.int64), source


# ---------------------------------------------------------------------------- module copy


def working_copy(live: LiveModel, *, float64: bool = True) -> tuple[torch.nn.Module, torch.dtype]:
    """A deep copy of ``live.module`` in float64 when the model runs in it, else as is."""
    if float64:
        try:
            module64 = _clone(live.module).double()
            with torch.no_grad():
                live.encode_items(module64, torch.zeros(1, dtype=torch.int64))
            return module64, torch.float64
        except Exception:  # noqa: BLE001 - a model that cannot run in float64 is probed as is
            pass
    module = _clone(live.module)
    dtype = next((p.dtype for p in module.parameters()), torch.float32)
    return module, dtype


def _clone(module: torch.nn.Module) -> torch.nn.Module:
    """A deep copy; TorchScript modules go through save/load, because deepcopy leaves
    their parameters non-leaf (an optimizer then refuses them)."""
    if isinstance(module, torch.jit.ScriptModule):
        buffer = io.BytesIO()
        torch.jit.save(module, buffer)
        buffer.seek(0)
        return torch.jit.load(buffer, map_location="cpu")
    return copy.deepcopy(module)


class _ItemEncoder(torch.nn.Module):
    """Wraps ``live.encode_items`` as a forward so torch.func can substitute parameters."""

    def __init__(self, live: LiveModel, module: torch.nn.Module) -> None:
        super().__init__()
        self.inner = module
        object.__setattr__(self, "_live", live)  # not a submodule: live only holds code

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        return self._live.encode_items(self.inner, rows)


def _item_parameter_dict(live: LiveModel, module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Item-tower parameters by their name in the :class:`_ItemEncoder` wrapper."""
    names = {id(p): name for name, p in module.named_parameters(remove_duplicate=False)}
    out: dict[str, torch.Tensor] = {}
    for p in live.item_parameters(module):
        if id(p) not in names:
            raise ProbeError("live.item_parameters returned a tensor that is not a parameter of the module")
        out[f"inner.{names[id(p)]}"] = p.detach()
    if not out:
        raise ProbeError("the live model reports no item-tower parameters")
    return out


def _item_function(
    live: LiveModel, module: torch.nn.Module, rows: torch.Tensor
) -> tuple[Callable[[dict[str, torch.Tensor]], torch.Tensor], dict[str, torch.Tensor]]:
    wrapper = _ItemEncoder(live, module)
    params = _item_parameter_dict(live, module)

    def f(ps: dict[str, torch.Tensor]) -> torch.Tensor:
        return functional_call(wrapper, ps, (rows,))

    return f, params


# ---------------------------------------------------------------------------- structure


def item_tower_layers(live: LiveModel, module: torch.nn.Module) -> dict[str, Any]:
    """The layer types of the item tower, as far as the module's structure shows them.

    The tower is the smallest submodule holding every item parameter; when that is the
    whole model (towers side by side), only the layers owning item parameters are listed
    and activations between them cannot be attributed.
    """
    item_params = list(live.item_parameters(module))
    item_ids = {id(p) for p in item_params}
    owners = [
        name
        for name, m in module.named_modules()
        if any(id(p) in item_ids for p in m.parameters(recurse=False))
    ]
    n_params = int(sum(p.numel() for p in item_params))
    modules = dict(module.named_modules())  # get_submodule is not supported on ScriptModules
    prefix = _common_prefix(owners)
    tower = modules[prefix] if prefix else module
    other = {id(p) for p in tower.parameters()} - item_ids
    if other:  # the common ancestor also holds user-tower parameters
        # Widen each owner to its largest ancestor holding item parameters only (so an
        # ``item_mlp`` Sequential shows its activations); code in the shared parent's
        # forward stays invisible, hence not attributable.
        roots: dict[str, torch.nn.Module] = {}
        for name in owners:
            parts = name.split(".") if name else []
            best = name
            for cut in range(len(parts) - 1, 0, -1):
                candidate = ".".join(parts[:cut])
                if {id(p) for p in modules[candidate].parameters()} <= item_ids:
                    best = candidate
                else:
                    break
            roots[best] = modules[best]
        leaves = [m for root in roots.values() for m in root.modules() if not list(m.children())]
        attributable = False
    else:
        leaves = [m for m in tower.modules() if not list(m.children())]
        attributable = True
    types = [_type_name(m) for m in leaves]
    kinds = {_kind(t) for t in types} - {"neutral"}
    if kinds == {"embedding"} and len(owners) == 1:
        kind = "embedding"
    elif kinds <= {"linear"} and len(owners) == 1 and attributable:
        kind = "linear"
    elif "nonlinear" in kinds:
        kind = "nonlinear"
    elif "unknown" in kinds or not kinds:
        kind = "unknown"
    else:
        kind = "composed"  # e.g. an embedding followed by a shared linear layer
    return {
        "tower": prefix or "(whole module)",
        "layers": types,
        "attributable": attributable,
        "kind": kind,
        "n_parameters": n_params,
    }


def _common_prefix(names: list[str]) -> str:
    if not names:
        return ""
    parts = [n.split(".") if n else [] for n in names]
    common: list[str] = []
    for segment in zip(*parts):
        if len(set(segment)) != 1:
            break
        common.append(segment[0])
    return ".".join(common)


def _type_name(m: torch.nn.Module) -> str:
    # TorchScript modules keep the Python class name in ``original_name``.
    return str(getattr(m, "original_name", None) or type(m).__name__)


def _kind(type_name: str) -> str:
    low = type_name.lower()
    if low in _EMBEDDING:
        return "embedding"
    if low in _LINEAR:
        return "linear"
    if low in _NONLINEAR:
        return "nonlinear"
    if low in _NEUTRAL:
        return "neutral"
    return "unknown"


# ---------------------------------------------------------------------------- C2


def second_difference(
    live: LiveModel,
    module: torch.nn.Module,
    rows: torch.Tensor,
    *,
    generator: torch.Generator,
    epsilons: tuple[float, ...] = EPSILONS,
    n_directions: int = 3,
) -> dict[str, Any]:
    """C2: ‖f(θ+εv) + f(θ−εv) − 2f(θ)‖ / ‖f(θ)‖ over random directions v, per ε.

    Each direction is Gaussian, scaled per parameter tensor so that ‖εv_p‖ = ε‖θ_p‖ (a
    tensor that is all zeros gets the tower's RMS scale). Zero for a parameter-linear
    encoder (up to rounding), of order ε² for a curved one.
    """
    f, params = _item_function(live, module, rows)
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
    return {
        "epsilons": list(epsilons),
        "relative": [float(x) for x in worst],
        "n_directions": n_directions,
        "n_items": int(rows.numel()),
        "tolerance": tol,
        "linear": bool(np.all(worst <= tol)),
    }


# ---------------------------------------------------------------------------- C3


def cross_jacobian(live: LiveModel, module: torch.nn.Module, rows: torch.Tensor) -> dict[str, Any]:
    """C3: the blocks B_ij = J_i J_jᵀ (dim × dim) of distinct items ``rows``.

    Columns of J Jᵀ come from one vjp (Jᵀe) and one jvp (J·Jᵀe) per basis vector e,
    batched with vmap in chunks so that only a few parameter-sized tangents are held.
    Reports, over pairs i≠j, ‖B_ij‖_F / sqrt(‖B_ii‖_F‖B_jj‖_F) (for a linear layer over
    features x this is |cos(x_i, x_j)|; 0 exactly for embedding rows) and, per item,
    how far B_ii is from a multiple of the identity.
    """
    f, params = _item_function(live, module, rows)
    dtype = next(iter(params.values())).dtype
    out, vjp_fn = vjp(f, params)  # one forward gives both the output shape and the vjp
    m, dim = int(out.shape[0]), int(out.shape[1])
    n_out = m * dim

    def column(cotangent: torch.Tensor) -> torch.Tensor:
        (tangent,) = vjp_fn(cotangent)
        return jvp(f, (params,), (tangent,))[1]

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
    return {
        "items": [int(r) for r in rows.tolist()],
        "n_items": m,
        "n_pairs": int(off.numel()) // 2,
        "max_offdiag_relative": max_off,
        "median_offdiag_relative": float(np.median(off.numpy())) if off.numel() else None,
        "max_isotropy_deviation": max_dev,
        "n_items_without_parameters": int((~live_items).sum()),
        "tolerance": tol,
        "shared": None if max_off is None else bool(max_off > tol),
        "isotropic": None if max_dev is None else bool(max_dev <= tol),
    }


# ---------------------------------------------------------------------------- C4


def gradient_alignment(
    live: LiveModel, module: torch.nn.Module, batch: ProbeBatch
) -> dict[str, Any]:
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
    return {
        "n": int(align.numel()),
        "median": float(np.median(align.numpy())) if align.numel() else None,
        "max": float(align.max()) if align.numel() else None,
        "tolerance": tol,
        "orthogonal": None if not align.numel() else bool(float(align.max()) <= tol),
    }


# ---------------------------------------------------------------------------- update step


@dataclass
class UpdateProbe:
    """Per-item numbers of the probe step(s), over items whose embedding moved."""

    angles: np.ndarray
    """θ_i = angle between q_i and Δq_i, degrees."""
    residuals: np.ndarray
    """(‖q+Δq‖² − ‖q‖² − ‖Δq‖²)/‖Δq‖²."""
    growth: np.ndarray
    """c/s² = ‖Δq‖²/‖q‖² (SCIENCE.md eq. 3: s ← s + c/s)."""
    growth_per_appearance: np.ndarray
    """c/s² divided by the item's copies k in the batch, over batch items: eq. 3 applied
    once per copy, assuming the copies' contributions add like independent updates."""
    relative_change: np.ndarray
    """(‖q+Δq‖² − ‖q‖²)/‖q‖², the measured change of s."""
    n_evaluated: int
    optimizer: str
    optimizer_restored: bool
    lr: float | None
    steps: int


def update_step(
    live: LiveModel,
    module: torch.nn.Module,
    batches: list[ProbeBatch],
    *,
    extra_rows: np.ndarray,
    fallback_lr: float | None,
) -> UpdateProbe:
    """Real optimisation step(s) on ``module`` (a copy) with the model's own optimizer.

    ``live.make_optimizer`` restores the checkpoint's optimizer state, so momentum
    buffers and Adam moments act as they would in the next training step. When the model
    cannot rebuild its optimizer, plain SGD over the item parameters is used at
    ``fallback_lr`` (angles then test C2-C4 only; with no lr at all, lr = 1 and the growth
    is per unit lr²). Embeddings are compared on the batch items plus ``extra_rows``, so
    items moved only by optimizer state are counted too.
    """
    optimizer = live.make_optimizer(module)
    restored = optimizer is not None
    item_params = list(live.item_parameters(module))
    if optimizer is not None:
        # load_state_dict keeps the caller's state tensors when dtype and device already
        # match, so stepping would change the live model's stored state: own a copy.
        optimizer.load_state_dict(copy.deepcopy(optimizer.state_dict()))
    else:
        lr = fallback_lr if fallback_lr is not None else 1.0
        optimizer = torch.optim.SGD(item_params, lr=lr)
    lrs = {float(g["lr"]) for g in optimizer.param_groups if "lr" in g}
    item_ids = {id(p) for p in item_params}
    item_lrs = {
        float(g["lr"]) for g in optimizer.param_groups
        if "lr" in g and any(id(p) in item_ids for p in g["params"])
    }
    lr_used = next(iter(item_lrs or lrs)) if len(item_lrs or lrs) == 1 else None
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("a", "r", "g", "g1", "c")}
    n_eval = 0
    for batch in batches:
        rows, counts = np.unique(np.concatenate([batch.items, extra_rows]), return_counts=True)
        in_batch = np.unique(batch.items, return_counts=True)
        copies = np.zeros(len(rows), dtype=np.int64)
        copies[np.searchsorted(rows, in_batch[0])] = in_batch[1]
        rows_t = torch.as_tensor(rows, dtype=torch.int64)
        with torch.no_grad():
            before = live.encode_items(module, rows_t).detach().double().clone()
        optimizer.zero_grad(set_to_none=True)
        users = live.encode_users(module, torch.as_tensor(batch.users, dtype=torch.int64))
        items = live.encode_items(module, torch.as_tensor(batch.items, dtype=torch.int64))
        loss = live.loss(users, items)
        if not torch.isfinite(loss):
            raise ProbeError(f"the probe batch gives a non-finite loss ({float(loss)})")
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            after = live.encode_items(module, rows_t).detach().double()
        n_eval += len(rows)
        a, r, g, c, moved = _step_geometry(before, after, tolerance(items.dtype) * 1e-4)
        parts["a"].append(a)
        parts["r"].append(r)
        parts["g"].append(g)
        parts["c"].append(c)
        k = copies[moved]
        parts["g1"].append(g[k > 0] / k[k > 0])
    cat = {k: np.concatenate(v) if v else np.zeros(0) for k, v in parts.items()}
    name = type(optimizer).__name__
    return UpdateProbe(
        angles=cat["a"], residuals=cat["r"], growth=cat["g"], growth_per_appearance=cat["g1"],
        relative_change=cat["c"], n_evaluated=n_eval,
        optimizer=name if restored else f"{name} (fallback: the model's optimizer could not be rebuilt)",
        optimizer_restored=restored, lr=lr_used, steps=len(batches),
    )


def _step_geometry(
    before: torch.Tensor, after: torch.Tensor, rel_tol: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Angles, Pythagorean residuals, c/s² and relative change of s for moved items."""
    q = before.numpy()
    dq = (after - before).numpy()
    s = np.einsum("ij,ij->i", q, q)
    d2 = np.einsum("ij,ij->i", dq, dq)
    moved = (d2 > 0) & (d2 > (rel_tol**2) * s) & (s > 0)
    q, dq, s, d2 = q[moved], dq[moved], s[moved], d2[moved]
    dot = np.einsum("ij,ij->i", q, dq)
    # atan2 of the perpendicular and parallel parts is accurate at every angle.
    perp = np.linalg.norm(dq - (dot / s)[:, None] * q, axis=1) * np.sqrt(s)
    angles = np.degrees(np.arctan2(perp, dot))
    # ‖q+Δq‖² − ‖q‖² − ‖Δq‖² = 2 qᵀΔq exactly; the right side avoids cancellation.
    residual = 2.0 * dot / d2
    s_after = np.einsum("ij,ij->i", q + dq, q + dq)
    return angles, residual, d2 / s, (s_after - s) / s, moved


def summarise_angles(angles: np.ndarray) -> dict[str, Any]:
    """CLI.md's ``update_angles`` block: n, median, shares near 90°, histogram."""
    edges = np.arange(0.0, 180.0 + ANGLE_BIN_WIDTH / 2, ANGLE_BIN_WIDTH)
    counts, _ = np.histogram(angles, bins=edges)
    n = int(angles.size)
    off = np.abs(angles - 90.0)
    return {
        "n": n,
        "median": float(np.median(angles)) if n else None,
        "mean": float(np.mean(angles)) if n else None,
        "min": float(np.min(angles)) if n else None,
        "max": float(np.max(angles)) if n else None,
        "max_abs_deviation_from_90": float(np.max(off)) if n else None,
        "share_90pm1": float(np.mean(off <= 1.0)) if n else None,
        "share_90pm10": float(np.mean(off <= 10.0)) if n else None,
        "histogram": {"edges": edges.tolist(), "counts": counts.tolist()},
    }


def _summary(values: np.ndarray) -> dict[str, Any]:
    if values.size == 0:
        return {"n": 0, "median": None, "mean": None, "p10": None, "p90": None, "max_abs": None}
    return {
        "n": int(values.size),
        "median": float(np.median(values)),
        "mean": float(np.mean(values)),
        "p10": float(np.quantile(values, 0.1)),
        "p90": float(np.quantile(values, 0.9)),
        "max_abs": float(np.max(np.abs(values))),
    }


# ---------------------------------------------------------------------------- all probes


@dataclass
class ProbeOutcome:
    """Results of :func:`run_probes`; a probe that could not run leaves None and an error."""

    dtype: str
    seed: int
    batch_source: str
    batch_size: int
    layers: dict[str, Any] | None = None
    c2: dict[str, Any] | None = None
    c3: dict[str, Any] | None = None
    c4: dict[str, Any] | None = None
    update: UpdateProbe | None = None
    errors: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """CLI.md's ``probes`` section (JSON-serialisable)."""
        out: dict[str, Any] = {
            "dtype": self.dtype,
            "seed": self.seed,
            "batch": {"source": self.batch_source, "size": self.batch_size},
            "item_tower": self.layers,
        }
        up = self.update
        if up is not None:
            out["batch"]["steps"] = up.steps
            out["optimizer"] = {"name": up.optimizer, "restored": up.optimizer_restored, "lr": up.lr}
            out["update_angles"] = summarise_angles(up.angles)
            out["update_angles"]["n_evaluated"] = up.n_evaluated
            out["pythagorean_residual"] = _summary(up.residuals)
            out["growth_per_update"] = {
                **_summary(up.growth),
                "per_appearance": _summary(up.growth_per_appearance),
                "relative_change_of_s": _summary(up.relative_change),
                "definition": "c/s² = ‖Δq‖²/‖q‖² per item and step (SCIENCE.md eq. 3)",
            }
        if self.c2 is not None:
            out["c2_second_difference"] = self.c2
        if self.c3 is not None:
            out["c3_cross_jacobian"] = self.c3
        if self.c4 is not None:
            out["c4_gradient_alignment"] = self.c4
        if self.errors:
            out["errors"] = dict(self.errors)
        return out


def run_probes(
    live: LiveModel,
    bundle: ModelBundle,
    pairs: InteractionPairs | None,
    *,
    seed: int = 0,
    batch_size: int = 256,
    steps: int = 1,
    fallback_lr: float | None = None,
    n_jacobian_items: int = 8,
    n_curvature_items: int = 64,
    n_extra_items: int = 1024,
    progress: Progress = SILENT,
) -> ProbeOutcome:
    """Run every probe on copies of the model, float64 where it runs in it (never on
    ``live.module`` itself).

    A probe that raises (user or plugin code that torch.func cannot trace, say) is
    recorded in ``errors`` and the others still run; :class:`ProbeError` means no probe
    could run (no batch can be formed, or the module cannot be copied).
    """
    rng = np.random.default_rng(seed)
    generator = torch.Generator().manual_seed(seed)
    batches = sample_batches(bundle, pairs, live, size=batch_size, steps=steps, rng=rng)
    try:
        module, dtype = working_copy(live)
    except Exception as exc:  # noqa: BLE001 - a module that cannot be copied cannot be probed safely
        raise ProbeError(f"cannot copy the live model for probing: {_describe(exc)}") from exc
    outcome = ProbeOutcome(
        dtype=str(dtype).removeprefix("torch."), seed=seed,
        batch_source=batches[0].source, batch_size=int(len(batches[0].items)),
    )
    n_items = bundle.n_items
    curve_rows = torch.as_tensor(
        np.sort(rng.choice(n_items, size=min(n_curvature_items, n_items), replace=False)),
        dtype=torch.int64,
    )
    # J Jᵀ costs one vjp and one jvp per output coordinate: at most ~1024 of them.
    n_jac = min(n_jacobian_items, len(curve_rows), max(2, 1024 // max(1, bundle.dim)))
    jac_rows = curve_rows[torch.as_tensor(rng.choice(len(curve_rows), size=n_jac, replace=False))]
    extra = rng.choice(n_items, size=min(n_extra_items, n_items), replace=False).astype(np.int64)
    with progress.track("numeric probes", 5) as advance:
        try:
            outcome.layers = item_tower_layers(live, module)
        except Exception as exc:  # noqa: BLE001 - structure is evidence, not a requirement
            outcome.errors["item_tower"] = _describe(exc)
        advance(1)
        n_params = outcome.layers["n_parameters"] if outcome.layers else None
        too_big = n_params is not None and n_params > NUMERIC_PARAMETER_LIMIT
        for key, probe in (
            ("c2", lambda: second_difference(live, module, curve_rows, generator=generator)),
            ("c3", lambda: cross_jacobian(live, module, jac_rows)),
        ):
            if too_big:
                outcome.errors[key] = (
                    f"skipped: the item tower has {n_params} parameters "
                    f"(numeric check limit {NUMERIC_PARAMETER_LIMIT})"
                )
            else:
                try:
                    setattr(outcome, key, probe())
                except Exception as exc:  # noqa: BLE001
                    outcome.errors[key] = _describe(exc)
            advance(1)
        try:
            outcome.c4 = gradient_alignment(live, module, batches[0])
        except Exception as exc:  # noqa: BLE001
            outcome.errors["c4"] = _describe(exc)
        advance(1)
        # A fresh copy for the step: torch.func's parameter swapping must not leak into
        # it (TorchScript modules keep the swapped tensors as non-leaf parameters).
        del module
        step_module, _ = working_copy(live, float64=dtype == torch.float64)
        try:
            outcome.update = update_step(live, step_module, batches, extra_rows=extra, fallback_lr=fallback_lr)
        except Exception as exc:  # noqa: BLE001
            outcome.errors["update"] = _describe(exc)
        advance(1)
    return outcome


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
