"""Plugin-declared verdicts against what popaudit inferred, by the one ranking of evidence
(:data:`~auditor.conditions.facts.TIERS`): measured (numeric probes, the trained table, the
checkpoint's optimizer state, a trace of this model) over the recorded config over a
declaration (a plugin's ``popaudit_condition_evidence``, the CLI's settings).

A declaration fills what popaudit could not establish. One that contradicts a verdict from a
stronger source loses: that verdict stands, the declaration is kept in the details and
evidence, and a warning names both. Against a verdict from the CLI's declarations (the same
rank) the plugin's is taken, and a warning names both. A reading of the tensors' structure
alone (an id table is linear by construction) ranks nothing: the plugin's author knows the
tower that serves, which the file may not show; a recorded item encoder (``item_encoder``)
is the recorded config.
"""

from __future__ import annotations

from auditor.conditions.c2_c3_encoder import RECORDED_ENCODER
from auditor.conditions.facts import TIERS, Origin
from auditor.errors import setting
from auditor.plugins import DeclaredConditions
from auditor.result import C1, C2, C3, C4, C5, CONDITION_NAMES, Condition

DECLARED_TIER = TIERS[Origin.DECLARED]
_MEASURED = {C2: "second_difference", C3: "cross_jacobian", C4: "gradient_alignment"}
"""The details key of each condition's numeric probe."""
_PROBE = (TIERS[Origin.PROBE], "popaudit's numeric probe measured", "the measurement")


def verdict_basis(key: str, condition: Condition) -> tuple[int, str, str] | None:
    """(tier, what says so, what stands) of the evidence behind an inferred verdict of
    ``key``; None where it is unknown or only the tensors' structure reads it."""
    details = condition.details
    if condition.status == "unknown":
        return None
    if key in _MEASURED and _MEASURED[key] in details:
        return _PROBE
    if key in (C2, C3) and condition.evidence.startswith(RECORDED_ENCODER):
        return TIERS[Origin.CONFIG], "the recorded item encoder gives", "the recorded config"
    if key == C4 and details.get("decided_by_trace"):
        return TIERS[Origin.TRACE], "the training trace's update angles show", "the measurement"
    if key == C1:
        origin = next((o for o in Origin if o.value == details.get("basis")), None)
        if origin is None:
            return None
        says, stands = _C1_SOURCES.get(origin) or (
            f"the declared {setting('optimizer')}/{setting('momentum')}/{setting('weight_decay')} give",
            "the declaration")  # named at call time: the CLI spells the flags, the library the fields
        return TIERS[origin], says, stands
    if key == C4 and (details.get("scoring") == "cosine" or details.get("loss_source")):
        if details.get("loss_source") == setting("loss"):
            return DECLARED_TIER, f"{setting('loss')} gives", "the declaration"
        return TIERS[Origin.CONFIG], f"the file's recorded loss or scoring ({details.get('loss_source')}) gives", \
            "the recorded loss"
    decided = str(details.get("decided_by") or "") if key == C5 else ""
    if "projection" in decided:
        return _PROBE
    if decided == "table":
        return TIERS[Origin.STATE], "the trained table's norms grade", "the trained table"
    return None


_C1_SOURCES = {
    Origin.STATE: ("the checkpoint's optimizer state shows", "the optimizer state"),
    Origin.TRACE: ("the training trace shows", "the trace"),
    Origin.PROBE: ("popaudit's probe shows", "the measurement"),
    Origin.CONFIG: ("the recorded config shows", "the recorded config"),
}


def apply_plugin_evidence(
    declared: DeclaredConditions, conditions: dict[str, Condition], keys: tuple[str, ...], warnings: list[str],
) -> None:
    """Plugin-declared verdicts (the first plugin to declare a key wins) replace inferred ones
    that are unknown, agree, or rest on the CLI's declarations; against a stronger source
    (:func:`verdict_basis`) the inferred verdict stands. Every disagreement is a warning."""
    for key in keys:
        cond = declared.conditions.get(key)
        if cond is None:
            continue
        inferred = conditions[key]
        source = cond.details["source"]
        basis = verdict_basis(key, inferred)
        if basis is not None and cond.status != inferred.status:
            tier, says, stands = basis
            if tier < DECLARED_TIER:
                warnings.append(f"{key}: plugin {source!r} declares it {cond.status}, but {says} it "
                                f"{inferred.status}; {stands} stands ({inferred.evidence})")
                conditions[key] = Condition(
                    inferred.name, inferred.status,
                    f"{inferred.evidence}; plugin {source!r} declared it {cond.status}, which {stands} contradicts",
                    {**inferred.details, "declared": {"status": cond.status, "evidence": cond.evidence,
                                                      "source": source}},
                )
                continue
            warnings.append(f"{key}: plugin {source!r} declares it {cond.status}, where {says} it "
                            f"{inferred.status}; the plugin's declaration is taken")
        conditions[key] = Condition(
            cond.name or CONDITION_NAMES[key],
            cond.status,
            f"declared by a plugin ({source}): {cond.evidence}",
            {**cond.details, "inferred": {"status": inferred.status, "evidence": inferred.evidence}},
        )
