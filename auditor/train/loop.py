"""The training loop of ``popaudit retrain`` and the checkpoint it writes.

Seeded and deterministic on CPU: torch's RNG (forked, so the caller's global state is
left alone) initialises the model, a numpy Generator shuffles the interactions. The
training monitor (:mod:`auditor.train.watch`) records the trace; each epoch appends its
row (mean loss, frequency-norm Spearman rho, mean item norm, the monitor's figures).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from auditor import __version__
from auditor.errors import TrainingError, setting
from auditor.io import atomic_path, torch_save
from auditor.metrics.correlations import spearman as spearman_rho
from auditor.model import CHECKPOINT_MARKER, CHECKPOINT_VERSION, LiveModel
from auditor.monitor import TrainingAlertWarning, TrainingMonitor
from auditor.probes.eager import compiler_free, eager_step
from auditor.progress import SILENT, Progress
from auditor.train import LOSSES, OPTIMIZERS, TRANSFORMER_HEADS, default_lr
from auditor.train.data import TrainingData, batch_starts, random_projection_features
from auditor.train.losses import two_tower_loss
from auditor.train.models import NEEDS_FEATURES, NEEDS_HISTORIES, ModelSpec, TwoTower, build_model, encode_all
from auditor.train.optim import effective_momentum, make_optimizer
from auditor.train.watch import WatchOptions, require_finite, retrain_monitor, trace_row
from auditor.wording import training_rho

if TYPE_CHECKING:
    from auditor.train.split import HoldoutSplit

MAX_TRAIN_PAIRS = 1_000_000
"""At most this many (user, item) rows are stored in the checkpoint (a seeded sample)."""


@dataclass(frozen=True)
class TrainConfig:
    """Every setting of one training run (the ``popaudit retrain`` options).

    ``user_optimizer``/``user_lr`` default to the item tower's. ``momentum`` is used
    only by the ``momentum`` optimizer; the checkpoint records the effective value.
    """

    optimizer: str = "sgd"
    lr: float | None = None
    """None: :func:`auditor.train.default_lr` for the optimizer and loss."""
    momentum: float = 0.9
    weight_decay: float = 0.0
    item_encoder: str = "embedding"
    user_encoder: str = "embedding"
    user_optimizer: str | None = None
    user_lr: float | None = None
    """None: ``lr`` when the towers share an optimizer, else the user optimizer's default."""
    loss: str = "infonce-cos"
    temperature: float = 0.1
    dim: int = 32
    init_std: float = 0.1
    epochs: int = 10
    batch_size: int = 256
    seed: int = 0
    hidden_dim: int = 64
    n_features: int = 32
    history_length: int = 20
    n_heads: int = TRANSFORMER_HEADS
    n_layers: int = 1
    logq: bool = False
    """Subtract log p_j (p_j: item j's share of the training interactions) from the
    in-batch softmax logits (:func:`auditor.train.losses.in_batch_logits`)."""

    def __post_init__(self) -> None:
        for name in ("optimizer", "user_optimizer"):
            value = getattr(self, name)
            if value is not None and value not in OPTIMIZERS:
                raise TrainingError(
                    f"unknown {name.replace('_', ' ')} {value!r}; choose one of {', '.join(OPTIMIZERS)}"
                )
        if self.loss not in LOSSES:
            raise TrainingError(f"unknown loss {self.loss!r}; choose one of {', '.join(LOSSES)}")
        if self.lr is None:
            object.__setattr__(self, "lr", default_lr(self.optimizer, self.loss))
        if self.user_lr is None:
            same = self.resolved_user_optimizer == self.optimizer
            user_lr = self.lr if same else default_lr(self.resolved_user_optimizer, self.loss)
            object.__setattr__(self, "user_lr", user_lr)
        if not (self.lr > 0 and self.user_lr > 0 and math.isfinite(self.lr) and math.isfinite(self.user_lr)):  # type: ignore[operator, arg-type]
            raise TrainingError(f"learning rates must be positive finite numbers, got {self.lr} and {self.user_lr}")
        for name in ("momentum", "weight_decay", "init_std"):  # click ranges let NaN through
            if not math.isfinite(getattr(self, name)):
                raise TrainingError(f"{setting(name)} must be a finite number, got {getattr(self, name)}")
        if not (self.temperature > 0 and math.isfinite(self.temperature)):
            raise TrainingError(f"{setting('temperature')} must be positive, got {self.temperature}")
        if self.logq and self.loss == "cosine":
            raise TrainingError(
                f"{setting('logq')} corrects in-batch softmax logits: use it with {setting('loss')} infonce-cos "
                "or infonce-dot, not cosine"
            )
        if self.epochs < 1:
            raise TrainingError(f"{setting('epochs')} must be at least 1, got {self.epochs}")
        if self.batch_size < 2:
            raise TrainingError(
                f"{setting('batch_size')} must be at least 2 (in-batch negatives), got {self.batch_size}"
            )

    @property
    def resolved_user_optimizer(self) -> str:
        return self.user_optimizer or self.optimizer

    @property
    def item_lr(self) -> float:
        """The item tower's learning rate (resolved)."""
        return float(self.lr)  # type: ignore[arg-type]

    @property
    def resolved_user_lr(self) -> float:
        """The user tower's learning rate (resolved)."""
        return float(self.user_lr)  # type: ignore[arg-type]

    def model_spec(self, data: TrainingData) -> ModelSpec:
        """The model to train on ``data``: every :class:`ModelSpec` field this config sets."""
        fields = {name: getattr(self, name) for name in ModelSpec.__dataclass_fields__ if hasattr(self, name)}
        return ModelSpec(n_users=data.n_users, n_items=data.n_items, **fields)

    def optimizers(self, model: TwoTower) -> tuple[torch.optim.Optimizer, torch.optim.Optimizer]:
        """The item tower's and the user tower's optimizers over ``model``."""
        towers = (
            (self.optimizer, model.item_parameters(), self.item_lr),
            (self.resolved_user_optimizer, model.user_parameters(), self.resolved_user_lr),
        )
        item_opt, user_opt = (
            make_optimizer(name, params, lr=lr, momentum=self.momentum, weight_decay=self.weight_decay)
            for name, params, lr in towers
        )
        return item_opt, user_opt

    def record(self, data: TrainingData) -> dict[str, Any]:
        """The checkpoint's ``config``: every setting, resolved, plus the data's shape."""
        out = asdict(self)
        out.update(self.model_spec(data).to_dict())
        out["momentum"] = effective_momentum(self.optimizer, self.momentum)
        out["user_optimizer"] = self.resolved_user_optimizer
        out["user_lr"] = float(self.resolved_user_lr)
        out["user_momentum"] = effective_momentum(self.resolved_user_optimizer, self.momentum)
        out["user_weight_decay"] = float(self.weight_decay)
        out["lr"] = self.item_lr
        out["weight_decay"] = float(self.weight_decay)
        out["data"] = dict(data.description)
        out["n_interactions"] = data.n_interactions
        out["steps_per_epoch"] = len(batch_starts(data.n_interactions, self.batch_size))
        out["popaudit_version"] = __version__
        if not self.logq:  # recorded only when used: absent reads as no correction, as in older checkpoints
            del out["logq"]
        if self.loss == "cosine":  # the pointwise loss has no softmax: no temperature was used, none is recorded
            del out["temperature"]
        return out


@dataclass
class TrainResult:
    """A trained model with its optimizers, inputs and per-epoch trace."""

    model: TwoTower
    item_optimizer: torch.optim.Optimizer
    user_optimizer: torch.optim.Optimizer
    config: TrainConfig
    data: TrainingData
    trace: list[dict[str, float]] = field(default_factory=list)
    item_features: torch.Tensor | None = None
    user_histories: torch.Tensor | None = None
    stopped: str | None = None
    """Why training ended before ``config.epochs`` (an alert), or None."""

    def item_embeddings(self) -> torch.Tensor:
        """float32 (n_items, dim): the item tower's output for every row."""
        return encode_all(self.model.encode_items, self.data.n_items)

    def user_embeddings(self) -> torch.Tensor:
        """float32 (n_users, dim): the user tower's output for every row."""
        return encode_all(self.model.encode_users, self.data.n_users)


def tower_inputs(
    config: TrainConfig, data: TrainingData
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The item features / user histories the chosen encoders need (else None)."""
    features = None
    if config.item_encoder in NEEDS_FEATURES:
        array = data.item_features
        if array is None or array.shape[1] != config.n_features:
            array = random_projection_features(data.n_items, config.n_features, config.seed)
        features = torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32))
    histories = None
    if config.user_encoder in NEEDS_HISTORIES:
        histories = torch.from_numpy(data.histories(config.history_length))
    return features, histories


def spearman(frequencies: np.ndarray, norms: np.ndarray) -> float:
    """Spearman rho of frequency against norm (nan when either is constant)."""
    if np.ptp(frequencies) == 0 or np.ptp(norms) == 0:
        return float("nan")
    return spearman_rho(frequencies, norms).statistic


def train(
    data: TrainingData, config: TrainConfig, *, progress: Progress = SILENT, watch: WatchOptions | None = None
) -> TrainResult:
    """Train a two-tower model on ``data``; deterministic for a given config on CPU.

    The training monitor (settings ``watch``) takes the trace; its epoch records are the
    result's ``trace``. An alert with the action ``stop`` ends training after its step
    (``stopped`` says why); ``raise`` raises AlertTripped. Raises TrainingError when the
    loss becomes non-finite (lower the learning rate).
    """
    features, histories = tower_inputs(config, data)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        model = build_model(
            config.model_spec(data), item_features=features, user_histories=histories
        )
    with compiler_free():  # eager training: torch.optim would load (and set up) the compiler stack
        item_opt, user_opt = config.optimizers(model)
    result = TrainResult(model, item_opt, user_opt, config, data, [], features, histories)
    monitor = retrain_monitor(model, item_opt, data, watch or WatchOptions(), seed=config.seed, config=config.record(data))
    with monitor, warnings.catch_warnings(), compiler_free():
        warnings.simplefilter("ignore", TrainingAlertWarning)  # alerts reach the user through progress
        _epochs(result, monitor, progress)
    return result


def _epochs(result: TrainResult, monitor: TrainingMonitor, progress: Progress) -> None:
    """The epochs of :func:`train`, each closed by the monitor's epoch record."""
    data, config, model = result.data, result.config, result.model
    item_opt, user_opt = result.item_optimizer, result.user_optimizer
    rng = np.random.default_rng(config.seed)
    users = torch.from_numpy(data.users)
    items = torch.from_numpy(data.items)
    freq = data.item_frequencies
    log_p = torch.from_numpy(np.log(np.maximum(freq, 1) / data.n_interactions)).float() if config.logq else None
    n, bs = data.n_interactions, config.batch_size
    starts = batch_starts(n, bs)
    rho, mean_loss, fired = float("nan"), float("nan"), 0
    for epoch in range(1, config.epochs + 1):
        perm = torch.from_numpy(rng.permutation(n))
        ep_users, ep_items = users[perm], items[perm]
        total = torch.zeros((), dtype=torch.float64)
        desc = f"epoch {epoch}/{config.epochs}"
        if epoch > 1:
            desc += f" · loss {mean_loss:.4f} · ρ {training_rho(rho)}"
        done = 0
        with progress.track(desc, total=len(starts)) as advance:
            for start in starts:
                stop = min(start + bs, n) if start != starts[-1] else n
                batch_items = ep_items[start:stop]
                u = model.encode_users(ep_users[start:stop])
                q = model.encode_items(batch_items)
                log_q = None if log_p is None else log_p[batch_items]
                loss = two_tower_loss(config.loss, u, q, config.temperature, log_q)
                item_opt.zero_grad(set_to_none=True)
                user_opt.zero_grad(set_to_none=True)
                loss.backward()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
                with monitor.step(batch_items, loss=loss.detach()):
                    eager_step(item_opt)
                    eager_step(user_opt)
                total += loss.detach()
                done += 1
                advance(1)
                if monitor.should_stop:
                    break
        mean_loss = float(total) / done
        record = monitor.end_epoch(epoch=epoch, loss=mean_loss)
        for event in monitor.fired[fired:]:
            progress.note(event.describe() + ("; stopping training" if event.action == "stop" else ""))
        fired = len(monitor.fired)
        require_finite(record, result.item_embeddings, config.item_lr)
        row = trace_row(record)
        rho = row["spearman"]
        result.trace.append(row)
        progress.note(
            f"epoch {epoch}/{config.epochs}: loss {mean_loss:.4f}, frequency-norm ρ {training_rho(rho)}, "
            f"mean item norm {row['mean_norm']:.3f}"
        )
        if monitor.should_stop:
            result.stopped = f"stopped in epoch {epoch} at step {monitor.global_step} by an alert"
            return


def train_live(
    live: LiveModel,
    users: torch.Tensor,
    items: torch.Tensor,
    *,
    epochs: int,
    batch_size: int,
    seed: int = 0,
) -> torch.optim.Optimizer:
    """Train any :class:`~auditor.model.LiveModel` on (user row, item row) pairs, in place.

    Each epoch visits the pairs in a seeded random order, in batches of ``batch_size``,
    stepping ``live.make_optimizer(live.module)`` on ``live.loss``; for plugin authors
    who want a small trained example of their own towers. Returns the optimizer (its
    state belongs in the checkpoint, so probes can rebuild it).
    """
    with compiler_free():
        optimizer = live.make_optimizer(live.module)
        if optimizer is None:
            raise TrainingError("the live model gives no optimizer to train with")
        module = live.module
        generator = torch.Generator().manual_seed(seed)
        for _ in range(epochs):
            order = torch.randperm(len(users), generator=generator)
            for start in range(0, len(order), batch_size):
                batch = order[start : start + batch_size]
                optimizer.zero_grad()
                loss = live.loss(live.encode_users(module, users[batch]), live.encode_items(module, items[batch]))
                loss.backward()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
                eager_step(optimizer)
    return optimizer


def save_example(
    out_dir: Path, name: str, checkpoint: Mapping[str, Any], users: np.ndarray, items: np.ndarray
) -> tuple[Path, Path]:
    """Write ``{name}.pt`` (the checkpoint) and ``interactions.parquet`` (``user_id``,
    ``item_id``: the log it was trained on) into ``out_dir``, each atomically.

    Returns (model path, interactions path).
    """
    out_dir = Path(out_dir)
    model_path, log_path = out_dir / f"{name}.pt", out_dir / "interactions.parquet"
    with atomic_path(model_path) as tmp:
        torch_save(dict(checkpoint), tmp, model_path)
    with atomic_path(log_path) as tmp:
        pq.write_table(pa.table({"user_id": users, "item_id": items}), tmp)
    return model_path, log_path


def build_checkpoint(result: TrainResult, holdout: HoldoutSplit | None = None) -> dict[str, Any]:
    """The checkpoint dict (loadable with ``torch.load(weights_only=True)``).

    With ``holdout`` (``result`` trained on ``holdout.train``), the held-out pairs are
    stored as ``holdout_pairs`` (int64 (n, 2): user row, item row) and the split's
    settings under ``config["holdout"]``.
    """
    data, config = result.data, result.config
    n = data.n_interactions
    pairs = np.stack([data.users, data.items], axis=1)
    if n > MAX_TRAIN_PAIRS:
        rng = np.random.default_rng(np.random.SeedSequence([config.seed, 0xA1]))
        pairs = pairs[np.sort(rng.choice(n, MAX_TRAIN_PAIRS, replace=False))]
    with compiler_free():
        item_state, user_state = result.item_optimizer.state_dict(), result.user_optimizer.state_dict()
    ckpt: dict[str, Any] = {
        CHECKPOINT_MARKER: CHECKPOINT_VERSION,
        "state_dict": {k: v.detach().clone() for k, v in result.model.state_dict().items()},
        "optimizer_state_dict": item_state,
        "user_optimizer_state_dict": user_state,
        "config": config.record(data),
        "item_ids": list(data.item_ids),
        "user_ids": list(data.user_ids),
        "item_frequencies": torch.from_numpy(data.item_frequencies),
        "item_embeddings": result.item_embeddings(),
        "user_embeddings": result.user_embeddings(),
        "trace": [dict(row) for row in result.trace],
        "train_pairs": torch.from_numpy(np.ascontiguousarray(pairs, dtype=np.int64)),
    }
    if result.stopped is not None:  # the epochs begun and the steps taken: C5 projects the updates taken
        ckpt["config"].update(epochs=len(result.trace), stopped=result.stopped, steps=result.trace[-1]["step"])
    if holdout is not None:
        ckpt["holdout_pairs"] = torch.from_numpy(np.ascontiguousarray(holdout.holdout, dtype=np.int64))
        ckpt["config"]["holdout"] = holdout.record()
    if result.item_features is not None:
        ckpt["item_features"] = result.item_features.clone()
    if result.user_histories is not None:
        ckpt["user_histories"] = result.user_histories.clone()
    return ckpt


def save_checkpoint(result: TrainResult, path: Path, holdout: HoldoutSplit | None = None) -> Path:
    """Write the checkpoint of ``result`` (and ``holdout``) to ``path`` atomically; returns the path."""
    path = Path(path)
    ckpt = build_checkpoint(result, holdout)
    with atomic_path(path) as tmp:
        torch_save(ckpt, tmp, path)
    return path
