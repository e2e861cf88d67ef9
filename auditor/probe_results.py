"""Typed results of the numeric probes, and the report's ``probes`` section (docs/report.md) they make.

The conditions read the fields; ``to_dict`` writes the report. Field order is the JSON
key order of each block, so the report reads as it always has.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from auditor.errors import setting_off

ANGLE_BIN_WIDTH = 4.0
"""Histogram bins of 4° put 90° in the middle of the bin [88°, 92°)."""

ProbeKey = Literal["item_tower", "c2", "c3", "c3_user", "c4", "update"]
"""The probes, as ``errors`` in the ``probes`` section names them."""
TowerKind = Literal["embedding", "linear", "nonlinear", "unknown", "composed"]


def _block(result: Any) -> dict[str, Any]:
    """A result as its JSON block (tuples as lists, as the report has always written them)."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(result).items()}


@dataclass(frozen=True)
class TowerLayers:
    """The item tower's layer types, as far as the module's structure shows them."""

    tower: str
    layers: tuple[str, ...]
    attributable: bool
    """False when towers sit side by side: activations between layers cannot be assigned."""
    kind: TowerKind
    n_parameters: int
    rows_read_items: int = 0
    """Items whose embedding rows were read, the whole catalogue (0: not read: a parameter that
    is no embedding table, or lookups not indexed by the items; ``probes/rows_read.py``)."""
    rows_sharing_items: int = 0
    """Of those, items reading a row another item also reads (they share it: C3 violated)."""
    rows_shared_group: tuple[int, ...] = ()
    """Item rows reading one shared row (the first found; at most 8)."""

    def to_dict(self) -> dict[str, Any]:
        """The ``item_tower`` block."""
        return _block(self)


@dataclass(frozen=True)
class SecondDifference:
    """C2 (linearity): ‖f(θ+εv) + f(θ−εv) − 2f(θ)‖ / ‖f(θ)‖, worst over directions, per ε."""

    epsilons: tuple[float, ...]
    relative: tuple[float, ...]
    n_directions: int
    n_items: int
    tolerance: float
    linear: bool
    output_dtype: str = ""
    """The dtype the item encoder returns (the tolerance follows the coarser of it and the parameters')."""
    flat_over_epsilon: bool = False
    """Figures above the tolerance that do not scale with ε²: rounding, read as linear."""
    rounding_level: float | None = None
    """The most rounding in the tower's coarsest dtype can make (8 eps, at least float32's):
    figures within it that do not shrink as ε² are rounding."""

    def to_dict(self) -> dict[str, Any]:
        """The ``c2_second_difference`` block."""
        return _block(self)


@dataclass(frozen=True)
class CrossJacobian:
    """C3 (sharing): normalised blocks J_i J_jᵀ of distinct items, and J_i J_iᵀ's isotropy.

    The maxima and verdicts are None when no pair (or no item) has parameters.
    """

    items: tuple[int, ...]
    n_items: int
    n_pairs: int
    max_offdiag_relative: float | None
    median_offdiag_relative: float | None
    max_isotropy_deviation: float | None
    n_items_without_parameters: int
    tolerance: float
    shared: bool | None
    isotropic: bool | None
    dim: int = 0
    """The width of the item embeddings (the blocks are dim × dim)."""
    n_coordinates: int = 0
    """Output coordinates sampled per item (``dim``: the blocks in full, exact)."""
    max_offdiag_standard_error: float | None = None
    """Jackknife standard error of ``max_offdiag_relative`` over the sampled coordinates (0 when exact)."""
    max_isotropy_standard_error: float | None = None
    """The same for ``max_isotropy_deviation``."""
    support_items: int = 0
    """Items whose gradient supports were compared for shared parameter entries (0: none)."""
    support_sharing_items: int = 0
    """Of those, items sharing an entry with another (the pairs then probed are among them)."""
    support_indexed_per_item: bool | None = None
    """Every compared item moves one row per parameter tensor, its own row plus a fixed offset."""
    support_exhaustive: bool = False
    """Every item of the catalogue was compared."""

    @property
    def non_sharing_proven(self) -> bool:
        """Whether no sharing is shown for the whole catalogue by comparing every item's
        gradient support (a sample's structure, one row per item, shows it for the sample
        only: a few items sharing one row slip through; the rows every item reads, recorded
        in ``TowerLayers``, are the other proof)."""
        return self.support_sharing_items == 0 and self.support_exhaustive and self.support_items > 0

    def to_dict(self) -> dict[str, Any]:
        """The ``c3_cross_jacobian`` block."""
        return _block(self)


@dataclass(frozen=True)
class UserCoupling:
    """C3 across the towers: ‖J_iJ_uᵀr‖/√(‖J_iJ_iᵀr‖‖J_uJ_uᵀr‖) of item outputs against user
    outputs along a random direction r, both Jacobians with respect to the item parameters
    (a user tower reading the item table makes it nonzero: user-side gradients move q_i)."""

    n_users: int
    n_items: int
    max_relative: float
    reads_items: bool
    """Some sampled user's output depends on an item parameter (J_u ≠ 0)."""
    user: int | None
    """The user row and item row of the largest block, when it is above the tolerance."""
    item: int | None
    tolerance: float
    dim: int = 0
    exhaustive: bool = False
    """The items compared are the whole catalogue: a block that is 0 for each is 0 for every
    item (J_iJ_uᵀ = 0 throughout), whatever else the user outputs read."""

    @property
    def coupled(self) -> bool:
        return self.max_relative > self.tolerance

    def to_dict(self) -> dict[str, Any]:
        """The ``c3_user_cross_jacobian`` block."""
        return {**_block(self), "coupled": self.coupled}


@dataclass(frozen=True)
class GradientAlignment:
    """C4 (orthogonality): |q·∇_qL| / (‖q‖‖∇_qL‖) per item slot of a real batch.

    None throughout when every slot's gradient vanished.
    """

    n: int
    median: float | None
    max: float | None
    tolerance: float
    orthogonal: bool | None
    n_rounding: int = 0
    """Slots left out because their gradient is at rounding level (no direction to grade)."""
    unmeasured: str | None = None
    """Why no slot was graded (``orthogonal`` None), when there were slots."""

    def to_dict(self) -> dict[str, Any]:
        """The ``c4_gradient_alignment`` block."""
        return _block(self)


@dataclass(frozen=True)
class AngleSummary:
    """The update angles in brief: centre, spread, shares near 90° and a histogram."""

    n: int
    median: float | None
    mean: float | None
    min: float | None
    max: float | None
    max_abs_deviation_from_90: float | None
    share_90pm1: float | None
    share_90pm10: float | None
    edges: tuple[float, ...]
    counts: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        """The report's ``update_angles`` block."""
        out = _block(self)
        del out["edges"], out["counts"]
        out["histogram"] = {"edges": list(self.edges), "counts": list(self.counts)}
        return out


def summarise_angles(angles: np.ndarray) -> AngleSummary:
    """Summarise update angles in degrees (None where there are none)."""
    edges = np.arange(0.0, 180.0 + ANGLE_BIN_WIDTH / 2, ANGLE_BIN_WIDTH)
    counts, _ = np.histogram(angles, bins=edges)
    n = int(angles.size)
    off = np.abs(angles - 90.0)
    return AngleSummary(
        n=n,
        median=float(np.median(angles)) if n else None,
        mean=float(np.mean(angles)) if n else None,
        min=float(np.min(angles)) if n else None,
        max=float(np.max(angles)) if n else None,
        max_abs_deviation_from_90=float(np.max(off)) if n else None,
        share_90pm1=float(np.mean(off <= 1.0)) if n else None,
        share_90pm10=float(np.mean(off <= 10.0)) if n else None,
        edges=tuple(edges.tolist()),
        counts=tuple(counts.tolist()),
    )


@dataclass(frozen=True)
class Spread:
    """Centre and spread of one per-item quantity of the probe step."""

    n: int
    median: float | None
    mean: float | None
    p10: float | None
    p90: float | None
    max_abs: float | None

    @classmethod
    def of(cls, values: np.ndarray) -> Spread:
        """Summarise ``values`` (None throughout when empty)."""
        if values.size == 0:
            return cls(0, None, None, None, None, None)
        return cls(
            n=int(values.size),
            median=float(np.median(values)),
            mean=float(np.mean(values)),
            p10=float(np.quantile(values, 0.1)),
            p90=float(np.quantile(values, 0.9)),
            max_abs=float(np.max(np.abs(values))),
        )

    def to_dict(self) -> dict[str, Any]:
        """The block as the ``probes`` section writes it."""
        return asdict(self)


@dataclass(frozen=True, eq=False)
class UpdateProbe:
    """Norm growth: per-item numbers of the probe step(s), over items whose embedding moved."""

    angles: np.ndarray
    """θ_i = angle between q_i and Δq_i, degrees."""
    residuals: np.ndarray
    """(‖q+Δq‖² − ‖q‖² − ‖Δq‖²)/‖Δq‖²."""
    growth: np.ndarray
    """c/s² = ‖Δq‖²/‖q‖² (docs/theory.md eq. 3: s ← s + c/s)."""
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
    change_per_appearance: np.ndarray = field(default_factory=lambda: np.zeros(0))
    """The measured change of the squared norm, (‖q+Δq‖² − ‖q‖²)/‖q‖², divided by the item's
    copies k in the batch, over batch items: c/s² per appearance with its sign (equal to
    ``growth_per_appearance`` under orthogonal updates; negative where the step shrank the
    norm, as weight decay does). Empty where the probe did not record it."""
    n_nonfinite: int = 0
    """Item rows (counted per step) whose embedding was NaN or infinite after a probe step (the
    step diverged): left out of the angles and growth, and warned of."""

    @property
    def angle_summary(self) -> AngleSummary:
        """The angles in brief (the report's ``update_angles``)."""
        return summarise_angles(self.angles)


@dataclass(frozen=True)
class ProbeFailure:
    """Why one probe has no result: it raised (the message names the exception), or it
    was skipped on purpose (then it is no warning)."""

    message: str
    skipped: bool = False


@dataclass(frozen=True)
class ProbeOutcome:
    """Results of ``run_probes``; a probe that could not run leaves None and a failure."""

    dtype: str
    seed: int
    batch_source: str
    batch_size: int
    layers: TowerLayers | None = None
    second_difference: SecondDifference | None = None
    cross_jacobian: CrossJacobian | None = None
    user_coupling: UserCoupling | None = None
    gradient_alignment: GradientAlignment | None = None
    update: UpdateProbe | None = None
    errors: Mapping[ProbeKey, ProbeFailure] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    """What the probes found beside their figures (the loader's table is not the encoder's outputs)."""

    def error(self, key: ProbeKey) -> str | None:
        """The failure message of probe ``key``, or None when it ran."""
        failure = self.errors.get(key)
        return None if failure is None else failure.message

    def to_dict(self) -> dict[str, Any]:
        """the report's ``probes`` section (docs/report.md) (JSON-serialisable)."""
        out: dict[str, Any] = {
            "dtype": self.dtype,
            "seed": self.seed,
            "batch": {"source": self.batch_source, "size": self.batch_size},
            "item_tower": None if self.layers is None else self.layers.to_dict(),
        }
        up = self.update
        if up is not None:
            out["batch"]["steps"] = up.steps
            out["optimizer"] = {"name": up.optimizer, "restored": up.optimizer_restored, "lr": up.lr}
            out["update_angles"] = {**up.angle_summary.to_dict(), "n_evaluated": up.n_evaluated}
            out["pythagorean_residual"] = Spread.of(up.residuals).to_dict()
            out["growth_per_update"] = {
                **Spread.of(up.growth).to_dict(),
                "per_appearance": Spread.of(up.growth_per_appearance).to_dict(),
                "relative_change_of_s": Spread.of(up.relative_change).to_dict(),
                "definition": "c/s² = ‖Δq‖²/‖q‖² per item and step (docs/theory.md eq. 3)",
            }
        for key, block in (
            ("c2_second_difference", self.second_difference),
            ("c3_cross_jacobian", self.cross_jacobian),
            ("c3_user_cross_jacobian", self.user_coupling),
            ("c4_gradient_alignment", self.gradient_alignment),
        ):
            if block is not None:
                out[key] = block.to_dict()
        if self.errors:
            out["errors"] = {key: failure.message for key, failure in self.errors.items()}
        return out


@dataclass(frozen=True)
class ProbesNotRun:
    """Why an audit has no ``probes`` section: its ``not_measured`` reason."""

    reason: Literal["disabled", "no live model", "failed"]
    detail: str = ""
    """For ``failed``: what stopped every probe (a batch could not be formed, say)."""

    def describe(self) -> str:
        """The reason in words (for ``failed`` also the audit's warning)."""
        if self.reason == "disabled":
            return f"skipped with {setting_off('probes')}"
        if self.reason == "failed":
            return f"numeric probes could not run: {self.detail}"
        return (
            "no live encoder and loss: the file holds tables only (retrain with "
            "popaudit, or load the model through a plugin)"
        )
