"""Numeric probes on a live two-tower model (docs/theory.md §1-3, §5).

Every probe works on a deep copy of ``live.module`` (cast to float64 where the model
allows it), never on the user's model or files:

* :func:`second_difference` - C2 (linearity): f(θ+εv) + f(θ−εv) − 2f(θ) relative to f(θ);
* :func:`cross_jacobian` - C3 (sharing): the blocks J_i J_jᵀ of the item tower's tangent kernel;
* :func:`gradient_alignment` - C4 (orthogonality): |q·∇_qL| / (‖q‖‖∇_qL‖) on a real batch;
* :func:`update_step` - norm growth: one (or a few) real optimisation steps, giving update
  angles θ_i, the Pythagorean residual and the per-update growth c/s² = ‖Δq‖²/‖q‖² (eq. 3).

:func:`run_probes` runs them all into a :class:`ProbeOutcome`, whose ``to_dict`` is
the report's ``probes`` section (docs/report.md). All randomness comes from the ``seed`` argument. Modules:
:mod:`~auditor.probe_results` (the typed results, torch-free), ``sampling`` (batches),
``copies`` (working copies), ``structure``, ``numerics``, ``update`` and ``run``.
"""

from auditor.probes.copies import tolerance, working_copy
from auditor.probes.numerics import EPSILONS, cross_jacobian, gradient_alignment, second_difference
from auditor.probe_results import (
    ANGLE_BIN_WIDTH,
    AngleSummary,
    CrossJacobian,
    GradientAlignment,
    ProbeFailure,
    ProbeKey,
    ProbeOutcome,
    ProbesNotRun,
    SecondDifference,
    Spread,
    TowerLayers,
    UpdateProbe,
    summarise_angles,
)
from auditor.probes.run import NUMERIC_PARAMETER_LIMIT, run_probes
from auditor.probes.sampling import ProbeBatch, sample_batches
from auditor.probes.structure import item_tower_layers
from auditor.probes.update import update_step

__all__ = [
    "ANGLE_BIN_WIDTH",
    "EPSILONS",
    "NUMERIC_PARAMETER_LIMIT",
    "AngleSummary",
    "CrossJacobian",
    "GradientAlignment",
    "ProbeBatch",
    "ProbeFailure",
    "ProbeKey",
    "ProbeOutcome",
    "ProbesNotRun",
    "SecondDifference",
    "Spread",
    "TowerLayers",
    "UpdateProbe",
    "cross_jacobian",
    "gradient_alignment",
    "item_tower_layers",
    "run_probes",
    "sample_batches",
    "second_difference",
    "summarise_angles",
    "tolerance",
    "update_step",
    "working_copy",
]
