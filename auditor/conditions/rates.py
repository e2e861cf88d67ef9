"""Which learning rate a checkpoint trained at, where its stored settings disagree.

A torch learning-rate scheduler leaves its last, annealed rate in the optimizer state's
``lr`` and the rate training started at in ``initial_lr``; a recorded config holds the
rate the run was launched with. C5 asks whether the rate training ran at was large enough,
which the last scheduled rate does not say: the rate used is ``initial_lr``, else the
state's ``lr`` (no torch scheduler ran, or it would have set ``initial_lr``: the state's
rate is the one the optimizer stepped with, where a config may hold a default the run
overrode), else the config's. Where these differ, a warning says so and names the one
used (one policy, here).
"""

from __future__ import annotations

import math

from auditor.conditions.facts import Fact, Origin, RecordedConfig
from auditor.conditions.state_reading import StateReading
from auditor.loading.trace_input import LR_TOLERANCE
from auditor.optimizers import as_float


def training_rate(state: StateReading, config: RecordedConfig, warnings: list[str]) -> Fact[float] | None:
    """The item table's training rate from the optimizer state and the config (None when
    neither records one), with a warning where their rates differ."""
    group = state.group
    stored: list[Fact[float]] = []
    if group is not None:
        initial = as_float(group.settings.get("initial_lr"))
        if initial is not None and math.isfinite(initial) and initial > 0:
            stored.append(Fact(initial, Origin.STATE, "initial_lr"))
    if group is not None and group.lr is not None:
        stored.append(Fact(group.lr, Origin.STATE))
    if config.lr is not None:
        stored.append(config.lr)
    if not stored:
        return None
    used = stored[0]
    differ = [f for f in stored[1:] if not math.isclose(f.value, used.value, rel_tol=LR_TOLERANCE)]
    if not differ:  # one rate: read where it always was, the state's lr first
        plain = [f for f in stored if f.origin is Origin.STATE and not f.key]
        return plain[0] if plain else used
    named = ", ".join(f"{_name(f)} {f.value:g}" for f in stored)
    warnings.append(
        f"the stored learning rates differ ({named}; a scheduler leaves its last rate in the optimizer "
        f"state's lr); the audit uses {used.value:g} from {_name(used)}, the rate training ran at"
    )
    return used


def _name(fact: Fact[float]) -> str:
    """How the warning names a stored rate."""
    if fact.origin is Origin.STATE:
        return f"optimizer state {fact.key or 'lr'}"
    return fact.source
