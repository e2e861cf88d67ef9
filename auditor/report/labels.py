"""Reader labels and units of the probe results, one mapping used by every format, and
the probe tables built from it.

Keys are the dotted keys of the ``probes`` section as JSON writes it
(:meth:`auditor.probe_results.ProbeOutcome.to_dict`): JSON keeps them for machines,
the HTML and Markdown reports show :data:`PROBE_FIELDS`' label and format the value
by its unit, in this mapping's order. A key without a label (a field added later) shows
under its own name; ``tests/test_report_labels.py`` fails until it gets one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from auditor.report.formatting import MISSING, Table, flatten, fmt_num, fmt_pct, fmt_value

Unit = Literal["deg", "pct", "count", "bool", "number", "text"]
"""How a value is shown: degrees, a percentage, a whole count, yes/no, a number
(3 significant digits), or as is."""

PROBE_TITLES: dict[str, str] = {
    "update_angles": "Update angles (one probe step)",
    "setup": "Probe setup",
    "batch": "Probe batch",
    "item_tower": "Item tower",
    "optimizer": "Optimizer of the probe step",
    "pythagorean_residual": "Pythagorean residual (‖q+Δq‖² − ‖q‖² − ‖Δq‖²)/‖Δq‖² per item: 0 when Δq ⟂ q",
    "growth_per_update": "Norm growth per update: c/s² = ‖Δq‖²/‖q‖², s = ‖q‖² (docs/theory.md eq. 3)",
    "c2_second_difference": "C2 linearity: second difference of the item encoder",
    "c3_cross_jacobian": "C3 no sharing: Jacobians of distinct items",
    "c3_user_cross_jacobian": "C3 across the towers: item outputs against user outputs, over the item parameters",
    "c4_gradient_alignment": "C4 orthogonality: gradient against the embedding",
    "errors": "Probes that could not run",
}
"""Title of each block's table (``setup``: the top-level scalars)."""

_SPREAD: dict[str, tuple[str, Unit]] = {
    "n": ("items measured", "count"),
    "median": ("median", "number"),
    "mean": ("mean", "number"),
    "p10": ("10th percentile", "number"),
    "p90": ("90th percentile", "number"),
    "max_abs": ("largest |value|", "number"),
}


def _spread(prefix: str, what: str = "") -> dict[str, tuple[str, Unit]]:
    """Labels of a :class:`~auditor.probe_results.Spread` block: ``median <what>``, ..."""
    return {f"{prefix}.{key}": (f"{label}, {what}" if what else label, unit) for key, (label, unit) in _SPREAD.items()}


PROBE_FIELDS: dict[str, tuple[str, Unit]] = {
    "dtype": ("numeric precision of the probe copy", "text"),
    "seed": ("random seed", "text"),
    "batch.source": ("where the probe batches come from", "text"),
    "batch.size": ("interactions per probe batch", "count"),
    "batch.steps": ("optimizer steps taken", "count"),
    "item_tower.tower": ("item tower (module path)", "text"),
    "item_tower.layers": ("layers, input to output", "text"),
    "item_tower.attributable": ("layers attributable to the item tower alone", "bool"),
    "item_tower.kind": ("kind of item tower", "text"),
    "item_tower.n_parameters": ("parameters of the item tower", "count"),
    "item_tower.rows_read_items": ("items whose embedding rows were read (the catalogue; 0: not read)", "count"),
    "item_tower.rows_sharing_items": ("of those, items reading a row another item reads", "count"),
    "item_tower.rows_shared_group": ("items reading one shared row (first found)", "text"),
    "optimizer.name": ("optimizer stepped", "text"),
    "optimizer.restored": ("optimizer state restored from the file", "bool"),
    "optimizer.lr": ("learning rate of the item parameters", "number"),
    "update_angles.n": ("items whose embedding moved (the angles are over these: the batch's items and any the "
                        "optimizer state or weight decay moved; experiment results count the batch's only)", "count"),
    "update_angles.n_evaluated": ("items compared before and after the step (batch items and a sample of others)", "count"),
    "update_angles.median": ("median angle", "deg"),
    "update_angles.share_90pm1": ("share within 90° ± 1°", "pct"),
    "update_angles.share_90pm10": ("share within 90° ± 10°", "pct"),
    "update_angles.mean": ("mean angle", "deg"),
    "update_angles.min": ("smallest angle", "deg"),
    "update_angles.max": ("largest angle", "deg"),
    "update_angles.max_abs_deviation_from_90": ("largest distance from 90°, |angle − 90°|", "deg"),
    **_spread("pythagorean_residual"),
    **_spread("growth_per_update", "c/s² per step"),
    **_spread("growth_per_update.per_appearance", "c/s² per copy of the item in the batch"),
    **_spread("growth_per_update.relative_change_of_s", "measured change of s = ‖q‖², (s′ − s)/s"),
    "growth_per_update.definition": ("definition", "text"),
    "c2_second_difference.epsilons": ("step sizes ε", "text"),
    "c2_second_difference.relative": ("‖f(θ+εv) + f(θ−εv) − 2f(θ)‖ / ‖f(θ)‖ at each ε (worst direction)", "text"),
    "c2_second_difference.n_directions": ("random directions v", "count"),
    "c2_second_difference.n_items": ("items probed", "count"),
    "c2_second_difference.tolerance": ("tolerance (linear at or below it)", "number"),
    "c2_second_difference.linear": ("item encoder linear in its parameters (C2 holds)", "bool"),
    "c2_second_difference.output_dtype": ("dtype the item encoder returns", "text"),
    "c2_second_difference.flat_over_epsilon": ("above the tolerance but flat over ε (rounding, not curvature)", "bool"),
    "c2_second_difference.rounding_level": ("rounding level (8 × eps of the tower's coarsest float type)", "number"),
    "c3_cross_jacobian.items": ("item rows probed", "text"),
    "c3_cross_jacobian.n_items": ("items probed", "count"),
    "c3_cross_jacobian.n_pairs": ("pairs of distinct items", "count"),
    "c3_cross_jacobian.max_offdiag_relative": ("largest ‖J_i J_jᵀ‖, relative (0: no shared parameters)", "number"),
    "c3_cross_jacobian.median_offdiag_relative": ("median ‖J_i J_jᵀ‖, relative", "number"),
    "c3_cross_jacobian.max_isotropy_deviation": ("largest deviation of J_i J_iᵀ from a multiple of I, relative", "number"),
    "c3_cross_jacobian.n_items_without_parameters": ("items with no parameters of their own", "count"),
    "c3_cross_jacobian.tolerance": ("tolerance", "number"),
    "c3_cross_jacobian.shared": ("parameters shared between items (C3 violated)", "bool"),
    "c3_cross_jacobian.isotropic": ("J_i J_iᵀ isotropic", "bool"),
    "c3_cross_jacobian.dim": ("embedding width (blocks are dim × dim)", "count"),
    "c3_cross_jacobian.n_coordinates": ("output coordinates sampled per item (dim: exact)", "count"),
    "c3_cross_jacobian.max_offdiag_standard_error": ("standard error of the largest ‖J_i J_jᵀ‖ (jackknife over coordinates)", "number"),
    "c3_cross_jacobian.max_isotropy_standard_error": ("standard error of the largest isotropy deviation (jackknife)", "number"),
    "c3_cross_jacobian.support_items": ("items whose gradient supports were compared", "count"),
    "c3_cross_jacobian.support_sharing_items": ("of those, items sharing a parameter entry with another", "count"),
    "c3_cross_jacobian.support_indexed_per_item": ("each item moves its own row of every parameter tensor", "bool"),
    "c3_cross_jacobian.support_exhaustive": ("every item of the catalogue compared", "bool"),
    "c3_user_cross_jacobian.n_users": ("users probed (the probe batch's first)", "count"),
    "c3_user_cross_jacobian.n_items": ("items compared with them", "count"),
    "c3_user_cross_jacobian.max_relative": ("largest ‖J_i J_uᵀ r‖, relative (0: the user tower reads no item parameter)", "number"),
    "c3_user_cross_jacobian.reads_items": ("user outputs depend on item parameters", "bool"),
    "c3_user_cross_jacobian.user": ("user row of the largest block", "text"),
    "c3_user_cross_jacobian.item": ("item row of the largest block", "text"),
    "c3_user_cross_jacobian.tolerance": ("tolerance", "number"),
    "c3_user_cross_jacobian.dim": ("embedding width", "count"),
    "c3_user_cross_jacobian.coupled": ("user-side gradients move item embeddings (C3 violated)", "bool"),
    "c3_user_cross_jacobian.exhaustive": ("every item of the catalogue compared", "bool"),
    "c4_gradient_alignment.n": ("item slots of the batch", "count"),
    "c4_gradient_alignment.median": ("median |cos(q, ∇_q L)|", "number"),
    "c4_gradient_alignment.max": ("largest |cos(q, ∇_q L)|", "number"),
    "c4_gradient_alignment.tolerance": ("tolerance (orthogonal at or below it)", "number"),
    "c4_gradient_alignment.orthogonal": ("gradient orthogonal to the embedding (C4 holds)", "bool"),
    "c4_gradient_alignment.n_rounding": ("item slots whose gradient is at rounding level (left out)", "count"),
    "c4_gradient_alignment.unmeasured": ("why no item slot was graded", "text"),
    "errors.item_tower": ("item tower structure", "text"),
    "errors.c2": ("C2 second difference", "text"),
    "errors.c3": ("C3 cross Jacobian", "text"),
    "errors.c3_user": ("C3 user tower against the item parameters", "text"),
    "errors.c4": ("C4 gradient alignment", "text"),
    "errors.update": ("update step (angles and growth)", "text"),
}
"""Dotted probe key -> (reader label, unit)."""

INPUT_LABELS = {
    "written_back": "popaudit mitigate writes it back",
    "rescaled_alpha": "alpha it already carries (a popaudit mitigate output)",
    "rescaled_from": "table it was rescaled from",
}
"""Reader labels of the ``inputs`` fields that say what ``popaudit mitigate`` does with the model."""


def probes_tables(probes: Mapping[str, Any]) -> list[tuple[str, str, Table]]:
    """(key, title, table) per probe block, every field under its reader label and unit
    (:mod:`auditor.report.labels`, in its order): update angles first, then the probe
    setup (top-level scalars), then each other block."""
    out: list[tuple[str, str, Table]] = []
    angles = probes.get("update_angles")
    if isinstance(angles, Mapping):
        out.append(("update_angles", probe_title("update_angles"), _probe_table(angles, "update_angles.")))
    setup = {k: v for k, v in probes.items() if not isinstance(v, Mapping)}
    if setup:
        out.append(("setup", probe_title("setup"), _probe_table(setup, "")))
    for name, value in probes.items():
        if isinstance(value, Mapping) and name != "update_angles":
            out.append((name, probe_title(name), _probe_table(value, name + ".")))
    return out


def _probe_table(block: Mapping[str, Any], prefix: str) -> Table:
    """One probe block's fields (the angle histogram is a figure, not rows)."""
    order = {key: i for i, key in enumerate(PROBE_FIELDS)}
    fields_ = sorted((prefix + k for k, _ in flatten(block)), key=lambda k: order.get(k, len(order)))
    values = dict((prefix + k, v) for k, v in flatten(block))
    rows = []
    for key in fields_:
        if key.startswith("update_angles.histogram"):
            continue
        label, unit = PROBE_FIELDS.get(key, (key[len(prefix):], "text"))  # a new field: its own name
        rows.append((label, _probe_value(values[key], unit)))
    return Table(("statistic", "value"), tuple(rows), (False, True))


def _probe_value(value: Any, unit: str) -> str:
    if unit == "deg":
        return _degrees(value)
    if unit == "pct":
        return fmt_pct(value)
    if unit == "count" and isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if unit == "text" and value == {}:
        return "none"
    return fmt_value(value)


def probe_title(key: str) -> str:
    """The reader's title of a probe block (``c3_cross_jacobian`` -> ``C3 no sharing: ...``);
    an unknown block: its key in words."""
    if key in PROBE_TITLES:
        return PROBE_TITLES[key]
    words = key.replace("_", " ").strip()
    if len(words) > 1 and words[0] == "c" and words[1].isdigit():
        words = "C" + words[1:]
    return words[:1].upper() + words[1:]


def _degrees(value: Any) -> str:
    text = fmt_num(value, 2)
    return text if text == MISSING else f"{text}°"
