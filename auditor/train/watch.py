"""How ``popaudit retrain`` trains under the training monitor (:mod:`auditor.monitor`).

The monitor is the one implementation of the trace: ``retrain``'s per-epoch rows (the
checkpoint's ``trace``) are the monitor's epoch records, and ``--trace`` writes all of
its records (steps, epochs, alerts) to a file as training goes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from auditor.errors import TrainingError, setting
from auditor.monitor import DEFAULT_INTERVAL, TraceRecord, TrainingMonitor
from auditor.monitor.alerts import check_action, parse_alerts
from auditor.monitor.trace import refuse_foreign

if TYPE_CHECKING:
    from auditor.train.data import TrainingData
    from auditor.train.models import TwoTower

N_QUERY_USERS = 128
"""Users whose current vectors are the head share's queries (a fixed seeded sample)."""


@dataclass(frozen=True)
class WatchOptions:
    """The monitor settings of one training run (``retrain --trace ...``)."""

    trace: Path | None = None
    interval: int = DEFAULT_INTERVAL
    alerts: Sequence[str] = ()
    on_alert: str = "warn"
    """``warn``, ``stop`` (training stops; the checkpoint holds the model so far) or ``raise``."""
    mlflow: bool | str | None = None
    tensorboard: Any = None

    def __post_init__(self) -> None:
        parse_alerts(self.alerts, self.interval)  # a typo is a usage error before any training
        check_action(self.on_alert)
        if self.trace is not None:  # as is a trace path that must not be written
            refuse_foreign(Path(self.trace))


def retrain_monitor(
    model: TwoTower, item_optimizer: torch.optim.Optimizer, data: TrainingData, options: WatchOptions, *,
    seed: int, config: Mapping[str, Any],
) -> TrainingMonitor:
    """The monitor of one ``retrain`` run: the item tower's outputs for every row, the
    data's frequencies as counts, the user tower on a fixed user sample (drawn by
    ``seed``) as queries; ``config`` is the run's training config as the trace records it."""
    users = query_users(data.n_users, seed)
    return TrainingMonitor(
        model.item_tower,  # what encode_items calls: the monitor's reads stay out of the training path
        n_items=data.n_items,
        item_ids=list(data.item_ids),
        counts=data.item_frequencies,
        interval=options.interval,
        trace=options.trace,
        alerts=options.alerts,
        on_alert=options.on_alert,
        optimizer=item_optimizer,
        queries=lambda: model.user_tower(users),
        seed=seed,
        mlflow=options.mlflow,
        tensorboard=options.tensorboard,
        source="retrain",
        config=config,
    )


def query_users(n_users: int, seed: int) -> torch.Tensor:
    """The fixed seeded sample of user rows whose vectors are the head share's queries."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xB1A5]))
    return torch.from_numpy(np.sort(rng.choice(n_users, min(N_QUERY_USERS, n_users), replace=False)))


def trace_row(record: TraceRecord) -> dict[str, float]:
    """``retrain``'s per-epoch trace row (the checkpoint's ``trace``) from the monitor's
    epoch record: epoch, loss, spearman, mean_norm and step as always, then the
    monitor's other figures; unmeasured figures are NaN. No wall-clock time: the same
    seed gives a byte-identical checkpoint (``--trace`` files keep each epoch's seconds)."""
    nan = math.nan
    row: dict[str, float] = {
        "epoch": record.epoch or 0,
        "loss": nan if record.loss is None else record.loss,
        "spearman": nan if record.spearman is None else record.spearman,
        "mean_norm": nan if record.mean_norm is None else record.mean_norm,
        "step": record.step,
    }
    for name in ("loglog_slope", "angle_share_90_1", "angle_share_90_10", "angle_median", "growth_per_update",
                 "head_share_dot", "head_share_cosine", "head_share_ratio"):
        value = record.figure(name)
        row[name] = nan if value is None else value
    return row


def require_finite(record: TraceRecord, item_embeddings: Callable[[], torch.Tensor], lr: float) -> None:
    """TrainingError when an epoch's mean loss became non-finite, or the item table's
    float32 norms did (NaN, or entries so large their squares overflow: training
    diverged, though the monitor's float64 norms may still be finite). ``item_embeddings``
    gives the table (computed only when the loss is finite); ``lr``: the item tower's
    learning rate, which the message names."""
    epoch, loss = record.epoch, record.loss
    if loss is not None and not math.isfinite(loss):
        raise TrainingError(f"the loss became {loss} in epoch {epoch} (lr={lr}); lower {setting('lr')}")
    bad = int((~torch.isfinite(item_embeddings().norm(dim=1))).sum())
    if bad:  # a bounded (cosine) loss stays finite while weights blow up
        raise TrainingError(
            f"training diverged in epoch {epoch}: {bad} item embeddings "
            f"became infinite or NaN (lr={lr:g}); lower {setting('lr')}"
        )
