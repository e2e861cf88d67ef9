"""C1 (plain SGD on the item table) from the merged optimizer facts."""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Any

from auditor.conditions.facts import TIERS, OptimizerFacts, Origin, TraceFacts
from auditor.conditions.state_reading import StateReading
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
    if state.declared_match:
        details["group_chosen_by"] = state.declared_match
    if group is not None and group.kind != "unknown":
        violations = group.violations()  # the group's kind is the merged kind here
        basis = [Origin.DECLARED if state.declared_match else Origin.STATE]
    else:
        violations, basis = _violations(facts, where)
    name = CONDITION_NAMES[C1]
    if violations:
        details["basis"] = min(basis, key=TIERS.__getitem__).value  # one recorded violation suffices
        return Condition(name, "violated", f"{where}: {'; '.join(violations)} on the item parameters", details)
    if kind == "SGD" and momentum is not None and decay is not None:
        details["basis"] = (Origin.DECLARED if state.declared_match else max(
            (f.origin for f in (facts.kind, facts.momentum, facts.weight_decay) if f is not None),
            key=TIERS.__getitem__)).value  # holding needs every fact: the weakest decides
        lr_text = f"lr={lr:g}, " if lr is not None else ""
        evidence = f"{where}: SGD ({lr_text}momentum={momentum:g}, weight_decay={decay:g})"
        elsewhere = ([f"momentum from {sources['momentum']}", f"weight decay from {sources['weight_decay']}"]
                     if sources.get("momentum") != sources.get("kind") or sources.get("weight_decay") != sources.get(
                         "kind") else [])
        if facts.lr is not None and facts.kind is not None and facts.lr.origin is not facts.kind.origin:
            elsewhere.insert(0, f"lr from {facts.lr.source}")  # never shown as the optimizer state's (QA11 N2)
        if elsewhere:
            evidence += f" [{', '.join(elsewhere)}]"
        return Condition(name, "holds", evidence, details)
    return Condition(name, "unknown", _unknown_evidence(state, facts, where), details)


def _violations(facts: OptimizerFacts, where: str) -> tuple[list[str], list[Origin]]:
    """Departures from plain SGD the merged facts record, and the sources that record them
    (a number read elsewhere than ``where``, the evidence's lead source, names its own)."""
    out: list[tuple[str, Origin]] = []
    kind = facts.kind
    if kind is not None and kind.value in ADAPTIVE:
        out.append((f"{kind.value} rescales each coordinate by its gradient history", kind.origin))
    for label, fact in (("momentum", facts.momentum), ("weight decay", facts.weight_decay)):
        if fact is not None and fact.value:
            out.append((f"{label} {fact.value:g}" + (f" (from {fact.source})" if fact.source != where else ""),
                        fact.origin))
        elif label == "momentum" and facts.momentum_implied and fact is None and kind is not None:
            out.append(("momentum (named by the optimizer, value not recorded)", kind.origin))
    if kind is not None and kind.value in ("ASGD", "LBFGS"):
        out.append((f"{kind.value} is not plain SGD", kind.origin))
    return [text for text, _ in out], [origin for _, origin in out]


def _unknown_evidence(state: StateReading, facts: OptimizerFacts, where: str) -> str:
    """Why C1 is unknown: nothing names the item table's optimizer, or what names it leaves open."""
    kind, sources = None if facts.kind is None else facts.kind.value, facts.sources()
    momentum = None if facts.momentum is None else facts.momentum.value
    decay = None if facts.weight_decay is None else facts.weight_decay.value
    if kind is None and momentum is None and decay is None and state.outside:
        return (
            f"the optimizer state does not settle the item table's optimizer ({state.outside}), and no recorded "
            f"optimizer or {setting('optimizer')}/{setting('momentum')}/{setting('weight_decay')} names it"
        )
    flags = f"{setting('optimizer')}/{setting('momentum')}/{setting('weight_decay')}"
    unnamed = (f"the recorded config's optimizer entry ({facts.unnamed}) names no optimizer (no name, type, "
               "class_path or _target_)") if facts.unnamed and kind is None else ""
    if kind is None and momentum is None and decay is None:
        return f"no optimizer state or {flags}, and {unnamed}" if unnamed else \
            f"no optimizer state, recorded optimizer or {flags}"
    if kind == "SGD":
        missing = [(n, flag) for n, flag, v in (("momentum", "momentum", momentum),
                                                 ("weight decay", "weight_decay", decay)) if v is None]
        return (
            f"{where} names SGD but not its {' or '.join(n for n, _ in missing)}; declare "
            f"{'it' if len(missing) == 1 else 'them'} ({' '.join(f'{setting(flag)} 0' for _, flag in missing)}) "
            "to settle C1"
        )
    known = [f"{n} {v:g} ({sources[k]})" for n, k, v in (("momentum", "momentum", momentum),
                                                         ("weight decay", "weight_decay", decay)) if v is not None]
    said = f"{' and '.join(known)} known" if known else "no momentum or weight decay known"
    named = f"not named ({setting('optimizer')})" if kind is None else f"{kind!r}, which is not recognised"
    return f"{said}, but the optimizer itself is {named}" + (f" ({unnamed})" if unnamed else "")


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
             f"record it (param_names), else {setting('optimizer')}/{setting('momentum')}/"
             f"{setting('weight_decay')} matching one group, a plugin's C1 evidence or a training trace "
             f"({setting('trace')}) settles it"
    )
    if state.declared_match:  # matched several candidates: it narrowed them, and chose none
        why += f" ({state.declared_match})"
        details["declared_match"] = state.declared_match
    details["basis"] = Origin.STATE.value
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
            {**details, "basis": Origin.TRACE.value},
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
    return replace(c1, status="violated", evidence=evidence, details={**c1.details, "trace_run": training.settings_run,
                                                                      "basis": Origin.TRACE.value})
