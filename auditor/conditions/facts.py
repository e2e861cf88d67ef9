"""Training facts for C1-C5, each with where it was read.

Three sources describe the item optimizer, strongest first: the recorded optimizer
state, the recorded config, and what the user declared. :func:`merge_optimizer_facts`
takes each setting from the strongest source that has it; a weaker source that
disagrees is a warning, never a change of verdict. The probes add what they measure; a
training trace (``check --trace``) adds what the monitor measured during training
(:func:`read_trace_facts`, source ``trace``) and fills what the others leave open.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any, Generic, TypeVar

from auditor.config import DeclaredTraining
from auditor.errors import setting
from auditor.model import ModelBundle
from auditor.trace_section import NO_END, TrainingAngles, TrainingSection
from auditor.optimizers import (
    ADAPTIVE,
    OptimizerGroup,
    as_float,
    item_groups,
    normalise_optimizer,
    optimizer_family,
)

V = TypeVar("V")
OPTIMIZER_SETTINGS = ("kind", "momentum", "weight_decay", "lr")
"""The optimizer facts, in the order evidence and ``details["sources"]`` list them."""


class Origin(Enum):
    """Where a fact was read; earlier members outrank later ones in the merge."""

    STATE = "optimizer state"
    CONFIG = "config"
    DECLARED = "declared"
    ASSUMED = "assumed"
    """A framework default taken for what a declaration leaves open (``optimizer`` sgd:
    torch.optim.SGD's momentum 0 and weight decay 0)."""
    PROBE = "probe"
    TRACE = "trace"
    """The training monitor's trace (``check --trace``): what it recorded or measured."""


@dataclass(frozen=True)
class Fact(Generic[V]):
    """One training setting and where it came from."""

    value: V
    origin: Origin
    key: str = ""
    """The config key path (CONFIG) or the setting's field name (DECLARED)."""

    @property
    def source(self) -> str:
        """How evidence names the source: ``optimizer state``, ``config (optim.lr)``, ``--lr``."""
        if self.origin is Origin.CONFIG:
            return f"config ({self.key})"
        if self.origin is Origin.DECLARED:
            return setting(self.key)
        if self.origin is Origin.ASSUMED:
            return f"torch.optim.SGD's default, assumed from {setting('optimizer')} {self.key}"
        if self.origin is Origin.TRACE or (self.origin is Origin.STATE and self.key):
            return f"{self.origin.value} ({self.key})"
        return str(self.origin.value)


# ---------------------------------------------------------------------------- config


def config_value(config: Mapping[str, Any] | None, names: tuple[str, ...], depth: int = 3) -> tuple[Any, str] | None:
    """The first of ``names`` found in ``config`` (top level first, then nested dicts)."""
    if not isinstance(config, Mapping):
        return None
    lowered = {str(k).lower(): k for k in config}
    for name in names:
        if name in lowered and config[lowered[name]] is not None:
            return config[lowered[name]], str(lowered[name])
    if depth > 0:
        for key, value in config.items():
            if isinstance(value, Mapping):
                found = config_value(value, names, depth - 1)
                if found is not None:
                    return found[0], f"{key}.{found[1]}"
    return None


@dataclass(frozen=True)
class RecordedConfig:
    """Training settings the file's config records."""

    optimizer: Fact[str] | None = None
    momentum_implied: bool = False
    """The optimizer's name (``nesterov``, ``momentum``) implies momentum."""
    lr: Fact[float] | None = None
    momentum: Fact[float] | None = None
    weight_decay: Fact[float] | None = None
    epochs: Fact[float] | None = None
    batch_size: Fact[int] | None = None
    loss: Fact[str] | None = None
    item_encoder: Fact[str] | None = None
    model: Fact[str] | None = None
    """The model class the config names (RecBole's ``model``), for C4 when no loss is named."""
    logq: bool = False
    """The loss subtracted log p_j from each item's logit (logQ correction, ``retrain --logq``)."""
    reg_weight: Fact[float] | None = None
    """An L2 penalty on the embeddings inside the loss (RecBole's ``reg_weight``)."""
    scoring: Fact[str] | None = None
    """How the model compares its vectors, where the file shows it (``cosine``: a Keras
    ``Dot(normalize=True)`` score layer)."""
    scoring_evidence: Fact[str] | None = None
    """Where ``scoring`` was read, in words (``its score layer `score` is Dot(normalize=True) ...``)."""


_NUMBER_NAMES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("lr", ("item_lr", "lr", "learning_rate")),
    ("momentum", ("item_momentum", "momentum")),
    ("weight_decay", ("item_weight_decay", "weight_decay", "wd")),
    ("epochs", ("epochs", "max_epochs", "n_epochs", "num_epochs")),
    ("batch_size", ("batch_size", "batchsize", "train_batch_size")),
    ("reg_weight", ("reg_weight",)),
)
_TEXT_NAMES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("loss", ("loss", "loss_name", "loss_fn", "criterion", "objective", "loss_type")),
    ("item_encoder", ("item_encoder", "item_tower")),
    ("model", ("model", "model_name")),
    ("scoring", ("scoring",)),
    ("scoring_evidence", ("scoring_evidence",)),
)


def read_config(config: Mapping[str, Any] | None) -> RecordedConfig:
    """The settings in a recorded config (popaudit, Lightning ``hyper_parameters``, ...).

    An optimizer entry may be a name or a mapping (``{"name": "sgd", "lr": ...}`` or a
    Lightning CLI ``class_path``/``init_args``); numbers inside it come first.
    """
    found: dict[str, Any] = {}
    nested: Mapping[str, Any] | None = None
    hit = config_value(config, ("item_optimizer", "optimizer", "optim", "optimizer_name", "opt", "learner"))
    if hit is not None:
        value, key = hit
        if isinstance(value, Mapping):
            nested = value.get("init_args") if isinstance(value.get("init_args"), Mapping) else value
            value = value.get("name") or value.get("type") or value.get("class_path")
        if isinstance(value, str):
            kind, found["momentum_implied"] = normalise_optimizer(value)
            found["optimizer"] = Fact(kind or value, Origin.CONFIG, key)
    for attr, names in _NUMBER_NAMES:
        number = (config_value(nested, names) if nested is not None else None) or config_value(config, names)
        if number is not None and (amount := as_float(number[0])) is not None:
            found[attr] = Fact(int(amount) if attr == "batch_size" else amount, Origin.CONFIG, number[1])
    for attr, names in _TEXT_NAMES:
        text = config_value(config, names)
        if text is not None and isinstance(text[0], str):
            found[attr] = Fact(text[0], Origin.CONFIG, text[1])
    logq = config_value(config, ("logq", "logq_correction"))
    found["logq"] = logq is not None and logq[0] is True
    taken = epochs_taken(as_float((config_value(config, ("steps",)) or (None,))[0]),
                         as_float((config_value(config, ("steps_per_epoch",)) or (None,))[0]), Origin.CONFIG)
    if taken is not None:  # a run stopped early (retrain records both): the updates it took
        found["epochs"] = taken
    return RecordedConfig(**found)


def epochs_taken(steps: float | None, per_epoch: float | None, origin: Origin) -> Fact[float] | None:
    """The epochs a run trained, as its optimizer steps over the steps of an epoch (C5
    projects the updates taken, not the epochs begun); None unless both are known."""
    if steps is None or per_epoch is None or per_epoch <= 0 or steps < 0:
        return None
    return Fact(steps / per_epoch, origin, f"{steps:g} steps taken ÷ {per_epoch:g} steps per epoch")


# ---------------------------------------------------------------------------- optimizer state


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


# ---------------------------------------------------------------------------- merge


@dataclass(frozen=True)
class OptimizerFacts:
    """The item optimizer's settings, each from the strongest source that records it."""

    kind: Fact[str] | None = None
    momentum: Fact[float] | None = None
    weight_decay: Fact[float] | None = None
    lr: Fact[float] | None = None
    momentum_implied: bool = False
    """The optimizer's name implies momentum although no value is recorded."""

    def sources(self) -> dict[str, str]:
        """Setting -> source, in the order the merge took them (C1's ``details``)."""
        ranks = list(Origin)
        facts = [(name, getattr(self, name)) for name in OPTIMIZER_SETTINGS if getattr(self, name) is not None]
        facts.sort(key=lambda item: (ranks.index(item[1].origin), OPTIMIZER_SETTINGS.index(item[0])))
        return {name: fact.source for name, fact in facts}


def merge_optimizer_facts(
    state: StateReading, config: RecordedConfig, declared: DeclaredTraining, warnings: list[str],
    rate: Fact[float] | None = None,
) -> OptimizerFacts:
    """Optimizer state, then config, then declarations: each fills only what the stronger
    sources leave open; a weaker source that disagrees is a warning and loses. ``rate``:
    the file's training rate where its stored rates differ
    (:func:`~auditor.conditions.rates.training_rate`), which the learning rate is then."""
    if state.ambiguous:
        return OptimizerFacts()
    kind: Fact[str] | None = None
    numbers: dict[str, Fact[float] | None] = {"momentum": None, "weight_decay": None, "lr": None}
    if state.group is not None:
        group = state.group
        # An unrecognised kind leaves the name to the config or the declaration.
        kind = None if group.kind == "unknown" else Fact(group.kind, Origin.STATE)
        for name, value in (("momentum", group.momentum), ("weight_decay", group.weight_decay), ("lr", group.lr)):
            numbers[name] = None if value is None else Fact(value, Origin.STATE)
    if config.optimizer is not None:
        if kind is None:
            kind = config.optimizer
        elif optimizer_family(config.optimizer.value) != optimizer_family(kind.value):
            warnings.append(
                f"the recorded config names optimizer {config.optimizer.value!r} but the optimizer state is "
                f"{kind.value}; the optimizer state wins"
            )
    for name in numbers:
        recorded: Fact[float] | None = getattr(config, name)
        adaptive_momentum = name == "momentum" and kind is not None and kind.value in ADAPTIVE
        if numbers[name] is None and recorded is not None and not adaptive_momentum:
            numbers[name] = recorded
    if rate is not None:
        numbers["lr"] = rate
    implied = config.momentum_implied and kind is not None and kind.origin is Origin.CONFIG
    if declared.optimizer:
        declared_kind, declared_implied = normalise_optimizer(declared.optimizer)
        if declared_implied and declared.momentum == 0:
            warnings.append(f"{setting('optimizer')} {declared.optimizer} names momentum but {setting('momentum')} 0 "
                            "declares none: the declarations contradict each other, and the number is taken")
        if kind is None:
            kind = Fact(declared_kind or declared.optimizer, Origin.DECLARED, "optimizer")
            implied = implied or declared_implied
        elif optimizer_family(declared_kind or declared.optimizer) != optimizer_family(kind.value):
            warnings.append(
                f"{setting('optimizer')} {declared.optimizer} conflicts with the file ({kind.value} from "
                f"{kind.source}); the file wins"
            )
    for name, current in list(numbers.items()):
        value = getattr(declared, name)
        if value is None:
            continue
        if current is None:
            numbers[name] = Fact(value, Origin.DECLARED, name)
        elif not math.isclose(float(value), current.value, rel_tol=1e-9, abs_tol=1e-12):
            warnings.append(
                f"{setting(name)} {value:g} conflicts with the file ({current.value:g} from {current.source}); "
                "the file wins"
            )
    if kind is not None and kind.origin is Origin.DECLARED and kind.value == "SGD" and not implied:
        # A declared "sgd" means torch.optim.SGD: what nothing records takes its defaults.
        for name in ("momentum", "weight_decay"):
            if numbers[name] is None:
                numbers[name] = Fact(0.0, Origin.ASSUMED, str(declared.optimizer))
    return OptimizerFacts(kind=kind, momentum_implied=implied, **numbers)


# ---------------------------------------------------------------------------- trace


@dataclass(frozen=True)
class TraceFacts:
    """What a training trace says about the training, each fact with source ``trace``."""

    optimizer: Fact[str] | None = None
    """The optimizer's class name the monitor was given."""
    lr: Fact[float] | None = None
    """The item table's learning rate at the last record that knew it."""
    epochs: Fact[float] | None = None
    """Epochs the trace saw begin."""
    angles: TrainingAngles | None = None
    """The measured update angles, pooled (None: none measured, or the trace is another model's)."""
    momentum: Fact[float] | None = None
    weight_decay: Fact[float] | None = None
    loss: Fact[str] | None = None
    """The momentum, weight decay and loss the trace header's config records."""


EPOCHS_BEGUN = ("epochs begun: training ended within the last, whose steps the trace does not record, so "
                 "the projection counts it whole and is an upper bound")
"""The trace's epochs fact of a run that ended within an epoch of unknown length (C5 says so)."""


def read_trace_facts(training: TrainingSection | None) -> TraceFacts:
    """The facts of a training section; none from a trace of another model (its
    figures describe another table)."""
    if training is None or not training.matches_model:
        return TraceFacts()
    lr = next(((p.step, p.lr) for p in reversed(training.points) if p.lr is not None), None)
    kind = None
    if training.optimizer:
        kind, _implied = normalise_optimizer(training.optimizer)
    epochs = epochs_taken(training.steps, training.steps_per_epoch, Origin.TRACE) \
        or (None if training.epochs is None else Fact(float(training.epochs), Origin.TRACE, EPOCHS_BEGUN
                                                      if training.ended_within_epoch else "epochs"))
    if epochs is not None and not training.complete:  # it died or still runs: what it recorded, at least
        epochs = replace(epochs, key=epochs.key.replace("steps taken", "steps recorded") + NO_END)
    return TraceFacts(
        optimizer=Fact(kind or training.optimizer, Origin.TRACE, training.settings_key("optimizer")) if training.optimizer else None,
        lr=None if lr is None else Fact(lr[1], Origin.TRACE, f"lr at step {lr[0]}"),
        epochs=epochs,
        angles=training.evidence,
        momentum=_recorded(training.recorded_momentum, training.settings_key("momentum")),
        weight_decay=_recorded(training.recorded_weight_decay, training.settings_key("weight_decay")),
        loss=None if training.recorded_loss is None else Fact(training.recorded_loss, Origin.TRACE,
                                                              "the trace's config.loss"),
    )


def _recorded(value: float | None, key: str) -> Fact[float] | None:
    """A number the trace's config records (at ``key``), as a trace fact."""
    return None if value is None else Fact(value, Origin.TRACE, key)


def with_trace(facts: OptimizerFacts, trace: TraceFacts) -> OptimizerFacts:
    """The merged optimizer facts with the trace's filling what no file or declaration says
    (the optimizer's name, the learning rate, its config's momentum and weight decay; not
    an adaptive optimizer's momentum, which C1 does not read)."""
    kind = facts.kind if facts.kind is not None else trace.optimizer
    lr = facts.lr if facts.lr is not None else trace.lr
    implied = facts.momentum_implied
    if facts.kind is None and trace.optimizer is not None:
        implied = normalise_optimizer(trace.optimizer.value)[1]
    adaptive = kind is not None and kind.value in ADAPTIVE
    momentum = facts.momentum if facts.momentum is not None or adaptive else trace.momentum
    decay = facts.weight_decay if facts.weight_decay is not None else trace.weight_decay
    return OptimizerFacts(kind=kind, momentum=momentum, weight_decay=decay, lr=lr, momentum_implied=implied)


def with_trace_loss(config: RecordedConfig, trace: TraceFacts) -> RecordedConfig:
    """The recorded config with the trace's loss where the checkpoint records none (a trace
    of this model records the run's loss; one that contradicts is another run's, and has no facts)."""
    return config if config.loss is not None or trace.loss is None else replace(config, loss=trace.loss)
