"""Which recorded param group trains the item table (:func:`read_optimizer_state`), and
what the user's declarations add where several differing groups can (:func:`settle_by_declaration`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from auditor.config import DeclaredTraining
from auditor.errors import setting
from auditor.loading.trace_input import LR_TOLERANCE
from auditor.model import ModelBundle
from auditor.optimizers import OptimizerGroup, as_float, item_groups, normalise_optimizer, optimizer_family


@dataclass(frozen=True)
class StateReading:
    """What the checkpoint's optimizer state shows about the item table's optimizer."""

    groups: tuple[OptimizerGroup, ...] = ()
    group: OptimizerGroup | None = None
    """The param group that trains the item table, when it is known."""
    note: str = ""
    """Where the evidence was read (``optimizer state, param group 1 (...)``)."""
    candidates: tuple[OptimizerGroup, ...] = ()
    """The groups that can hold the item table."""
    ambiguity: str = ""
    """Why several groups remain (``user_emb.weight has the item table's shape ...``)."""
    ambiguous: bool = False
    """The candidate groups differ and none is known to hold the item table: C1 rests on them alone."""
    outside: str = ""
    """Why the recorded optimizer state says nothing of the item table (it does not hold it, or
    does not show that it does): C1 then rests on the config and declarations."""
    declared_match: str = ""
    """Which declared settings (``--weight-decay 0.001``) picked :attr:`group` among differing
    candidates, or how many candidates they match (:func:`settle_by_declaration`)."""

    def shared_lr(self) -> float | None:
        """The learning rate every candidate group records alike (None where they differ)."""
        rates = {g.lr for g in self.candidates or self.groups}
        return next(iter(rates)) if len(rates) == 1 else None

    def open_rates(self) -> tuple[OptimizerGroup, ...]:
        """The candidate groups whose differing learning rates leave the item table's rate
        open (empty where the item table's group, or every candidate, records one rate)."""
        if (self.group is not None and self.group.lr is not None) or self.shared_lr() is not None:
            return ()
        candidates = self.candidates or self.groups
        return candidates if len({rate for g in candidates for rate in _rates(g).values()}) > 1 else ()


def off_every_group(state: StateReading, value: float, named: str, warnings: list[str]) -> bool:
    """Whether a weaker source's learning rate (``named``: ``--lr 7``, the config's) is none
    of the rates recorded for the candidate groups where those differ (:meth:`StateReading.open_rates`):
    the item table trained at one of them, so such a rate contradicts the optimizer state and
    loses, warned, as a declared optimizer that matches no group does (QA11 conditions N2)."""
    groups = state.open_rates()
    recorded = [rate for g in groups for rate in _rates(g).values()]
    if not groups or any(math.isclose(value, rate, rel_tol=LR_TOLERANCE) for rate in recorded):
        return False
    listing = "; ".join(f"{g.label}: " + ", ".join(f"{key} {rate:g}" for key, rate in _rates(g).items())
                        for g in groups)
    warnings.append(f"{named} matches none of the learning rates of the {len(groups)} param groups that can hold "
                    f"the item table ({listing}); the optimizer state wins, so no learning rate is taken from it")
    return True


def _rates(group: OptimizerGroup) -> dict[str, float]:
    """The learning rates a group records: its ``lr`` and a scheduler's ``initial_lr``."""
    recorded = {"lr": group.lr, "initial_lr": as_float(group.settings.get("initial_lr"))}
    return {key: rate for key, rate in recorded.items() if rate is not None and math.isfinite(rate)}


def read_optimizer_state(bundle: ModelBundle, warnings: list[str]) -> StateReading:
    """Find the item table's param group in the recorded optimizer states
    (:func:`~auditor.optimizers.item_groups`: identified, or every candidate alike)."""
    found = item_groups(bundle)
    if found.n_states and not found.groups:
        state = bundle.optimizer_state or {}
        warnings.append(
            "the checkpoint's optimizer state has no torch param_groups "
            f"(keys: {', '.join(map(str, list(state)[:8]))}); C1 uses the config and flags"
        )
    groups = found.groups
    if not groups:
        return StateReading()
    if bundle.format == "popaudit":  # popaudit records the item tower's optimizer alone
        alike = len({(g.kind, g.momentum, g.weight_decay) for g in groups}) == 1
        return StateReading(groups=groups, group=groups[0] if alike else None,
                            note="the item tower's optimizer state")
    if found.outside:
        return StateReading(groups=groups, outside=found.outside)
    group = found.settled()
    of = f" of {found.n_states}" if found.n_states > 1 else ""
    if group is None:
        return StateReading(groups=groups, candidates=found.candidates, ambiguity=found.how, ambiguous=True)
    if len(groups) == 1:
        note = f"optimizer state ({found.how})"
    elif len(found.candidates) == 1:
        note = f"optimizer state, {group.label.replace(', ', f'{of}, ', 1)} (item table: {found.how})"
    else:
        differ = "" if group.lr is not None or found.candidates[0].lr is None else ", their learning rates differ"
        note = (f"optimizer state ({len(found.candidates)} param groups can hold the item table, "
                f"all alike{differ}: {found.how})")
    return StateReading(groups=groups, group=group, note=note, candidates=found.candidates)


def settle_by_declaration(state: StateReading, declared: DeclaredTraining, warnings: list[str]) -> StateReading:
    """Where differing param groups can hold the item table, the declared optimizer, momentum
    and weight decay pick the one candidate they all match, which C1 then reads (its evidence
    says so); a declaration that matches no candidate is a warning and leaves C1 to the
    candidates. The recorded groups stay the evidence: a declaration only chooses among them."""
    if not state.ambiguous:
        return state
    tests = _declared_tests(declared)
    if not tests:
        return state
    candidates = state.candidates or state.groups
    matching = [g for g in candidates if all(test(g) for _, test in tests)]
    named = " ".join(text for text, _ in tests)
    if len(matching) == 1:
        group = matching[0]
        return replace(state, group=group, ambiguous=False, declared_match=named, note=(
            f"optimizer state, {group.label} (the item table: of the {len(candidates)} differing param groups that "
            f"can hold it, as {state.ambiguity}, the only one that matches the declared {named})"))
    if not matching:
        listing = "; ".join(f"{g.label}: {g.describe()}" for g in candidates)
        warnings.append(f"the declared {named} matches none of the {len(candidates)} param groups that can hold the "
                        f"item table ({listing}); the optimizer state wins, and C1 rests on those groups")
        return state
    return replace(state, declared_match=f"the declared {named} matches {len(matching)} of them")


def _declared_tests(declared: DeclaredTraining) -> list[tuple[str, Callable[[OptimizerGroup], bool]]]:
    """(how the report names it, whether a param group agrees) for each declared C1 setting."""
    tests: list[tuple[str, Callable[[OptimizerGroup], bool]]] = []
    if declared.optimizer:
        kind, implied = normalise_optimizer(declared.optimizer)
        family = optimizer_family(kind or declared.optimizer)
        tests.append((f"{setting('optimizer')} {declared.optimizer}",
                      lambda g: optimizer_family(g.kind) == family and (not implied or bool(g.momentum))))
    for name, value in (("momentum", declared.momentum), ("weight_decay", declared.weight_decay)):
        if value is not None:
            tests.append((f"{setting(name)} {value:g}", _agrees_on(name, value)))
    return tests


def _agrees_on(name: str, declared: float) -> Callable[[OptimizerGroup], bool]:
    """Whether a group records the declared number for setting ``name``."""
    def agrees(group: OptimizerGroup) -> bool:
        recorded: float | None = getattr(group, name)
        return recorded is not None and math.isclose(recorded, declared, rel_tol=1e-9, abs_tol=1e-12)
    return agrees
