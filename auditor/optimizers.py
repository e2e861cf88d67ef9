"""C1's evidence: recognising a torch optimizer from its ``state_dict`` or its name.

:func:`recognise_optimizer` reads each param group's kind (SGD, Adam, ...) and
settings; :func:`item_groups` finds which groups, of every recorded optimizer, can train
the item table (never a guess: a shape another parameter shares leaves several); :func:`normalise_optimizer` maps a
recorded or declared name to the same kinds. :mod:`auditor.conditions.facts` merges
these with the config and the declared settings; :mod:`auditor.conditions.c1_sgd`
judges C1 from them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from auditor.model import ModelBundle
from auditor.result import Status

ADAPTIVE = {  # optimizer kinds that rescale each coordinate: C1 is violated
    "Adam", "AdamW", "Adam/AdamW", "Adam-like", "Adamax", "NAdam", "RAdam", "SparseAdam",
    "Adagrad", "RMSprop", "Adadelta", "Adafactor", "Rprop", "LAMB", "LARS", "Lion",
    "Shampoo", "AdaBelief", "Yogi", "Novograd", "Adan", "adaptive (unrecognised)",
}
_OPTIMIZER_NAMES = {
    "sgd": "SGD", "momentum": "SGD", "sgdmomentum": "SGD", "momentumsgd": "SGD",
    "nesterov": "SGD", "adam": "Adam", "adamw": "AdamW", "adamax": "Adamax",
    "nadam": "NAdam", "radam": "RAdam", "sparseadam": "SparseAdam", "adagrad": "Adagrad",
    "rmsprop": "RMSprop", "adadelta": "Adadelta", "adafactor": "Adafactor", "rprop": "Rprop",
    "asgd": "ASGD", "lbfgs": "LBFGS", "lamb": "LAMB", "lars": "LARS", "lion": "Lion",
    "shampoo": "Shampoo", "adabelief": "AdaBelief", "yogi": "Yogi", "novograd": "Novograd",
    "adan": "Adan",
}
_MOMENTUM_NAMES = {"momentum", "sgdmomentum", "momentumsgd", "nesterov"}
_BUFFER_SUFFIXES = ("running_mean", "running_var", "num_batches_tracked")


@dataclass
class OptimizerGroup:
    """One param group of a torch optimizer state dict, recognised."""

    index: int
    kind: str
    lr: float | None
    momentum: float | None
    nesterov: bool
    weight_decay: float | None
    params: list[int]
    settings: dict[str, Any] = field(default_factory=dict)
    optimizer: int | None = None
    """Which recorded optimizer (0-based) holds the group, when the file holds several."""

    @property
    def label(self) -> str:
        """``param group 1``, or ``optimizer 2, param group 0`` when the file holds several."""
        where = f"optimizer {self.optimizer + 1}, " if self.optimizer is not None else ""
        return f"{where}param group {self.index}"

    @property
    def adaptive(self) -> bool:
        """Whether the kind rescales coordinates by gradient history (Adam, Adagrad, ...)."""
        return self.kind in ADAPTIVE

    def violations(self) -> list[str]:
        """Why this group's updates are not plain SGD (empty when they are)."""
        out: list[str] = []
        if self.adaptive:
            extra = f", betas={tuple(self.settings['betas'])}" if "betas" in self.settings else ""
            out.append(f"{self.kind} rescales each coordinate by its gradient history{extra}")
        if self.momentum:
            out.append(f"momentum {self.momentum:g}" + (" (Nesterov)" if self.nesterov else ""))
        if self.weight_decay:
            decoupled = " (decoupled)" if self.settings.get("decoupled_weight_decay") else ""
            out.append(f"weight decay {self.weight_decay:g}{decoupled}")
        if self.kind == "ASGD":
            out.append(f"ASGD shrinks parameters by (1 − λη) every step (λ={self.settings.get('lambd')})")
        if self.kind == "LBFGS":
            out.append("L-BFGS preconditions steps with its curvature history")
        return out

    def status(self) -> Status:
        """C1 for this group alone: violated, holds (plain SGD) or unknown (unrecognised)."""
        if self.violations():
            return "violated"
        return "holds" if self.kind == "SGD" else "unknown"

    def describe(self) -> str:
        """One line such as ``SGD (lr=0.1, momentum=0, weight_decay=0)``."""
        parts = [f"lr={self.lr:g}" if self.lr is not None else "lr=?"]
        if self.kind in ("SGD", "RMSprop"):
            parts.append(f"momentum={self.momentum:g}" if self.momentum is not None else "momentum=?")
        parts.append(f"weight_decay={self.weight_decay:g}" if self.weight_decay is not None else "weight_decay=?")
        return f"{self.kind} ({', '.join(parts)})"

    def to_dict(self) -> dict[str, Any]:
        """The group as C1's ``details["groups"]`` lists it."""
        return {
            "group": self.index, "optimizer": self.kind, "lr": self.lr, "momentum": self.momentum,
            "nesterov": self.nesterov, "weight_decay": self.weight_decay,
            "n_params": len(self.params), "status": self.status(),
            **({"optimizer_index": self.optimizer} if self.optimizer is not None else {}),
        }


def recognise_optimizer(state: Mapping[str, Any]) -> list[OptimizerGroup]:
    """Recognise each param group of a torch optimizer ``state_dict``.

    The kind comes from the group's keys (torch writes each optimizer's constructor
    arguments there) and, where keys are ambiguous, from the per-parameter state
    (``momentum_buffer``, ``exp_avg``/``exp_avg_sq``, ``exp_inf``, ``sum``, ...).
    """
    groups = state.get("param_groups")
    if not isinstance(groups, (list, tuple)) or not groups:
        return []
    per_param = state.get("state") or {}
    out: list[OptimizerGroup] = []
    for index, group in enumerate(groups):
        if not isinstance(group, Mapping):
            continue
        params = [int(p) for p in group.get("params", []) if isinstance(p, (int, np.integer, str)) and str(p).isdigit()]
        state_keys: set[str] = set()
        for p in params:
            entry = per_param.get(p, per_param.get(str(p)))
            if isinstance(entry, Mapping):
                state_keys.update(str(k) for k in entry)
        kind = _optimizer_kind(set(map(str, group)), state_keys, group)
        # Adam-family "momentum" lives in betas; only these kinds have a momentum setting.
        has_momentum = kind in ("SGD", "RMSprop", "adaptive (unrecognised)", "unknown")
        momentum = as_float(group.get("momentum")) if has_momentum else None
        settings = {
            k: (list(v) if isinstance(v, tuple) else v)
            for k, v in group.items()
            if k != "params" and isinstance(v, (int, float, bool, str, tuple, list)) and v is not None
        }
        out.append(
            OptimizerGroup(
                index=index, kind=kind, lr=as_float(group.get("lr")), momentum=momentum,
                nesterov=bool(group.get("nesterov", False)),
                weight_decay=as_float(group.get("weight_decay")), params=params, settings=settings,
            )
        )
    return out


def _optimizer_kind(keys: set[str], state_keys: set[str], group: Mapping[str, Any]) -> str:
    if "history_size" in keys:
        return "LBFGS"
    if {"lambd", "t0"} <= keys:
        return "ASGD"
    if {"etas", "step_sizes"} <= keys:
        return "Rprop"
    if "beta2_decay" in keys:
        return "Adafactor"
    if "rho" in keys and "betas" not in keys:
        return "Adadelta"
    if "lr_decay" in keys or "initial_accumulator_value" in keys:
        return "Adagrad"
    if {"alpha", "centered"} <= keys:
        return "RMSprop"
    if "betas" in keys:
        if "momentum_decay" in keys:
            return "NAdam"
        if "exp_inf" in state_keys:
            return "Adamax"
        if "amsgrad" in keys:
            # Recent torch writes decoupled_weight_decay: False for Adam, True for AdamW.
            if "decoupled_weight_decay" in keys:
                return "AdamW" if group.get("decoupled_weight_decay") else "Adam"
            return "Adam/AdamW"
        if "decoupled_weight_decay" in keys:
            return "RAdam"
        if "weight_decay" not in keys:
            return "SparseAdam"
        return "Adam-like"
    if "nesterov" in keys or "dampening" in keys:
        return "SGD"
    if state_keys & {"exp_avg_sq", "square_avg", "sum", "exp_inf", "acc_delta"}:
        return "adaptive (unrecognised)"
    return "unknown"


@dataclass(frozen=True)
class ItemGroups:
    """The recorded param groups, and those that can train the item table (:func:`item_groups`)."""

    groups: tuple[OptimizerGroup, ...] = ()
    """Every recognised param group, of every recorded optimizer."""
    candidates: tuple[OptimizerGroup, ...] = ()
    """The groups holding a parameter that can be the item table (all when nothing tells)."""
    how: str = ""
    """How the item table was found among the parameters, or why several remain."""
    n_states: int = 0
    """How many optimizer states the file holds (with or without param groups)."""
    outside: str = ""
    """Why the recorded optimizers are not shown to hold the item table (then no candidates)."""

    def settled(self) -> OptimizerGroup | None:
        """The item table's group, or the first candidate when every candidate trains it
        alike (same kind, momentum, Nesterov, weight decay): its lr kept only where all
        candidates share it. None when the candidates differ: C1 is then theirs to say."""
        if len(self.candidates) == 1:
            return self.candidates[0]
        if not self.candidates or len({_c1_terms(g) for g in self.candidates}) > 1:
            return None
        first = self.candidates[0]
        if len({(g.lr, g.settings.get("initial_lr")) for g in self.candidates}) == 1:
            return first
        settings = {k: v for k, v in first.settings.items() if k not in ("lr", "initial_lr")}
        return replace(first, lr=None, settings=settings)


def _c1_terms(group: OptimizerGroup) -> tuple[Any, ...]:
    return group.kind, group.momentum, group.nesterov, group.weight_decay, group.status()


def optimizer_states(bundle: ModelBundle) -> list[Mapping[str, Any]]:
    """The file's optimizer states: Lightning's several ``optimizer_states`` (kept whole
    by the loader), else the one state; empty when none is recorded."""
    state = bundle.optimizer_state
    if not isinstance(state, Mapping):
        return []
    several = [s for s in (state.get("optimizer_states") or []) if isinstance(s, Mapping)]
    return several if len(several) > 1 else [state]


def item_groups(bundle: ModelBundle) -> ItemGroups:
    """Which recorded param groups can train the item table (one policy for C1 and the trace).

    A parameter is identified by its recorded name (``param_names``, written by torch for an
    optimizer built from ``named_parameters()``), else by shape: a per-parameter state of
    another parameter's shape rules it out, one of the item table's shape makes it a
    candidate, and a parameter without state (plain SGD keeps none) is one while fewer
    parameters show the item table's shape than the model has of that shape. A shape that
    the user table (or any other parameter) shares therefore never picks a group alone.
    """
    states = optimizer_states(bundle)
    several = len(states) > 1
    groups = tuple(
        replace(g, optimizer=o if several else None) for o, s in enumerate(states) for g in recognise_optimizer(s)
    )
    if not groups or bundle.format == "popaudit":  # popaudit records the item tower's optimizer alone
        return ItemGroups(groups, groups, "the item tower's optimizer state" if groups else "", len(states))
    slots, how = _named_slots(groups, bundle.item_key or "")
    if not slots and len(groups) == 1 and _holds_every_tensor(groups, bundle):
        return ItemGroups(groups, groups, "one param group holding every trainable tensor, so it covers the item table",
                          len(states))
    if not slots:
        slots, how = _shaped_slots(groups, states, bundle)
    candidates = tuple(g for g in groups if any((g.optimizer or 0, p) in slots for p in g.params))
    if not candidates and not _holds_every_tensor(groups, bundle):
        return ItemGroups(groups, (), "", len(states), outside=how)
    return ItemGroups(groups, candidates or groups, how, len(states))


def _holds_every_tensor(groups: tuple[OptimizerGroup, ...], bundle: ModelBundle) -> bool:
    """Whether the recorded optimizers hold as many parameters as the model has trainable
    tensors (so a parameter without state can be the item table)."""
    return len({(g.optimizer or 0, p) for g in groups for p in g.params}) >= len(_model_shapes(bundle)[0])


def _named_slots(groups: tuple[OptimizerGroup, ...], item_key: str) -> tuple[set[tuple[int, int]], str]:
    """The item table's (optimizer, parameter) by its recorded name: exact, else by a
    module prefix one side adds (Lightning's ``model.``); nothing unless exactly one."""
    if not item_key:
        return set(), ""
    named = [
        (g.optimizer or 0, p, str(name)) for g in groups
        if isinstance(g.settings.get("param_names"), list) and len(g.settings["param_names"]) == len(g.params)
        for p, name in zip(g.params, g.settings["param_names"])
    ]
    exact = {(o, p) for o, p, n in named if n == item_key}
    prefixed = {(o, p) for o, p, n in named if item_key.endswith("." + n) or n.endswith("." + item_key)}
    for hits in (exact, prefixed):
        if len(hits) == 1:
            return hits, "found by its recorded name in param_names"
    return set(), ""


def _model_shapes(bundle: ModelBundle) -> tuple[dict[str, tuple[int, ...]], str]:
    """Each trainable tensor's shape (the state dict's floats, buffers left out), and the
    item table's name there; the two tables alone when the state dict lacks the item key."""
    shapes = {
        str(k): tuple(v.shape) for k, v in (bundle.state_dict or {}).items()
        if _floating(v) and not str(k).endswith(_BUFFER_SUFFIXES)
    }
    if bundle.item_key in shapes:
        return shapes, bundle.item_key
    tables: dict[str, tuple[int, ...]] = {"item table": (bundle.n_items, bundle.dim)}
    if bundle.user_table is not None:
        tables["user table"] = tuple(bundle.user_table.shape)
    return tables, "item table"


def _floating(value: Any) -> bool:
    if hasattr(value, "is_floating_point"):
        return bool(value.is_floating_point())
    dtype = getattr(value, "dtype", None)
    return dtype is not None and hasattr(value, "shape") and np.issubdtype(dtype, np.floating)


def _shaped_slots(
    groups: tuple[OptimizerGroup, ...], states: list[Mapping[str, Any]], bundle: ModelBundle,
) -> tuple[set[tuple[int, int]], str]:
    """The (optimizer, parameter) slots that can be the item table by the shapes of the
    per-parameter states, and in words how (one) or why several remain."""
    shapes, item_name = _model_shapes(bundle)
    item_shape, known = shapes[item_name], set(shapes.values())
    slot_shape: dict[tuple[int, int], tuple[int, ...] | None] = {}
    for g in groups:
        per_param = states[g.optimizer or 0].get("state") or {}
        for p in g.params:
            entry = per_param.get(p, per_param.get(str(p)))
            seen = {tuple(v.shape) for v in entry.values() if hasattr(v, "shape") and len(v.shape) >= 1} \
                if isinstance(entry, Mapping) else set()
            seen &= known
            slot_shape[(g.optimizer or 0, p)] = seen.pop() if len(seen) == 1 else None
    sharing = sorted(k for k, v in shapes.items() if v == item_shape and k != item_name)
    shaped = [slot for slot, shape in slot_shape.items() if shape == item_shape]
    blank = [slot for slot, shape in slot_shape.items() if shape is None]
    every = _holds_every_tensor(groups, bundle)
    slots = set(shaped + (blank if len(shaped) < len(sharing) + 1 and every else []))
    shape_text = "(" + ", ".join(map(str, item_shape)) + ")"
    held = f"the recorded optimizer state holds {len(slot_shape)} parameters of the model's {len(shapes)} tensors"
    if not every and sharing and len(shaped) < len(sharing) + 1:  # the shaped ones may all be the others
        return set(), (f"{held}; {len(shaped)} {'has' if len(shaped) == 1 else 'have'} the item table's shape "
                       f"{shape_text}, which {', '.join(sharing[:3])} also {'has' if len(sharing) == 1 else 'have'}, "
                       "so which tensors they are is not recorded")
    if not slots and not every:
        if blank:
            return slots, (f"{held}; none shows the item table's shape {shape_text}, and whether it is among the "
                           f"{len(blank)} without state that shows a shape (plain SGD keeps none) is not recorded")
        return slots, f"{held}, none with the item table's shape {shape_text}: the item table is not among them"
    if len(slots) == 1:
        if shaped:
            return slots, f"its optimizer state has the item table's shape {shape_text}" + (
                ", which no other parameter has" if not sharing else ", and no other parameter's can be it")
        return slots, "the only parameter whose optimizer state does not show another parameter's shape"
    reasons = []
    if sharing:
        reasons.append(f"{', '.join(sharing[:3])}{' ...' if len(sharing) > 3 else ''} "
                       f"{'has' if len(sharing) == 1 else 'have'} the item table's shape {shape_text}")
    if blank and len(slots) > 1:
        many = len(blank) > 1
        reasons.append(f"{len(blank)} {'parameters have' if many else 'parameter has'} no optimizer state that "
                       f"shows {'their' if many else 'its'} shape (plain SGD keeps none)")
    return slots, "; ".join(reasons) or "no parameter's optimizer state has the item table's shape"


def normalise_optimizer(name: str) -> tuple[str | None, bool]:
    """(optimizer kind, whether the name itself implies momentum) of a recorded name."""
    low = str(name).lower().rsplit(".", 1)[-1].replace("_", "").replace("-", "").replace(" ", "")
    return _OPTIMIZER_NAMES.get(low), low in _MOMENTUM_NAMES


def optimizer_family(kind: str | None) -> str:
    """Kinds that count as the same optimizer when sources disagree (Adam and AdamW alike)."""
    return "adam" if kind in ("Adam", "AdamW", "Adam/AdamW", "Adam-like") else str(kind).lower()


def as_float(value: Any) -> float | None:
    """``value`` as a finite float, or None (booleans, None, text, NaN and ±inf)."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None
