"""Experiment grids that reproduce docs/theory.md §7: ``conditions`` and ``lr-sweep``.

``conditions`` trains the all-conditions-hold reference (id embedding table, plain
SGD, cosine InfoNCE, high learning rate) beside one violation at a time and measures,
for each seed: the angle between q_i and its update Δq_i in one real training step
(float64, on a copy), the frequency-norm Spearman rho with a bootstrap CI, and
head_share_1pct@K of dot-product against cosine retrieval (FAISS exact search).
``lr-sweep`` repeats the reference across learning rates (C5).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from auditor import __version__
from auditor.errors import InputError
from auditor.metrics.exposure import HeadShare
from auditor.metrics.frequency_norm import frequency_norm_stats, item_norms
from auditor.probes import ProbeBatch, summarise_angles, update_step, working_copy
from auditor.progress import SILENT, Progress
from auditor.retrieval import sharded_topk
from auditor.train.data import synthetic_interactions
from auditor.train.live import PopauditLiveModel
from auditor.train.loop import TrainConfig, TrainResult, train
from auditor.train.optim import effective_momentum

ANGLE_EDGES = np.arange(-0.5, 181.0, 1.0)
"""Histogram bins of update angles: 1° wide, centred on 0°, 1°, ..., 180°."""
DEFAULT_LRS = (0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0)


@dataclass(frozen=True)
class Setting:
    """One row of the conditions grid: overrides of the reference training config."""

    name: str
    label: str
    violates: str
    """Which sufficient condition this setting breaks ("none" for the reference)."""
    overrides: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ExperimentSizes:
    """The synthetic data and the reference training config every setting starts from."""

    n_users: int = 1000
    n_items: int = 1000
    n_interactions: int = 50_000
    zipf: float = 1.0
    epochs: int = 5
    batch_size: int = 256
    dim: int = 32
    lr: float = 10.0
    temperature: float = 0.1
    init_std: float = 0.1
    k: int = 100
    n_bootstrap: int = 1000

    def __post_init__(self) -> None:
        if self.k < 1:
            raise InputError(f"k must be at least 1, got {self.k}")
        if self.n_bootstrap < 0:
            raise InputError(f"n_bootstrap must be >= 0, got {self.n_bootstrap}")

    def config(self, seed: int, **overrides: Any) -> TrainConfig:
        """The reference config (embedding, SGD, InfoNCE-cos, ``lr``) with ``overrides``.

        Both towers share the optimizer and learning rate unless overridden.
        """
        settings: dict[str, Any] = {
            "optimizer": "sgd",
            "lr": self.lr,
            "item_encoder": "embedding",
            "user_encoder": "embedding",
            "loss": "infonce-cos",
            "temperature": self.temperature,
            "dim": self.dim,
            "init_std": self.init_std,
            "epochs": self.epochs,
            "batch_size": self.batch_size,
            "seed": seed,
        }
        settings.update(overrides)
        return TrainConfig(**settings)


def condition_settings(sizes: ExperimentSizes) -> list[Setting]:
    """The reference and its one-at-a-time violations (docs/theory.md §2, §7).

    Two settings change the learning rate with the violation, because they do not
    train at the reference's: Adam runs at 0.01 (its steps are about lr per coordinate,
    whatever the gradient's scale) and dot-product InfoNCE at lr/10 (unnormalised
    logits diverge at the reference's lr). The table reports every setting's lr.
    """
    return [
        Setting("reference", "all hold (embedding, SGD, InfoNCE-cos)", "none"),
        Setting("momentum", "SGD + momentum 0.9", "C1", {"optimizer": "momentum"}),
        Setting("adam", "Adam", "C1", {"optimizer": "adam", "lr": 0.01}),
        Setting("weight-decay", "SGD + weight decay", "C1", {"weight_decay": 1e-3}),
        Setting("mlp", "MLP item tower", "C2", {"item_encoder": "mlp"}),
        Setting("embedding-linear", "embedding → linear", "C2, C3", {"item_encoder": "embedding-linear"}),
        Setting("dense-linear", "linear over dense features", "C3", {"item_encoder": "dense-linear"}),
        Setting("infonce-dot", "InfoNCE over dot products", "C4", {"loss": "infonce-dot", "lr": sizes.lr / 10}),
        Setting("low-lr", "low learning rate", "C5", {"lr": sizes.lr / 100}),
    ]


# ----------------------------------------------------------------------------- measures


def update_angles(result: TrainResult, users: torch.Tensor, items: torch.Tensor) -> np.ndarray:
    """Degrees between q_i and Δq_i for the items of one real training step.

    :func:`auditor.probes.update_step` on a float64 copy of the run's live model, with
    the item tower's optimizer and its state (so momentum/Adam act as in training); the
    original is untouched. Items whose embedding did not move are left out.
    """
    live = PopauditLiveModel(
        result.model, result.config.record(result.data), result.item_optimizer.state_dict()
    )
    module, _ = working_copy(live)
    batch = ProbeBatch(users.numpy(), items.numpy(), "training pairs")
    return update_step(live, module, [batch], extra_rows=np.zeros(0, np.int64), fallback_lr=None).angles


def angle_summary(angles: np.ndarray) -> dict[str, Any]:
    """:func:`auditor.probes.summarise_angles`' n, median and shares within 90°±1° and
    ±10° (NaN when there are no angles), with a 1° histogram over :data:`ANGLE_EDGES`."""
    s = summarise_angles(angles)
    nan = float("nan")
    return {
        "n": s.n,
        "share_90pm1": nan if s.share_90pm1 is None else s.share_90pm1,
        "share_90pm10": nan if s.share_90pm10 is None else s.share_90pm10,
        "median": nan if s.median is None else s.median,
        "counts": np.histogram(angles, bins=ANGLE_EDGES)[0].astype(int).tolist(),
    }


def retrieval_head_share(
    users: np.ndarray, items: np.ndarray, frequencies: np.ndarray, k: int, pct: float = 1.0
) -> dict[str, float]:
    """head_share_{pct}pct@k (:class:`HeadShare`) of exact dot-product and cosine
    retrieval (:func:`auditor.retrieval.sharded_topk`), and their ratio."""
    k = min(k, items.shape[0])
    head = HeadShare(frequencies, pct)
    out: dict[str, float] = {}
    for scoring in ("dot", "cosine"):
        _, lists = sharded_topk(users, [items], k, normalise=scoring == "cosine")
        out[scoring] = head.measure(lists)
    out["ratio"] = out["dot"] / out["cosine"] if out["cosine"] > 0 else float("inf")
    return out


def measure_run(
    result: TrainResult, *, k: int, n_bootstrap: int, seed: int
) -> tuple[dict[str, Any], np.ndarray]:
    """All measures of one trained run; returns (measures, update-angle counts over
    :data:`ANGLE_EDGES`)."""
    data = result.data
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xA9]))
    pick = torch.from_numpy(rng.choice(data.n_interactions, result.config.batch_size, replace=False))
    users = torch.from_numpy(data.users)[pick]
    items = torch.from_numpy(data.items)[pick]
    angles = update_angles(result, users, items)
    summary = angle_summary(angles)

    item_emb = result.item_embeddings().numpy()
    user_emb = result.user_embeddings().numpy()
    freq = data.item_frequencies
    rho_section, _ = frequency_norm_stats(item_norms(item_emb), freq, n_bootstrap=n_bootstrap, seed=seed)
    share = retrieval_head_share(user_emb, item_emb, freq, k)
    k_eff = min(k, data.n_items)
    measures = {
        "seed": seed,
        "share_90pm1": summary["share_90pm1"],
        "share_90pm10": summary["share_90pm10"],
        "angle_median": summary["median"],
        "n_angles": summary["n"],
        "spearman": rho_section.spearman,
        "spearman_ci": list(rho_section.spearman_ci),
        f"head_share_1pct_dot@{k_eff}": share["dot"],
        f"head_share_1pct_cosine@{k_eff}": share["cosine"],
        f"head_share_1pct_ratio@{k_eff}": share["ratio"],
        "final_loss": result.trace[-1]["loss"],
        "mean_norm": result.trace[-1]["mean_norm"],
    }
    return measures, np.asarray(summary["counts"], dtype=np.int64)


def _aggregate(runs: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """mean, std (ddof=1 when there are several seeds), min and max of each scalar measure."""
    out: dict[str, dict[str, float]] = {}
    for key, value in runs[0].items():
        if key == "seed" or not isinstance(value, (int, float)):
            continue
        vals = np.array([r[key] for r in runs], dtype=np.float64)
        out[key] = {
            "mean": float(np.mean(vals)),
            "std": float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0,
            "min": float(np.min(vals)),
            "max": float(np.max(vals)),
        }
    return out


# --------------------------------------------------------------------------- experiments


@dataclass
class ExperimentResult:
    """The measures of one experiment grid, ready to write as JSON, Markdown and plots."""

    name: str
    sizes: ExperimentSizes
    seeds: list[int]
    rows: list[dict[str, Any]]
    """One per setting (or learning rate): its config, per-seed runs and summary."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "experiment": self.name,
            "tool": {"name": "popaudit", "version": __version__},
            "seeds": list(self.seeds),
            "sizes": asdict(self.sizes),
            "angle_histogram_edges": ANGLE_EDGES.tolist(),
            "rows": self.rows,
        }


def _run_grid(
    name: str,
    grid: list[Setting],
    sizes: ExperimentSizes,
    seeds: Sequence[int],
    progress: Progress,
) -> ExperimentResult:
    if not seeds:
        raise InputError("an experiment needs at least one seed")
    rows: list[dict[str, Any]] = []
    with progress.track(f"experiment {name}", total=len(grid) * len(seeds)) as advance:
        for setting in grid:
            runs: list[dict[str, Any]] = []
            counts = np.zeros(len(ANGLE_EDGES) - 1, dtype=np.int64)
            config = sizes.config(seeds[0], **setting.overrides)  # validates before training
            for seed in seeds:
                data = synthetic_interactions(
                    sizes.n_users, sizes.n_items, sizes.n_interactions, sizes.zipf, seed=seed
                )
                result = train(data, sizes.config(seed, **setting.overrides))
                measures, angle_counts = measure_run(result, k=sizes.k, n_bootstrap=sizes.n_bootstrap, seed=seed)
                counts += angle_counts
                runs.append(measures)
                advance(1)
            rows.append(
                {
                    "name": setting.name,
                    "label": setting.label,
                    "violates": setting.violates,
                    "config": {
                        "optimizer": config.optimizer,
                        "lr": config.item_lr,
                        "user_lr": config.resolved_user_lr,
                        "momentum": effective_momentum(config.optimizer, config.momentum),
                        "weight_decay": config.weight_decay,
                        "item_encoder": config.item_encoder,
                        "user_encoder": config.user_encoder,
                        "loss": config.loss,
                        "temperature": config.temperature,
                    },
                    "runs": runs,
                    "summary": _aggregate(runs),
                    "angle_histogram": counts.tolist(),
                }
            )
    return ExperimentResult(name, sizes, list(seeds), rows)


def run_conditions(
    seeds: Sequence[int] = (0, 1, 2),
    sizes: ExperimentSizes | None = None,
    *,
    settings: Sequence[str] | None = None,
    progress: Progress = SILENT,
) -> ExperimentResult:
    """The conditions grid: the reference and each violation, trained for every seed.

    ``settings`` picks rows by name (default: all of :func:`condition_settings`).
    """
    sizes = sizes or ExperimentSizes()
    grid = condition_settings(sizes)
    if settings is not None:
        known = {s.name for s in grid}
        unknown = [s for s in settings if s not in known]
        if unknown:
            raise InputError(f"unknown settings {unknown}; choose from {sorted(known)}")
        grid = [s for s in grid if s.name in set(settings)]
    return _run_grid("conditions", grid, sizes, seeds, progress)


def run_lr_sweep(
    lrs: Sequence[float] = DEFAULT_LRS,
    seeds: Sequence[int] = (0, 1, 2),
    sizes: ExperimentSizes | None = None,
    *,
    progress: Progress = SILENT,
) -> ExperimentResult:
    """The reference setting across learning rates (where the bias appears, C5)."""
    sizes = sizes or ExperimentSizes()
    if not lrs or any(lr <= 0 for lr in lrs):
        raise InputError(f"learning rates must be positive, got {list(lrs)}")
    grid = [Setting(f"lr={lr:g}", f"reference at lr {lr:g}", "none", {"lr": float(lr)}) for lr in sorted(lrs)]
    return _run_grid("lr-sweep", grid, sizes, seeds, progress)
