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
from auditor.conditions.config_scope import (
    config_value,
    find_optimizer,
    named_entry,
    optimizer_scopes,
    scoped_value,
)
from auditor.conditions.state_reading import StateReading, off_every_group
from auditor.trace_section import NO_END, TrainingAngles, TrainingSection
from auditor.optimizers import (
    ADAPTIVE,
    as_float,
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


TIERS = {Origin.STATE: 0, Origin.PROBE: 0, Origin.TRACE: 0, Origin.CONFIG: 1, Origin.DECLARED: 2, Origin.ASSUMED: 2}
"""The one ranking of evidence: measured (optimizer state, probes, a trace of this model) over
the recorded config over what the user or a plugin declares (and its assumed defaults). A
weaker source that disagrees with a stronger one loses, and a warning names both
(:func:`merge_optimizer_facts`; plugin verdicts: :mod:`~auditor.conditions.ranking`)."""


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


@dataclass(frozen=True)
class RecordedConfig:
    """Training settings the file's config records."""

    optimizer: Fact[str] | None = None
    optimizer_unnamed: str = ""
    loss_unnamed: str = ""
    """The key path of an optimizer or loss entry recorded as a mapping that names nothing."""
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
    """The settings in a recorded config (popaudit, Lightning ``hyper_parameters``, ...),
    read by one rule (:mod:`~auditor.conditions.config_scope`): an optimizer or loss entry is
    text or a mapping named under ``name``/``type``/``class_path``/``_target_``…; the
    optimizer's numbers come only from its own blocks, never another side's or module's.
    """
    found: dict[str, Any] = {}
    optimizer = find_optimizer(config)
    if optimizer is not None and optimizer.entry.name is None:  # said by C1
        found["optimizer_unnamed"] = optimizer.entry.key
    elif optimizer is not None and optimizer.entry.name is not None:
        kind, found["momentum_implied"] = normalise_optimizer(optimizer.entry.name)
        found["optimizer"] = Fact(kind or optimizer.entry.name, Origin.CONFIG, optimizer.entry.key)
    scopes = optimizer_scopes(config, optimizer)
    for attr, names in _NUMBER_NAMES:
        number = scoped_value(scopes, names) if attr in OPTIMIZER_SETTINGS else config_value(config, names)
        if number is not None and (amount := as_float(number[0])) is not None:
            found[attr] = Fact(int(amount) if attr == "batch_size" else amount, Origin.CONFIG, number[1])
    for attr, names in _TEXT_NAMES:
        if attr == "loss":  # a name, or a mapping that names it (or nothing: said by C4)
            loss = named_entry(config, names)
            if loss is not None and loss.name is None:
                found["loss_unnamed"] = loss.key
            elif loss is not None and loss.name is not None:
                found["loss"] = Fact(loss.name, Origin.CONFIG, loss.key)
            continue
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
    unnamed: str = ""
    """The key path of the recorded config's optimizer entry that names no optimizer."""

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
    sources leave open; a weaker source that disagrees is a warning naming both, and loses.
    ``rate``: the file's training rate where its stored rates differ
    (:func:`~auditor.conditions.rates.training_rate`, which warns of those), which the
    learning rate is then. Where differing param groups can hold the item table
    (``state.ambiguous``) only the learning rate is merged: the one every candidate records,
    else the config's or the declared where it is one of the candidates' rates
    (:func:`~auditor.conditions.state_reading.off_every_group`; C1 rests on the groups,
    :mod:`~auditor.conditions.c1_sgd`)."""
    kind: Fact[str] | None = None
    numbers: dict[str, Fact[float] | None] = {"momentum": None, "weight_decay": None, "lr": None}
    if state.group is not None:
        group = state.group
        # An unrecognised kind leaves the name to the config or the declaration.
        kind = None if group.kind == "unknown" else Fact(group.kind, Origin.STATE)
        for name, value in (("momentum", group.momentum), ("weight_decay", group.weight_decay), ("lr", group.lr)):
            numbers[name] = None if value is None else Fact(value, Origin.STATE)
    elif state.ambiguous and (shared := state.shared_lr()) is not None:
        numbers["lr"] = Fact(shared, Origin.STATE, "every candidate param group")
    names = ("lr",) if state.ambiguous else tuple(numbers)
    if config.optimizer is not None and not state.ambiguous:
        if kind is None:
            kind = config.optimizer
        elif optimizer_family(config.optimizer.value) != optimizer_family(kind.value):
            warnings.append(
                f"the recorded config names optimizer {config.optimizer.value!r} but the optimizer state is "
                f"{kind.value}; the optimizer state wins"
            )
    for name in names:
        recorded: Fact[float] | None = getattr(config, name)
        current = numbers[name]
        if recorded is None or (name == "momentum" and kind is not None and kind.value in ADAPTIVE):
            continue
        if current is None:
            numbers[name] = recorded
        elif name != "lr" and not _same(recorded.value, current.value):  # training_rate warns of rates
            warnings.append(f"the recorded config's {name.replace('_', ' ')} {recorded.value:g} ({recorded.key}) "
                            f"differs from the optimizer state's {current.value:g}; the optimizer state wins")
    if rate is not None:
        numbers["lr"] = rate
    if (lr := numbers["lr"]) is not None and lr.origin is Origin.CONFIG and off_every_group(
            state, lr.value, f"the recorded config's lr {lr.value:g} ({lr.key})", warnings):
        numbers["lr"] = None
    implied = config.momentum_implied and kind is not None and kind.origin is Origin.CONFIG
    if declared.optimizer and not state.ambiguous:
        kind, implied = _declared_kind(kind, implied, declared, warnings)
    for name in names:
        value, current = getattr(declared, name), numbers[name]
        if value is None:
            continue
        if current is None:
            if name != "lr" or not off_every_group(state, float(value), f"{setting(name)} {value:g}", warnings):
                numbers[name] = Fact(value, Origin.DECLARED, name)
        elif not _same(float(value), current.value):
            warnings.append(
                f"{setting(name)} {value:g} conflicts with the file ({current.value:g} from {current.source}); "
                "the file wins"
            )
    if kind is not None and kind.origin is Origin.DECLARED and kind.value == "SGD":
        # A declared "sgd" (or "momentum" with its momentum declared) is torch.optim.SGD: what
        # nothing records takes its defaults, except a momentum the name says it has.
        for name in ("weight_decay",) if implied else ("momentum", "weight_decay"):
            if numbers[name] is None:
                numbers[name] = Fact(0.0, Origin.ASSUMED, str(declared.optimizer))
    return OptimizerFacts(kind=kind, momentum_implied=implied, unnamed=config.optimizer_unnamed, **numbers)


def _same(a: float, b: float) -> bool:
    """Whether two sources record the same setting."""
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def _declared_kind(kind: Fact[str] | None, implied: bool, declared: DeclaredTraining,
                   warnings: list[str]) -> tuple[Fact[str] | None, bool]:
    """The optimizer's name with ``--optimizer``: it fills a name the file leaves open; one that
    conflicts with the file's is a warning, and the file wins."""
    name = str(declared.optimizer)
    declared_kind, declared_implied = normalise_optimizer(name)
    if declared_implied and declared.momentum == 0:
        warnings.append(f"{setting('optimizer')} {name} names momentum but {setting('momentum')} 0 "
                        "declares none: the declarations contradict each other, and the number is taken")
    if kind is None:
        return Fact(declared_kind or name, Origin.DECLARED, "optimizer"), implied or declared_implied
    if optimizer_family(declared_kind or name) != optimizer_family(kind.value):
        warnings.append(f"{setting('optimizer')} {name} conflicts with the file ({kind.value} from "
                        f"{kind.source}); the file wins")
    return kind, implied


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
    return replace(facts, kind=kind, momentum=momentum, weight_decay=decay, lr=lr, momentum_implied=implied)


def with_trace_loss(config: RecordedConfig, trace: TraceFacts) -> RecordedConfig:
    """The recorded config with the trace's loss where the checkpoint records none (a trace
    of this model records the run's loss; one that contradicts is another run's, and has no facts)."""
    return config if config.loss is not None or trace.loss is None else replace(config, loss=trace.loss)
