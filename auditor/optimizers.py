"""C1's evidence: recognising a torch optimizer from its ``state_dict`` or its name.

:func:`recognise_optimizer` reads each param group's kind (SGD, Adam, ...) and
settings; :func:`locate_item_parameter` and :func:`item_optimizer_state` find which
group and which optimizer train the item table; :func:`normalise_optimizer` maps a
recorded or declared name to the same kinds. :mod:`auditor.conditions.facts` merges
these with the config and the declared settings; :mod:`auditor.conditions.c1_sgd`
judges C1 from them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
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


def locate_item_parameter(groups: list[OptimizerGroup], state: Mapping[str, Any], bundle: ModelBundle) -> tuple[int | None, str]:
    """Which optimizer parameter index is the item table, and how that was found.

    First by the shape of its per-parameter state ((n_items, dim) or the transposed
    linear-weight layout); then by position, when the optimizer holds exactly the
    state dict's parameters (buffers left out) in order and every state shape agrees.
    """
    n, d = bundle.n_items, bundle.dim
    targets = {(n, d), (d, n)}
    per_param = state.get("state") or {}
    shapes: dict[int, set[tuple[int, ...]]] = {}
    for key, entry in per_param.items():
        if isinstance(entry, Mapping) and str(key).isdigit():
            shapes[int(key)] = {tuple(v.shape) for v in entry.values() if hasattr(v, "shape") and len(v.shape) >= 1}
    matches = [i for i, s in shapes.items() if s & targets]
    if len(matches) == 1 and (n, d) != (d, n):
        return matches[0], "matched by the shape of its optimizer state"
    indices = [p for g in groups for p in g.params]
    keys = [
        k for k, v in bundle.state_dict.items()
        if hasattr(v, "is_floating_point") and v.is_floating_point() and not k.endswith(_BUFFER_SUFFIXES)
    ]
    if bundle.item_key in keys and len(keys) == len(indices):
        order = sorted(indices)
        position = {idx: keys[i] for i, idx in enumerate(order)}
        consistent = all(
            tuple(bundle.state_dict[position[idx]].shape) in s for idx, s in shapes.items() if s and idx in position
        )
        if consistent:
            return order[keys.index(bundle.item_key)], "matched by position in the state dict's parameter order"
    return None, "could not tell which parameter is the item table"


def normalise_optimizer(name: str) -> tuple[str | None, bool]:
    """(optimizer kind, whether the name itself implies momentum) of a recorded name."""
    low = str(name).lower().rsplit(".", 1)[-1].replace("_", "").replace("-", "").replace(" ", "")
    return _OPTIMIZER_NAMES.get(low), low in _MOMENTUM_NAMES


def item_optimizer_state(bundle: ModelBundle) -> tuple[Mapping[str, Any] | None, str]:
    """The optimizer state that trains the item table, and a note when several exist.

    Lightning checkpoints may hold several optimizers (``optimizer_states``, kept whole
    by the loader); the one with a per-parameter state of the item table's shape is the
    item optimizer. When none or several match, the first is used and the note says so.
    """
    state = bundle.optimizer_state
    if not isinstance(state, Mapping):
        return None, ""
    states = [s for s in (state.get("optimizer_states") or []) if isinstance(s, Mapping)]
    if len(states) <= 1:
        return state, ""
    n, d = bundle.n_items, bundle.dim
    targets = {(n, d), (d, n)}
    hits = [
        i for i, s in enumerate(states)
        if any(
            hasattr(v, "shape") and tuple(v.shape) in targets
            for entry in (s.get("state") or {}).values() if isinstance(entry, Mapping)
            for v in entry.values()
        )
    ]
    if len(hits) == 1:
        return states[hits[0]], f"optimizer {hits[0] + 1} of {len(states)} (its state has the item table's shape)"
    return states[0], f"the first of {len(states)} optimizers (which one trains the item table is not recorded)"


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
