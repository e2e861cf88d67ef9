"""Optimizers by name, as ``popaudit retrain --optimizer`` offers them (C1 is about these)."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from auditor.errors import TrainingError, setting
from auditor.train import OPTIMIZERS


def make_optimizer(
    name: str,
    params: Iterable[torch.nn.Parameter],
    *,
    lr: float,
    momentum: float = 0.9,
    weight_decay: float = 0.0,
) -> torch.optim.Optimizer:
    """``sgd`` (plain), ``momentum`` (SGD with ``momentum``), ``adam`` or ``adamw``.

    ``weight_decay`` applies to every one of them (L2 for SGD/Adam, decoupled for AdamW).
    """
    if lr <= 0:
        raise TrainingError(f"the learning rate must be positive, got {lr}")
    if weight_decay < 0:
        raise TrainingError(f"{setting('weight_decay')} must be >= 0, got {weight_decay}")
    params = list(params)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, weight_decay=weight_decay)
    if name == "momentum":
        if not 0.0 < momentum < 1.0:
            raise TrainingError(f"{setting('momentum')} must be within (0, 1), got {momentum}")
        return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    raise TrainingError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")


def effective_momentum(name: str, momentum: float) -> float:
    """The momentum the optimizer really uses (0 for everything but ``momentum``)."""
    return float(momentum) if name == "momentum" else 0.0
