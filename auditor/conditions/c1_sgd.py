"""C1 (plain SGD on the item table) from the merged optimizer facts."""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Any

from auditor.conditions.facts import OptimizerFacts, StateReading, TraceFacts
from auditor.errors import setting
from auditor.optimizers import ADAPTIVE
from auditor.result import C1, CONDITION_NAMES, Condition, Status
from auditor.trace_section import TrainingSection


def assess_c1(state: StateReading, facts: OptimizerFacts) -> Condition:
    """Violated by anything that is not a plain SGD step: adaptive scaling, momentum,
    weight decay; holds for SGD with momentum and weight decay known to be 0; else unknown."""
    details: dict[str, Any] = {}
    if state.groups:
        details["groups"] = [g.to_dict() for g in state.groups]
    if state.ambiguous:
        return _ambiguous(state, details)
    group = state.group
    if group is not None:
        details["item_group"] = group.index
        if "initial_lr" in group.settings:
            details["initial_lr"] = group.settings["initial_lr"]
    kind = None if facts.kind is None else facts.kind.value
    momentum = None if facts.momentum is None else facts.momentum.value
    decay = None if facts.weight_decay is None else facts.weight_decay.value
    lr = None if facts.lr is None else facts.lr.value
    sources = facts.sources()
    details.update({"optimizer": kind, "lr": lr, "momentum": momentum, "weight_decay": decay, "sources": sources})
    if state.outside:
        details["item_table_outside_optimizer_state"] = state.outside
    where = state.note or (sources.get("kind") or sources.get("momentum") or sources.get("weight_decay") or "")
    if state.outside and where:
        where += f" (the optimizer state is not read for the item table: {state.outside})"
    if group is not None and group.kind != "unknown":
        violations = group.violations()  # the group's kind is the merged kind here
    else:
        violations = []
        if kind in ADAPTIVE:
            violations.append(f"{kind} rescales each coordinate by its gradient history")
        if momentum:
            violations.append(f"momentum {momentum:g}")
        elif facts.momentum_implied and momentum is None:
            violations.append("momentum (named by the optimizer, value not recorded)")
        if decay:
            violations.append(f"weight decay {decay:g}")
        if kind in ("ASGD", "LBFGS"):
            violations.append(f"{kind} is not plain SGD")
    name = CONDITION_NAMES[C1]
    if violations:
        return Condition(name, "violated", f"{where}: {'; '.join(violations)} on the item parameters", details)
    if kind == "SGD" and momentum is not None and decay is not None:
        lr_text = f"lr={lr:g}, " if lr is not None else ""
        evidence = f"{where}: SGD ({lr_text}momentum={momentum:g}, weight_decay={decay:g})"
        if sources.get("momentum") != sources.get("kind") or sources.get("weight_decay") != sources.get("kind"):
            evidence += f" [momentum from {sources['momentum']}, weight decay from {sources['weight_decay']}]"
        return Condition(name, "holds", evidence, details)
    return Condition(name, "unknown", _unknown_evidence(state, kind, momentum, decay, where), details)


def _unknown_evidence(state: StateReading, kind: str | None, momentum: float | None, decay: float | None,
                      where: str) -> str:
    """Why C1 is unknown: nothing names the item table's optimizer, or what names it leaves open."""
    if kind is None and momentum is None and decay is None and state.outside:
        return (
            f"the optimizer state does not settle the item table's optimizer ({state.outside}), and no recorded "
            f"optimizer or {setting('optimizer')}/{setting('momentum')}/{setting('weight_decay')} names it"
        )
    if kind is None and momentum is None and decay is None:
        return (
            f"no optimizer state, recorded optimizer or "
            f"{setting('optimizer')}/{setting('momentum')}/{setting('weight_decay')}"
        )
    if kind == "SGD":
        missing = [n for n, v in (("momentum", momentum), ("weight decay", decay)) if v is None]
        return (
            f"{where} names SGD but not its {' or '.join(missing)}; declare them "
            f"({setting('momentum')} 0 {setting('weight_decay')} 0) to settle C1"
        )
    return (
        f"no momentum or weight decay known, but the optimizer itself is "
        f"{'unknown' if kind is None else repr(kind) + ' (not recognised)'}"
    )


def _ambiguous(state: StateReading, details: dict[str, Any]) -> Condition:
    """Candidate param groups that differ, none known to hold the item table: violated
    only when every candidate breaks plain SGD, else unknown with the reason named."""
    candidates = state.candidates or state.groups
    statuses = {g.status() for g in candidates}
    listing = "; ".join(f"{g.label}: {g.describe()}" for g in candidates)
    status: Status = "violated" if statuses == {"violated"} else "unknown"
    details["candidate_groups"] = [g.to_dict() for g in candidates]
    why = (
        "every one breaks plain SGD" if status == "violated"
        else "which one trains the item table is not recorded; optimizers built from named_parameters() "
             f"record it (param_names), else a plugin's C1 evidence or a training trace ({setting('trace')}) "
             "settles it"
    )
    return Condition(
        CONDITION_NAMES[C1], status,
        f"optimizer state: the item table can be in any of {len(candidates)} param groups that differ "
        f"({listing}), as {state.ambiguity}; {why}",
        details,
    )


def with_trace_angles(c1: Condition, trace: TraceFacts) -> Condition:
    """C1 with the update angles a training trace measured (source ``trace``).

    Plain SGD on a cosine loss moves every embedding at 90° to itself; momentum (a step
    along earlier gradients), weight decay (a pull along -q) and adaptive steps (a
    per-coordinate rescaling) tilt it. Orthogonal measured updates therefore settle a C1
    that the file leaves unknown; updates that are not orthogonal say that one of C1–C4
    fails without telling which, so they settle nothing. A verdict from the file stands,
    with the measurement beside it.
    """
    angles = trace.angles
    if angles is None:
        return c1
    details = {**c1.details, "trace_angles": {**asdict(angles), "orthogonal": angles.orthogonal}}
    measured = f"{angles.describe()} (source: trace)"
    if c1.status == "unknown" and angles.orthogonal:
        return Condition(
            c1.name, "holds",
            f"{measured}: the geometry of plain SGD on a cosine loss (momentum, weight decay or adaptive steps "
            f"would tilt them off 90°) [the file alone: {c1.evidence}]",
            details,
        )
    if angles.orthogonal is False:
        note = f"; {measured}: not orthogonal, so at least one of C1–C4 fails"
    elif angles.orthogonal:
        note = f"; {measured}: orthogonal, as plain SGD on a cosine loss gives"
    else:
        note = f"; {measured}"
    return replace(c1, evidence=c1.evidence + note, details=details)


def with_every_run(c1: Condition, training: TrainingSection | None) -> Condition:
    """C1 judged by every run a trace of this model lists (a resumed run under other optimizer
    settings, header config ``resumed_runs``): the checkpoint and the declarations record the
    last run only, so a run that breaks C1 by the trace's settings (:attr:`TrainingSection.settings_run`,
    an adaptive optimizer, momentum or weight decay above 0) makes it violated, naming the run."""
    if training is None or not training.matches_model or training.runs < 2 or c1.status == "violated":
        return c1
    kind, momentum, decay = training.recorded_optimizer, training.recorded_momentum, training.recorded_weight_decay
    broken = ([f"{kind} rescales each coordinate by its gradient history"] if kind in ADAPTIVE else []) \
        + ([f"momentum {momentum:g}"] if momentum else []) + ([f"weight decay {decay:g}"] if decay else [])
    if not broken:
        return c1
    run = "the first run" if training.settings_run is None else f"the run resumed at step {training.settings_run:,}"
    evidence = (f"trace ({training.settings_key('optimizer')}): {'; '.join(broken)} on the item parameters in {run} "
                f"of the trace's {training.runs} runs (the checkpoint's settings are the last run's: {c1.evidence})")
    return replace(c1, status="violated", evidence=evidence, details={**c1.details, "trace_run": training.settings_run})
