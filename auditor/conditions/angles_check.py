"""The probe step's measured update angles against the structural reading of C1–C4.

C1–C4 together make every update orthogonal to the embedding (docs/theory.md §2), so a
probe step that measured a clearly tilted share (at most :data:`TILTED_SHARE` of the
angles within 90° ± 1°) while each of C1–C4 reads as holding shows that one of them fails
in a way its own check does not see (a parameter sharing no probe looked for, a custom
optimizer). The measured angles win: the four claims become unknown, with the figure as
the reason, and a warning says so. One rule, applied once, before C5 reads C1–C4. A step
whose gradients are all rounding (C4's probe graded no slot) measures no angle worth the name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from auditor.optimizers import ADAPTIVE
from auditor.probe_results import ProbeOutcome
from auditor.result import C1, ORTHOGONALITY_IDS, Condition
from auditor.trace_section import TILTED_SHARE


def angles_overrule(conditions: dict[str, Condition], probe: ProbeOutcome | None, warnings: list[str]) -> None:
    """Turn C1–C4 from holds to unknown where the probe step's angles contradict them."""
    update = probe.update if probe is not None else None
    if update is None or not all(conditions[k].status == "holds" for k in ORTHOGONALITY_IDS):
        return
    alignment = probe.gradient_alignment if probe is not None else None
    if alignment is not None and not alignment.n and alignment.n_rounding:
        return  # every gradient of the batch is rounding (a cosine loss in one dimension): so are the angles
    angles = update.angle_summary
    if not angles.n or angles.share_90pm1 is None or angles.share_90pm1 > TILTED_SHARE:
        return
    measured = (f"the probe step measured {angles.share_90pm1:.1%} of {angles.n} update angles within 90° ± 1° "
                f"(median {angles.median:.2f}°), where C1–C4 holding would put every one there")
    warnings.append(f"C1–C4 each read as holding, but {measured}: at least one fails in a way its own check "
                    f"does not see, so they are reported unknown (the angles are measured; the readings are not)")
    for key in ORTHOGONALITY_IDS:
        cond = conditions[key]
        conditions[key] = Condition(
            cond.name, "unknown", f"{cond.evidence}; but {measured}, so the measured angles overrule this reading",
            {**cond.details, "overruled_by_update_angles": {
                "reading": "holds", "share_90pm1": angles.share_90pm1, "n": angles.n, "threshold": TILTED_SHARE}},
        )


def overruled_by_angles(others: Mapping[str, Condition]) -> str | None:
    """What the probe step's angles measured where they overruled C1–C4 (:func:`angles_overrule`),
    as a clause ("the probe step measured … within 90° ± 1°"); None where they did not."""
    for key in ORTHOGONALITY_IDS:
        overrule = others[key].details.get("overruled_by_update_angles") if key in others else None
        if isinstance(overrule, dict):
            return (f"the probe step measured {overrule['share_90pm1']:.1%} of {overrule['n']} update angles within "
                    "90° ± 1°, which overruled C1–C4 holding")
    return None


_WHY = {
    "C2": "the item encoder is not parameter-linear",
    "C3": "item parameters shared between items or with the user tower",
    "C4": "a loss that pulls along q",
}
"""What a violated C2–C4 does to the step (C1's cause comes from its recorded settings, C3's
from what its probes found where they ran)."""


def tilt_cause(others: Mapping[str, Condition]) -> str:
    """Why the updates were not orthogonal to q, as the report's own conditions show it: the
    violated ones among C1–C4 with their cause (weight decay only where C1 records it), or
    which could not be established; never a cause the same report rules out."""
    violated = [k for k in ORTHOGONALITY_IDS if k in others and others[k].status == "violated"]
    if violated:
        return "as violated " + ", ".join(f"{k} ({_CAUSES.get(k, _why)(others[k], k)})" for k in violated) \
            + (" makes them" if len(violated) == 1 else " make them")
    unknown = [k for k in ORTHOGONALITY_IDS if k in others and others[k].status == "unknown"]
    if unknown:
        return f"from one of C1–C4 this audit could not establish ({', '.join(unknown)} unknown)"
    return "although C1–C4 read as holding (what tilts them is not shown)"


def _why(cond: Condition, key: str) -> str:
    """A violated C2 or C4's effect on the step."""
    return _WHY[key]


def _c3_cause(c3: Condition, key: str = "C3") -> str:
    """What C3's own probes found (a user tower reading item parameters, blocks J_iJ_jᵀ ≠ 0,
    a J_iJ_iᵀ that is not αI), else the condition's general cause (a verdict from the file)."""
    cross, user = c3.details.get("cross_jacobian"), c3.details.get("user_cross_jacobian")
    causes = ["the user tower reads item-tower parameters"] if isinstance(user, dict) and user.get("coupled") else []
    if isinstance(cross, dict) and cross.get("shared"):
        causes.append("item parameters shared between items (J_iJ_jᵀ ≠ 0)")
    if isinstance(cross, dict) and cross.get("isotropic") is False:
        causes.append("an item Jacobian that is not isotropic (J_iJ_iᵀ ≠ αI)")
    return ", ".join(causes) or _WHY[key]


def _c1_cause(c1: Condition, key: str = C1) -> str:
    """C1's recorded departures from plain SGD (its details), or its evidence's words."""
    kind, momentum, decay = (c1.details.get(k) for k in ("optimizer", "momentum", "weight_decay"))
    causes = [f"{kind}'s per-coordinate scaling"] if kind in ADAPTIVE else []
    if isinstance(momentum, (int, float)) and momentum:
        causes.append(f"momentum {momentum:g}")
    if isinstance(decay, (int, float)) and decay:
        causes.append(f"weight decay {decay:g}")
    return ", ".join(causes) or "not a plain SGD step"


_CAUSES: dict[str, Callable[[Condition, str], str]] = {C1: _c1_cause, "C3": _c3_cause}
"""The causes read from the condition's own evidence; the others are :data:`_WHY`'s."""
