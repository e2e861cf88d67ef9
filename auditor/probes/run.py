"""Every probe in one call: :func:`run_probes` on copies of the live model."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TypeVar

import numpy as np
import torch

from auditor.errors import ProbeError
from auditor.values import RowIdPolicy
from auditor.model import InteractionPairs, LiveModel, ModelBundle
from auditor.probes.copies import item_function, working_copy
from auditor.probes.eager import compiler_free
from auditor.probes.live_contract import LiveCodeFailure, checked_live, while_probing
from auditor.probes.numerics import cross_jacobian, gradient_alignment, second_difference
from auditor.probe_results import (
    CrossJacobian, ProbeFailure, ProbeKey, ProbeOutcome, SecondDifference, TowerLayers, UpdateProbe, UserCoupling,
)
from auditor.probes.sampling import ProbeBatch, sample_batches
from auditor.probes.structure import item_tower_layers
from auditor.probes.rows_read import rows_read
from auditor.probes.supports import support_search
from auditor.probes.table_agreement import table_disagreement
from auditor.probes.update import update_step
from auditor.probes.user_coupling import user_coupling
from auditor.progress import SILENT, Progress

T = TypeVar("T")
NUMERIC_PARAMETER_LIMIT = 5_000_000
"""Item towers with more parameters skip the C2/C3 numerics (memory: one tangent per vector)."""
EXHAUSTIVE_SUPPORT_ITEMS = 512
"""Catalogues up to this size whose rows read cannot be recorded compare every item's
gradient support (one backward pass each), so that C3 is shown for all of them."""


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
    row_ids: RowIdPolicy = RowIdPolicy(),
    device: str = "cpu",
    plugin: str | None = None,
) -> ProbeOutcome:
    """Run every probe on copies of the model, float64 where it runs in it (never on
    ``live.module`` itself), on ``device`` (``"cpu"`` or ``"cuda"``, resolved).

    The live model's methods are first called plainly (``live_contract.py``): one that fails
    there raises :class:`PluginError` naming ``plugin`` (who built it; None: popaudit's own,
    whose failure is a ProbeError), on every item row a probe reads at the checkpoint's
    parameters (the update step's sample, C2/C3's rows, the probe batches). A probe that
    raises after that (code torch.func cannot trace, say) is recorded in ``errors`` and the
    others still run, except the live model's code failing in a probe's plain call
    (:class:`LiveCodeFailure`), which for a plugin's model is the plugin's
    :class:`PluginError`; :class:`ProbeError` means no probe could run (no batch, a module
    that cannot be copied).
    """
    rng = np.random.default_rng(seed)
    generator = torch.Generator().manual_seed(seed)
    batches = sample_batches(bundle, pairs, live, size=batch_size, steps=steps, rng=rng, row_ids=row_ids)
    try:
        module, dtype = working_copy(live, device=device)
    except Exception as exc:  # noqa: BLE001 - a module that cannot be copied cannot be probed safely
        raise ProbeError(f"cannot copy the live model for probing: {_describe(exc)}") from exc
    n_items = bundle.n_items
    curve_rows = torch.as_tensor(np.sort(rng.choice(n_items, size=min(n_curvature_items, n_items), replace=False)))
    # J Jᵀ costs two reverse passes (Jᵀe, then J·Jᵀe) per output coordinate: at most ~1024 of them.
    n_jac = min(n_jacobian_items, len(curve_rows), max(2, 1024 // max(1, bundle.dim)))
    jac_rows = curve_rows[torch.as_tensor(rng.choice(len(curve_rows), size=n_jac, replace=False))]
    extra = rng.choice(n_items, size=min(n_extra_items, n_items), replace=False).astype(np.int64)
    errors: dict[ProbeKey, ProbeFailure] = {}
    disagreement, plugin = _contract(live, module, bundle, np.concatenate([extra, curve_rows.numpy()]), batches,
                                     plugin)
    with progress.track("numeric probes", 5) as advance:
        layers = _attempt(errors, "item_tower", lambda: item_tower_layers(live, module), plugin)
        layers = _with_rows_read(live, module, layers, n_items)
        advance(1)
        second, cross = _numeric(live, module, layers, curve_rows, jac_rows, n_items, generator, errors, advance,
                                 plugin)
        coupling = _attempt(errors, "c3_user", lambda: _user_coupling(live, module, batches[0].users, n_items, extra),
                            plugin)
        alignment = _attempt(errors, "c4", lambda: gradient_alignment(live, module, batches[0]), plugin)
        advance(1)
        # A fresh copy for the step: torch.func's parameter swapping must not leak into
        # it (TorchScript modules keep the swapped tensors as non-leaf parameters).
        del module
        step_module, _ = working_copy(live, float64=dtype == torch.float64, device=device)
        with compiler_free():  # one eager step must not import torch's compiler stack
            update = _attempt(
                errors, "update",
                lambda: update_step(live, step_module, batches, extra_rows=extra, fallback_lr=fallback_lr), plugin,
            )
        advance(1)
    return ProbeOutcome(
        dtype=str(dtype).removeprefix("torch."), seed=seed,
        batch_source=batches[0].source, batch_size=int(len(batches[0].items)),
        layers=layers, second_difference=second, cross_jacobian=cross, user_coupling=coupling,
        gradient_alignment=alignment, update=update, errors=errors,
        warnings=((disagreement,) if disagreement else ()) + _diverged(update),
    )



def _diverged(update: UpdateProbe | None) -> tuple[str, ...]:
    """The warning for item rows the probe step left NaN or infinite (QA12 retrain: they were
    dropped from the angles and the growth unsaid)."""
    if update is None or not update.n_nonfinite:
        return ()
    return (f"{update.n_nonfinite:,} of the {update.n_evaluated:,} item rows compared around the probe step were NaN "
            "or infinite after it (the step diverged there): they are left out of the update angles and the "
            "measured growth",)


def _contract(
    live: LiveModel, module: torch.nn.Module, bundle: ModelBundle, sampled: np.ndarray, batches: list[ProbeBatch],
    plugin: str | None,
) -> tuple[str | None, str | None]:
    """``checked_live`` on every item row a probe reads at the checkpoint's parameters (the
    ``sampled`` rows and the batches': not only the update step's sample, or a NaN row beyond
    it would pass into C2's or C4's figures unsaid); the table-vs-encoder warning, and who
    fails for the probes' own plain calls (None for a tower that refuses many rows at once:
    the probe batch meets that limit, a warning each, not its code failing)."""
    probed = np.unique(np.concatenate([sampled, *(b.items for b in batches)]).astype(np.int64))
    users = np.unique(np.concatenate([b.users for b in batches]).astype(np.int64))
    checked = checked_live(live, module, probed, users, bundle.dim, plugin)
    return table_disagreement(checked, bundle, probed), plugin if checked.refused is None else None


def _numeric(
    live: LiveModel, module: torch.nn.Module, layers: TowerLayers | None, curve_rows: torch.Tensor,
    jac_rows: torch.Tensor, n_items: int, generator: torch.Generator, errors: dict[ProbeKey, ProbeFailure],
    advance: Callable[[int], None], plugin: str | None,
) -> tuple[SecondDifference | None, CrossJacobian | None]:
    """C2's second difference and C3's cross-Jacobian, skipped (and recorded so) for a
    tower above :data:`NUMERIC_PARAMETER_LIMIT` parameters."""
    n_params = layers.n_parameters if layers is not None else None
    if n_params is not None and n_params > NUMERIC_PARAMETER_LIMIT:
        for key in ("c2", "c3"):
            errors[key] = ProbeFailure(
                f"skipped: the item tower has {n_params} parameters (numeric check limit {NUMERIC_PARAMETER_LIMIT})",
                skipped=True,
            )
            advance(1)
        return None, None
    second = _attempt(errors, "c2", lambda: second_difference(live, module, curve_rows, generator=generator), plugin)
    advance(1)
    cross = _attempt(errors, "c3", lambda: _c3(live, module, jac_rows, curve_rows, n_items, generator, layers), plugin)
    advance(1)
    return second, cross


def _user_coupling(
    live: LiveModel, module: torch.nn.Module, batch_users: np.ndarray, n_items: int, extra: np.ndarray,
) -> UserCoupling:
    """C3 across the towers on the probe batch's first distinct users, against every item of a
    catalogue up to :data:`EXHAUSTIVE_SUPPORT_ITEMS` (else the ``extra`` sample, which is the
    whole catalogue up to its size: ``exhaustive`` then, as C3 reads it)."""
    users = torch.as_tensor(np.unique(batch_users)[:8], dtype=torch.int64)
    items = np.arange(n_items) if n_items <= EXHAUSTIVE_SUPPORT_ITEMS else np.sort(extra)
    return user_coupling(live, module, users, torch.as_tensor(items, dtype=torch.int64),
                         exhaustive=np.unique(items).size == n_items)


def _with_rows_read(
    live: LiveModel, module: torch.nn.Module, layers: TowerLayers | None, n_items: int,
) -> TowerLayers | None:
    """The tower's layers with the rows every item reads (``rows_read.py``) where they can be
    recorded; a tower they cannot be recorded for keeps ``rows_read_items`` 0."""
    if layers is None:
        return None
    try:
        read = rows_read(live, module, n_items)
    except Exception:  # noqa: BLE001 - user code the recording cannot follow: not read, said so by 0
        read = None
    if read is None:
        return layers
    return replace(layers, rows_read_items=read.n_items, rows_sharing_items=read.sharing_items,
                   rows_shared_group=read.shared_group)


def _c3(
    live: LiveModel, module: torch.nn.Module, jac_rows: torch.Tensor, candidates: torch.Tensor, n_items: int,
    generator: torch.Generator, layers: TowerLayers | None = None,
) -> CrossJacobian:
    """C3's cross-Jacobian: on the random sample ``jac_rows``; when it shows no sharing and
    the rows every item reads were recorded, those decide (a shared row's items probed);
    otherwise the gradient supports of the ``candidates`` (every item of a catalogue up to
    :data:`EXHAUSTIVE_SUPPORT_ITEMS`) are compared (``supports.py``) and the cross-Jacobian
    is taken on pairs found sharing, so a hashed tower's collisions are measured rather than
    missed; the search's figures say whether non-sharing is shown for the catalogue."""
    cross = cross_jacobian(live, module, jac_rows, generator=generator)
    if cross.shared is not False:
        return cross
    if layers is not None and layers.rows_read_items:
        if not layers.rows_sharing_items:
            return cross
        group = torch.as_tensor(layers.rows_shared_group, dtype=torch.int64)
        return cross_jacobian(live, module, group, generator=generator)
    if n_items <= EXHAUSTIVE_SUPPORT_ITEMS:
        candidates = torch.arange(n_items, dtype=torch.int64)
    f, params = item_function(live, module, candidates)
    search = support_search(f, params, candidates, seed=int(torch.randint(0, 2**31 - 1, (1,), generator=generator)))
    if search.sharing_pairs:
        rows = torch.as_tensor(sorted({r for pair in search.sharing_pairs for r in pair}), dtype=torch.int64)
        cross = cross_jacobian(live, module, rows, generator=generator)
    return replace(
        cross, support_items=search.n_items, support_sharing_items=search.n_sharing_items,
        support_indexed_per_item=search.indexed_per_item, support_exhaustive=search.n_items >= n_items,
    )


def _attempt(
    errors: dict[ProbeKey, ProbeFailure], key: ProbeKey, probe: Callable[[], T], plugin: str | None = None,
) -> T | None:
    """The probe's result, or None with its failure recorded under ``key``; the code of a
    plugin's live model failing in the probe's plain call fails the run, naming ``plugin``."""
    try:
        return probe()
    except Exception as exc:  # noqa: BLE001
        if plugin is not None and isinstance(exc, LiveCodeFailure):
            raise while_probing(plugin, exc) from exc
        errors[key] = ProbeFailure(_describe(exc))
        return None


def _describe(exc: BaseException) -> str:
    """A ProbeError is popaudit's own sentence; anything else is named by its type."""
    return str(exc) if isinstance(exc, ProbeError) else f"{type(exc).__name__}: {exc}"
