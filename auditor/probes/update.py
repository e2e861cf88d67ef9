"""The norm-growth probe: real optimisation step(s) on a copy, per-item geometry of Δq."""

from __future__ import annotations

import copy

import numpy as np
import torch

from auditor.errors import ProbeError
from auditor.model import LiveModel
from auditor.probes.copies import module_device, one_dtype, tolerance
from auditor.probes.eager import eager_step
from auditor.probes.live_contract import plain_call, plain_loss, plain_rows
from auditor.probe_results import UpdateProbe
from auditor.probes.sampling import ProbeBatch


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
    optimizer, restored, lr_used = _probe_optimizer(live, module, fallback_lr)
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("a", "r", "g", "g1", "c", "c1")}
    n_eval = n_nonfinite = 0
    for step, batch in enumerate(batches):
        rows, counts = np.unique(np.concatenate([batch.items, extra_rows]), return_counts=True)
        in_batch = np.unique(batch.items, return_counts=True)
        copies = np.zeros(len(rows), dtype=np.int64)
        copies[np.searchsorted(rows, in_batch[0])] = in_batch[1]
        device = module_device(module)  # --device: the copy's, where its inputs go too
        rows_t = torch.as_tensor(rows, dtype=torch.int64, device=device)
        with torch.no_grad():
            before = _encoded(live, module, rows_t, at_checkpoint=step == 0).detach().double().cpu().clone()
        optimizer.zero_grad(set_to_none=True)
        users_t = torch.as_tensor(batch.users, dtype=torch.int64, device=device)
        items_t = torch.as_tensor(batch.items, dtype=torch.int64, device=device)
        users = plain_call("encode_users", lambda: live.encode_users(module, users_t))
        items = _encoded(live, module, items_t, at_checkpoint=step == 0)
        if step == 0:  # the checkpoint's own parameters: a non-finite row or loss is the model code's (live_contract)
            users = plain_rows("encode_users", users, users_t, "user")
        loss = plain_call("loss", lambda: live.loss(*one_dtype(users, items)))
        if step == 0:
            plain_loss(loss, len(items_t))
        elif not torch.isfinite(loss):  # a step taken: the loss may diverge
            raise ProbeError(f"the probe batch gives a non-finite loss ({float(loss.detach())}) after {step} steps")
        loss.backward()  # type: ignore[no-untyped-call]  # torch leaves Tensor.backward unannotated
        eager_step(optimizer)
        with torch.no_grad():
            after = _encoded(live, module, rows_t, at_checkpoint=False).detach().double().cpu()
        n_eval += len(rows)
        n_nonfinite += int((~torch.isfinite(after).all(dim=1)).sum())  # the step diverged there
        a, r, g, c, moved = step_geometry(before, after, tolerance(items.dtype) * 1e-4)
        parts["a"].append(a)
        parts["r"].append(r)
        parts["g"].append(g)
        parts["c"].append(c)
        k = copies[moved]
        parts["g1"].append(g[k > 0] / k[k > 0])
        parts["c1"].append(c[k > 0] / k[k > 0])
    cat = {k: np.concatenate(v) if v else np.zeros(0) for k, v in parts.items()}
    name = type(optimizer).__name__
    return UpdateProbe(
        angles=cat["a"], residuals=cat["r"], growth=cat["g"], growth_per_appearance=cat["g1"],
        relative_change=cat["c"], n_evaluated=n_eval,
        optimizer=name if restored else f"{name} (fallback: the model's optimizer could not be rebuilt)",
        optimizer_restored=restored, lr=lr_used, steps=len(batches), change_per_appearance=cat["c1"],
        n_nonfinite=n_nonfinite,
    )


def _encoded(live: LiveModel, module: torch.nn.Module, rows: torch.Tensor, *, at_checkpoint: bool) -> torch.Tensor:
    """``encode_items`` of ``rows`` called plainly: a raise is the live model's code failing,
    and so are non-finite rows at the checkpoint's own parameters (after a step they may be
    the step diverging: :func:`step_geometry` leaves such rows out)."""
    out = plain_call("encode_items", lambda: live.encode_items(module, rows))
    return plain_rows("encode_items", out, rows, "item") if at_checkpoint else out


def _probe_optimizer(
    live: LiveModel, module: torch.nn.Module, fallback_lr: float | None
) -> tuple[torch.optim.Optimizer, bool, float | None]:
    """The model's own optimizer with its state restored (a copy of the state), else plain
    SGD over the item parameters at ``fallback_lr`` (1 without one); whether it was
    restored; the item parameters' learning rate when they have one."""
    optimizer = live.make_optimizer(module)
    restored = optimizer is not None
    item_params = list(live.item_parameters(module))
    if optimizer is not None:
        # load_state_dict keeps the caller's state tensors when dtype and device already
        # match, so stepping would change the live model's stored state: own a copy.
        optimizer.load_state_dict(copy.deepcopy(optimizer.state_dict()))
    else:
        optimizer = torch.optim.SGD(item_params, lr=fallback_lr if fallback_lr is not None else 1.0)
    lrs = {float(g["lr"]) for g in optimizer.param_groups if "lr" in g}
    item_ids = {id(p) for p in item_params}
    item_lrs = {
        float(g["lr"]) for g in optimizer.param_groups
        if "lr" in g and any(id(p) in item_ids for p in g["params"])
    }
    return optimizer, restored, next(iter(item_lrs or lrs)) if len(item_lrs or lrs) == 1 else None


def step_geometry(
    before: torch.Tensor, after: torch.Tensor, rel_tol: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Angles, Pythagorean residuals, c/s² and relative change of s for moved items.

    ``before`` and ``after`` are float64 (n, d) rows of the same items around one step;
    an item counts as moved when ‖Δq‖ > ``rel_tol`` · ‖q‖ (and ‖q‖ > 0), and only when
    its row is finite before and after the step: a NaN or infinite row (training diverged)
    has no angle nor growth, so it is left out (the monitor counts it in ``n_nonfinite``)
    rather than counted as an angle off 90° or turning the median NaN. Returns the
    four per-moved-item arrays and the boolean ``moved`` mask over the n rows. Shared
    with the training monitor (:mod:`auditor.monitor`), so a probe step and a measured
    training step are one geometry.
    """
    q = before.numpy()
    dq = (after - before).numpy()
    s = np.einsum("ij,ij->i", q, q)
    d2 = np.einsum("ij,ij->i", dq, dq)
    finite = np.isfinite(q).all(axis=1) & np.isfinite(after.numpy()).all(axis=1)
    with np.errstate(invalid="ignore", over="ignore"):  # the non-finite rows' figures, masked out here
        moved = finite & (d2 > 0) & (d2 > (rel_tol**2) * s) & (s > 0)
    q, dq, s, d2 = q[moved], dq[moved], s[moved], d2[moved]
    dot = np.einsum("ij,ij->i", q, dq)
    # θ = atan2(‖Δq⊥‖, q̂·Δq), both parts scaled by ‖q‖ (docs/monitor.md): accurate at every angle.
    perp = np.linalg.norm(dq - (dot / s)[:, None] * q, axis=1) * np.sqrt(s)
    angles = np.degrees(np.arctan2(perp, dot))
    # ‖q+Δq‖² − ‖q‖² − ‖Δq‖² = 2 qᵀΔq exactly; the right side avoids cancellation.
    residual = 2.0 * dot / d2
    s_after = np.einsum("ij,ij->i", q + dq, q + dq)
    return angles, residual, d2 / s, (s_after - s) / s, moved
