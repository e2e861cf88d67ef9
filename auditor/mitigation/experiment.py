"""``experiment mitigations``: what each cure of popularity bias costs in accuracy.

For every seed, the interactions are split once (each user's latest or a random
fraction held out, :mod:`auditor.train.split`); the reference (id tables, plain SGD,
cosine InfoNCE, high lr) and each training-side mitigation (the logQ correction,
weight decay, Adam) are trained on the training part, written as a checkpoint that
records the split, and audited by the library entry point
:func:`auditor.audit.run_audit`, which measures held-out accuracy beside exposure.
The serving-side mitigations (cosine and norm-aware alpha_<a> scoring) and the
most-popular baseline come from the reference model's audit. Every row reads NDCG@K,
recall@K, head_share_1pct@K and Gini@K through ``AuditResult.flat_metrics()``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from auditor.alpha import alpha_scoring
from auditor.errors import InputError, setting
from auditor.progress import SILENT, Progress
from auditor.ranges import check_ranges
from auditor.summaries import MitigationResult
from auditor.train.data import TrainingData
from auditor.train.experiments import (
    ExperimentSizes,
    Setting,
    condition_settings,
    config_row,
    data_description,
    reference_config,
    run_data,
)
from auditor.train.grid import run_tasks
from auditor.train.measures import aggregate

METRICS = ("ndcg", "recall", "head_share_1pct", "gini")
"""The flat metrics read per scoring: ``<metric>_<scoring>@K``."""
SPLIT_COUNTS = ("n_train_interactions", "n_holdout_interactions", "n_holdout_pairs", "n_holdout_users",
                "n_repeats_dropped")
"""The split's sizes each run records (:meth:`auditor.train.split.HoldoutSplit.record`)."""


def mitigation_settings(sizes: ExperimentSizes) -> list[Setting]:
    """The reference and the training-side mitigations (weight decay and Adam as in the
    conditions grid, so the two experiments describe the same models)."""
    grid = {s.name: s for s in condition_settings(sizes)}
    return [
        grid["reference"],
        Setting("logq", "logQ correction (Yi et al. 2019)", "none", {"logq": True}),
        grid["weight-decay"],
        grid["adam"],
    ]


@dataclass(frozen=True)
class MitigationTask:
    """One training run: a setting, a seed, and the audit's settings."""

    sizes: ExperimentSizes
    setting: Setting
    seed: int
    fraction: float
    split: str
    alphas: tuple[float, ...]


def audit_one(data: TrainingData | None, task: MitigationTask) -> dict[str, Any]:
    """Split, train, save and audit one run; the measures of each scoring it serves
    (the reference serves dot, cosine, popular and every alpha; the others dot)."""
    from auditor.audit import run_audit
    from auditor.config import AuditConfig
    from auditor.train.loop import save_checkpoint, train
    from auditor.train.split import split_holdout

    sz = task.sizes
    split = split_holdout(run_data(sz, data, task.seed), task.fraction, task.split, seed=task.seed)
    result = train(split.train, reference_config(sz, task.seed, **task.setting.overrides))
    with tempfile.TemporaryDirectory(prefix="popaudit-mitigation-") as folder:
        path = save_checkpoint(result, Path(folder) / f"{task.setting.name}-{task.seed}.pt", split)
        audit = run_audit(AuditConfig(model=path, ks=(sz.k,), alphas=task.alphas, bootstrap=0, probes=False,
                                      seed=task.seed))
    flat = audit.flat_metrics()
    k = min(sz.k, split.train.n_items)
    scorings = ["dot"]
    if task.setting.name == "reference":
        scorings += ["cosine", *(alpha_scoring(a) for a in task.alphas), "popular"]
    record = split.record()
    return {
        "seed": task.seed,
        "k": k,
        "spearman": flat.get("spearman"),
        "n_train_interactions": record["n_train_interactions"],
        "n_holdout_interactions": record["n_holdout_interactions"],
        "n_holdout_pairs": record["n_holdout_pairs"],
        "n_holdout_users": record["n_holdout_users"],
        "n_repeats_dropped": record["n_repeats_dropped"],
        "split": record["split"],
        "scorings": {s: {m: flat.get(f"{m}_{s}@{k}") for m in METRICS} for s in scorings},
    }


def _row(name: str, label: str, kind: str, model: str, config: dict[str, Any], runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {"name": name, "label": label, "kind": kind, "model": model, "config": config, "runs": runs,
            "summary": aggregate(runs)}


def run_mitigations(
    seeds: Sequence[int] = (0, 1, 2),
    sizes: ExperimentSizes | None = None,
    *,
    fraction: float = 0.2,
    split: str = "auto",
    alphas: Sequence[float] = (0.25, 0.5, 0.75),
    settings: Sequence[str] | None = None,
    data: TrainingData | None = None,
    jobs: int = 1,
    threads: int | None = None,
    progress: Progress = SILENT,
) -> MitigationResult:
    """Train and audit the reference and each training-side mitigation for every seed
    (module docstring); ``settings`` picks training rows by name (default: all)."""
    sizes = sizes or ExperimentSizes()
    if not seeds:
        raise InputError("an experiment needs at least one seed")
    check_ranges({"seed": list(seeds)})  # torch takes no seed past the range: refused before training
    grid = mitigation_settings(sizes)
    if settings is not None:
        known = [s.name for s in grid]
        unknown = [s for s in settings if s not in known]
        if unknown:
            raise InputError(f"unknown settings {unknown}; mitigations has {known}")
        grid = [s for s in grid if s.name in set(settings)]
    alphas = tuple(dict.fromkeys(float(a) for a in alphas))
    for alpha, scoring in ((0.0, "cosine"), (1.0, "dot")):
        if alpha in alphas:  # its column would stay empty: the audit measures it as that scoring
            raise InputError(f"{setting('alphas')} {alpha:g} is {scoring} serving, which the table holds already: "
                             "pass alphas strictly between 0 and 1")
    configs = [reference_config(sizes, seeds[0], **s.overrides) for s in grid]  # validates before training
    _refuse_empty_holdouts(sizes, data, seeds, fraction, split)
    tasks = [MitigationTask(sizes, s, seed, fraction, split, alphas) for s in grid for seed in seeds]
    runs = run_tasks(audit_one, tasks, shared=data, jobs=jobs, threads=threads, progress=progress,
                     description="experiment mitigations")
    rows: list[dict[str, Any]] = []
    serving: list[dict[str, Any]] = []
    for at, (trained, config) in enumerate(zip(grid, configs)):
        mine = runs[at * len(seeds) : (at + 1) * len(seeds)]
        kind = "reference" if trained.name == "reference" else "training"
        rows.append(_row(trained.name, trained.label, kind, trained.name, config_row(config), [_flat(r, "dot") for r in mine]))
        if trained.name == "reference":
            cfg = config_row(config)
            serving.append(_row("cosine", "cosine serving", "serving", "reference", cfg, [_flat(r, "cosine") for r in mine]))
            for a in alphas:
                serving.append(_row(alpha_scoring(a), f"norm-aware serving, α = {a:g}", "serving", "reference", cfg,
                                    [_flat(r, alpha_scoring(a)) for r in mine]))
            serving.append(_row("popular", "most popular (no model)", "baseline", "reference", {},
                                [_flat(r, "popular") for r in mine]))
    method = runs[0]["split"] if runs else split
    return MitigationResult(sizes, list(seeds), float(fraction), method, alphas, rows + serving,
                            data_description(sizes, data))


def _refuse_empty_holdouts(sizes: ExperimentSizes, data: TrainingData | None, seeds: Sequence[int], fraction: float,
                           split: str) -> None:
    """InputError, before any training, when a seed's split keeps no held-out pair: every
    row's accuracy would be empty. Named after the user's data, not the temporary checkpoint
    the audit reads."""
    from auditor.loading.recorded_split import empty_holdout_reason
    from auditor.train.split import split_holdout

    for seed in seeds:
        held = split_holdout(run_data(sizes, data, seed), fraction, split, seed=seed)
        if not len(held.holdout):
            where = data.description.get("path", "the data") if data is not None else f"the synthetic data of seed {seed}"
            drawn = f", seed {seed}" if held.method == "random" else ""  # a time split draws nothing
            raise InputError(
                f"experiment mitigations measures held-out accuracy, but on {where} ({held.method} split{drawn}) "
                f"{empty_holdout_reason({'holdout': held.record()})}: it needs users with two or more distinct items"
            )
        if held.method == "time" and data is not None:
            return  # a time split of one log is the same for every seed


def _flat(run: dict[str, Any], scoring: str) -> dict[str, Any]:
    """One seed's measures of one scoring, with the run's split sizes."""
    out: dict[str, Any] = {"seed": run["seed"], "k": run["k"]}
    out.update({m: _nan(run["scorings"][scoring][m]) for m in METRICS})
    out["spearman"] = _nan(run["spearman"])
    for key in SPLIT_COUNTS:
        out[key] = run[key]
    return out


def _nan(value: float | None) -> float:
    return float("nan") if value is None else float(value)
