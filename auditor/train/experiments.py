"""Experiment grids that reproduce docs/theory.md §7: ``conditions`` and ``lr-sweep``.

``conditions`` trains the all-conditions-hold reference (id embedding table, plain
SGD, cosine InfoNCE, high learning rate) beside one violation at a time, and beside the
asymmetric model (a transformer user tower over each user's history, the same id item
table: no item-side condition is broken). ``lr-sweep`` repeats the reference across
learning rates (C5). Each run is measured by :mod:`auditor.train.measures`.

The data is synthetic (regenerated for each seed, so seeds vary the data too) or a
log's interactions (the same for every seed; seeds vary initialisation and order).
Runs are independent: :func:`auditor.train.grid.run_tasks` runs them in ``jobs``
processes with the same results.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from auditor.errors import InputError, setting
from auditor.ranges import RANGES, check_ranges
from auditor.progress import SILENT, Progress
from auditor.summaries import ANGLE_EDGES, ExperimentResult, ExperimentSizes
from auditor.train.data import TrainingData, synthetic_interactions
from auditor.train.grid import run_tasks
from auditor.train.loop import TrainConfig, train
from auditor.train.models import NEEDS_HISTORIES
from auditor.train.measures import (
    aggregate,
    angle_summary,
    measure_run,
    retrieval_head_share,
    update_angles,
    violated_by_settings,
)
from auditor.train.optim import effective_momentum

DEFAULT_LRS = (0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0)

__all__ = [
    "ANGLE_EDGES", "DEFAULT_LRS", "ExperimentResult", "ExperimentSizes", "RunTask", "Setting", "angle_summary",
    "condition_settings", "data_description", "reference_config", "retrieval_head_share", "run_conditions",
    "run_lr_sweep", "update_angles",
]


@dataclass(frozen=True)
class Setting:
    """One row of the conditions grid: overrides of the reference training config."""

    name: str
    label: str
    violates: str
    """Which sufficient condition this setting is designed to break ("none" for the
    reference). A grid row's "violates" is what its runs show instead, as ``check`` grades
    them (:func:`row_violates`)."""
    overrides: dict[str, Any] = field(default_factory=dict)


def reference_config(sizes: ExperimentSizes, seed: int, **overrides: Any) -> TrainConfig:
    """The reference config of ``sizes`` (embedding, SGD, InfoNCE-cos, ``sizes.lr``) with
    ``overrides``.

    Both towers share the optimizer and learning rate unless overridden.
    """
    settings: dict[str, Any] = {
        "optimizer": "sgd",
        "lr": sizes.lr,
        "item_encoder": "embedding",
        "user_encoder": "embedding",
        "loss": "infonce-cos",
        "temperature": sizes.temperature,
        "dim": sizes.dim,
        "init_std": sizes.init_std,
        "epochs": sizes.epochs,
        "batch_size": sizes.batch_size,
        "seed": seed,
    }
    settings.update(overrides)
    return TrainConfig(**settings)


def condition_settings(sizes: ExperimentSizes) -> list[Setting]:
    """The reference, its one-at-a-time violations (docs/theory.md §2, §7) and the
    asymmetric model.

    Two settings change the learning rate with the violation, because they do not
    train at the reference's: Adam runs at 0.01 (its steps are about lr per coordinate,
    whatever the gradient's scale) and dot-product InfoNCE at lr/10 (unnormalised
    logits diverge at the reference's lr). The asymmetric model's transformer user
    tower trains with Adam (lr 0.01: under SGD at the reference's lr it does not learn);
    its item tower is the reference's. The table reports every setting's lr.
    """
    return [
        Setting("reference", "all hold (embedding, SGD, InfoNCE-cos)", "none"),
        Setting("momentum", "SGD + momentum 0.9", "C1", {"optimizer": "momentum"}),
        Setting("adam", "Adam", "C1", {"optimizer": "adam", "lr": 0.01}),
        Setting("weight-decay", "SGD + weight decay", "C1", {"weight_decay": 1e-3}),
        Setting("mlp", "MLP item tower", "C2, C3", {"item_encoder": "mlp"}),
        Setting("embedding-linear", "embedding → linear", "C2, C3", {"item_encoder": "embedding-linear"}),
        Setting("dense-linear", "linear over dense features", "C3", {"item_encoder": "dense-linear"}),
        Setting("infonce-dot", "InfoNCE over dot products", "C4", {"loss": "infonce-dot", "lr": sizes.lr / 10}),
        Setting("low-lr", "low learning rate", "C5", {"lr": sizes.lr / 100}),
        Setting(
            "asymmetric", "transformer user tower (Adam), id item table", "none",
            {"user_encoder": "transformer", "user_optimizer": "adam"},
        ),
    ]


def data_description(sizes: ExperimentSizes, data: TrainingData | None) -> dict[str, Any]:
    """What the runs trained on: a log (path, format, columns and its sizes) or the
    synthetic generator's settings (regenerated per seed)."""
    if data is None:
        return {
            "kind": "synthetic", "n_users": sizes.n_users, "n_items": sizes.n_items,
            "n_interactions": sizes.n_interactions, "zipf": sizes.zipf,
        }
    out = {k: v for k, v in data.description.items() if k != "holdout"}
    out.update(n_users=data.n_users, n_items=data.n_items, n_interactions=data.n_interactions)
    return out


@dataclass(frozen=True)
class RunTask:
    """One run of a grid: the settings' overrides of the reference, and the seed."""

    sizes: ExperimentSizes
    overrides: dict[str, Any]
    seed: int


def builds_histories(names: Sequence[str] | None, sizes: ExperimentSizes) -> bool:
    """Whether the conditions grid's settings ``names`` (None: all) train a history user tower."""
    return any(s.overrides.get("user_encoder") in NEEDS_HISTORIES for s in condition_settings(sizes)
               if names is None or s.name in names)


def run_data(sizes: ExperimentSizes, data: TrainingData | None, seed: int) -> TrainingData:
    """``data``, or the synthetic log of ``sizes`` for ``seed``."""
    if data is not None:
        return data
    return synthetic_interactions(sizes.n_users, sizes.n_items, sizes.n_interactions, sizes.zipf, seed=seed)


def measure_one(data: TrainingData | None, task: RunTask) -> tuple[dict[str, Any], np.ndarray]:
    """Train and measure one run (a worker's unit of work)."""
    sz = task.sizes
    result = train(run_data(sz, data, task.seed), reference_config(sz, task.seed, **task.overrides))
    return measure_run(result, k=sz.k, n_bootstrap=sz.n_bootstrap, seed=task.seed)


def config_row(config: TrainConfig) -> dict[str, Any]:
    """The settings a results row reports."""
    return {
        "optimizer": config.optimizer,
        "lr": config.item_lr,
        "user_lr": config.resolved_user_lr,
        "user_optimizer": config.resolved_user_optimizer,
        "momentum": effective_momentum(config.optimizer, config.momentum),
        "weight_decay": config.weight_decay,
        "item_encoder": config.item_encoder,
        "user_encoder": config.user_encoder,
        "loss": config.loss,
        "temperature": config.temperature,
        "logq": config.logq,
    }


def _run_grid(
    name: str,
    grid: list[Setting],
    sizes: ExperimentSizes,
    seeds: Sequence[int],
    progress: Progress,
    data: TrainingData | None,
    jobs: int,
    threads: int | None,
) -> ExperimentResult:
    if not seeds:
        raise InputError("an experiment needs at least one seed")
    check_ranges({"seed": list(seeds)})  # torch takes no seed past the range: refused before training
    configs = [reference_config(sizes, seeds[0], **s.overrides) for s in grid]  # validates before training
    tasks = [RunTask(sizes, s.overrides, seed) for s in grid for seed in seeds]
    runs = run_tasks(
        measure_one, tasks, shared=data, jobs=jobs, threads=threads, progress=progress,
        description=f"experiment {name}",
    )
    rows: list[dict[str, Any]] = []
    for at, (setting, config) in enumerate(zip(grid, configs)):
        mine = runs[at * len(seeds) : (at + 1) * len(seeds)]
        measures = [m for m, _ in mine]
        counts = np.sum([c for _, c in mine], axis=0).astype(np.int64)
        rows.append(
            {
                "name": setting.name,
                "label": setting.label,
                "violates": row_violates(config, [m["c5"] for m in measures]),
                "config": config_row(config),
                "runs": measures,
                "summary": aggregate(measures),
                "angle_histogram": counts.tolist(),
            }
        )
    return ExperimentResult(name, sizes, list(seeds), rows, data_description(sizes, data))


def run_conditions(
    seeds: Sequence[int] = (0, 1, 2),
    sizes: ExperimentSizes | None = None,
    *,
    settings: Sequence[str] | None = None,
    data: TrainingData | None = None,
    jobs: int = 1,
    threads: int | None = None,
    progress: Progress = SILENT,
) -> ExperimentResult:
    """The conditions grid: the reference and each other setting, trained for every seed.

    ``settings`` picks rows by name (default: all of :func:`condition_settings`);
    ``data``: a log's interactions (default: synthetic data of ``sizes`` per seed);
    ``jobs``/``threads``: :func:`auditor.train.grid.run_tasks`.
    """
    sizes = sizes or ExperimentSizes()
    grid = condition_settings(sizes)
    if settings is not None:
        known = {s.name for s in grid}
        unknown = [s for s in settings if s not in known]
        if unknown:
            raise InputError(f"unknown settings {unknown}; choose from {sorted(known)}")
        grid = [s for s in grid if s.name in set(settings)]
    return _run_grid("conditions", grid, sizes, seeds, progress, data, jobs, threads)


def run_lr_sweep(
    lrs: Sequence[float] = DEFAULT_LRS,
    seeds: Sequence[int] = (0, 1, 2),
    sizes: ExperimentSizes | None = None,
    *,
    data: TrainingData | None = None,
    jobs: int = 1,
    threads: int | None = None,
    progress: Progress = SILENT,
) -> ExperimentResult:
    """The reference setting across learning rates (where the bias appears, C5)."""
    sizes = sizes or ExperimentSizes()
    if not lrs:
        raise InputError(f"{setting('lrs')} names no learning rate")
    for lr in lrs:  # each within a learning rate's range, as one run's lr is
        RANGES["train_lr"].check("lrs", lr)
    grid = [Setting(f"lr={lr:g}", f"reference at lr {lr:g}", "none", {"lr": float(lr)}) for lr in sorted(lrs)]
    return _run_grid("lr-sweep", grid, sizes, seeds, progress, data, jobs, threads)


def row_violates(config: TrainConfig, statuses: Sequence[str]) -> str:
    """A grid row's "violates", as ``check`` grades its runs: the conditions among C1–C4
    its settings violate (:func:`~auditor.train.measures.violated_by_settings`, what
    ``check``'s probes find on such a checkpoint), then C5 as :func:`c5_label` says it
    where some seed's run violates it; with none of those, ``none`` when C5 holds for every
    seed, else ``unknown``. So the low-learning-rate control reads ``C5`` only where
    ``check`` of its runs says so."""
    parts = violated_by_settings(config)
    c5 = c5_label(statuses)
    if c5.startswith("C5"):
        parts.append(c5)
    return ", ".join(parts) if parts else c5


def c5_label(statuses: Sequence[str]) -> str:
    """A row's C5 label: ``C5`` when every seed's run violates it (as ``check``
    grades each run, :func:`auditor.train.measures.c5_status`), ``none`` when none does,
    else how many do."""
    violated, held = (sum(status == kind for status in statuses) for kind in ("violated", "holds"))
    if violated == len(statuses):
        return "C5"
    if held == len(statuses):
        return "none"
    return f"C5 ({violated} of {len(statuses)} seeds)" if violated else "unknown"
