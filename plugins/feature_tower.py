"""popaudit plugin: a feature-based item tower (id embedding + a shared Linear over features).

Use it with ``--plugin``::

    python plugins/feature_tower.py example/          # writes a small trained example
    popaudit check example/feature_tower.pt --plugin plugins/feature_tower.py \
        --interactions example/interactions.parquet

The item tower maps item row i to ``E[i] + W x_i``: an id embedding plus one Linear
layer (``W``, shared by every item) over the item's dense features ``x_i``. The output
is linear in the parameters (C2 holds) but the Linear layer is shared: for two
distinct items the cross Jacobian is J_i J_jᵀ = (x_iᵀx_j)·I (their id rows are
separate, W is common), non-zero whenever the features overlap, so C3 is violated.
The plugin declares that, with the measured feature overlap as evidence.

Checkpoint layout (``torch.save`` of a dict, readable with ``weights_only=True``)::

    {"feature_tower": 1,                      # layout marker and version
     "state_dict": FeatureTwoTower.state_dict(),
     "item_features": float32 (n_items, n_features),
     "config": {"n_users", "n_items", "n_features", "dim", "loss", "temperature",
                "optimizer", "lr", "momentum", "weight_decay", ...},
     "item_ids": int64 (n_items,)          # optional: raw id of each row
     "item_frequencies": int64 (n_items,)  # optional: training interactions per row
     "optimizer": SGD state_dict           # optional
     "train_pairs": int64 (n, 2)}          # optional: (user row, item row) for probes
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from auditor.config import LoadOptions
from auditor.errors import ModelLoadError
from auditor.hookspecs import hookimpl
from auditor.model import InteractionPairs, ModelBundle
from auditor.result import Condition
from auditor.train.losses import two_tower_loss

FORMAT = "feature_tower"
LAYOUT_KEY = "feature_tower"
LAYOUT_VERSION = 1
INIT_STD = 0.1
# Pairs of items sampled to measure how much the feature vectors overlap.
EVIDENCE_SAMPLE = 1024


class FeatureItemTower(nn.Module):
    """Item tower: ``E[row] + W x_row`` with dense features held as a buffer."""

    def __init__(self, features: torch.Tensor, dim: int) -> None:
        super().__init__()
        n_items, n_features = features.shape
        self.id_embedding = nn.Embedding(n_items, dim)
        # Small initial norms, as in common two-tower baselines.
        nn.init.normal_(self.id_embedding.weight, std=INIT_STD)
        self.feature_proj = nn.Linear(n_features, dim, bias=False)
        # Not a parameter and not in the state dict: the checkpoint stores it as item_features.
        self.register_buffer("features", features.to(torch.float32), persistent=False)

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        return self.id_embedding(rows) + self.feature_proj(self.features[rows])


class FeatureTwoTower(nn.Module):
    """The whole model: the feature item tower and a user id-embedding tower."""

    def __init__(self, n_users: int, features: torch.Tensor, dim: int) -> None:
        super().__init__()
        self.item_tower = FeatureItemTower(features, dim)
        self.user_embedding = nn.Embedding(n_users, dim)


@dataclass
class FeatureTowerLive:
    """:class:`auditor.model.LiveModel` of a :class:`FeatureTwoTower`."""

    module: FeatureTwoTower
    temperature: float
    lr: float
    loss_name: str | None = "infonce-cos"

    def encode_items(self, module: torch.nn.Module, rows: torch.Tensor) -> torch.Tensor:
        return module.item_tower(rows)  # type: ignore[operator]

    def encode_users(self, module: torch.nn.Module, rows: torch.Tensor) -> torch.Tensor:
        return module.user_embedding(rows)  # type: ignore[operator]

    def item_parameters(self, module: torch.nn.Module) -> list[torch.nn.Parameter]:
        return list(module.item_tower.parameters())  # type: ignore[union-attr]

    def loss(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        # popaudit's own InfoNCE over cosine logits (in-batch negatives): a cosine loss, C4.
        return two_tower_loss("infonce-cos", users, items, self.temperature)

    def make_optimizer(self, module: torch.nn.Module) -> torch.optim.Optimizer | None:
        return torch.optim.SGD(module.parameters(), lr=self.lr)


@hookimpl
def popaudit_load_model(path: Path, options: LoadOptions) -> ModelBundle | None:
    """Read a feature-tower checkpoint; None for any other file."""
    checkpoint = _read(Path(path))
    if checkpoint is None:
        return None
    return bundle_from_checkpoint(checkpoint, Path(path))


@hookimpl
def popaudit_condition_evidence(bundle: ModelBundle) -> dict[str, Condition] | None:
    """C2 holds (output linear in E and W); C3 violated (W is shared over dense features)."""
    if bundle.format != FORMAT or not isinstance(bundle.live, FeatureTowerLive):
        return None
    overlap = feature_overlap(bundle.live.module.item_tower.features)
    n_features = int(bundle.live.module.item_tower.features.shape[1])
    return {
        "C2": Condition(
            name="parameter-linear encoder",
            status="holds",
            evidence="feature_tower plugin: item output E_i + W x_i is linear in the parameters (E, W)",
        ),
        "C3": Condition(
            name="non-shared parameters",
            status="violated",
            evidence=(
                f"feature_tower plugin: one Linear({n_features}->{bundle.dim}) is shared by all items, "
                f"so J_i J_jᵀ = (x_iᵀx_j)·I; {overlap['share_overlapping']:.0%} of sampled item pairs "
                f"have overlapping features (mean |cos(x_i, x_j)| = {overlap['mean_abs_cos']:.2f})"
            ),
            details=overlap,
        ),
    }


def feature_overlap(features: torch.Tensor, sample: int = EVIDENCE_SAMPLE, seed: int = 0) -> dict[str, float]:
    """How far item feature vectors are from orthogonal, over a seeded sample of items.

    ``share_overlapping``: share of distinct pairs with |x_iᵀx_j| > 1e-9·‖x_i‖‖x_j‖;
    ``mean_abs_cos``: mean |cos(x_i, x_j)| over distinct pairs (0 for one-hot features).
    """
    x = features.detach().to(torch.float64)
    generator = torch.Generator().manual_seed(seed)
    if x.shape[0] > sample:
        x = x[torch.randperm(x.shape[0], generator=generator)[:sample]]
    norms = x.norm(dim=1)
    gram = x @ x.T
    scale = torch.outer(norms, norms)
    off = ~torch.eye(x.shape[0], dtype=torch.bool, device=x.device)
    valid = off & (scale > 0)
    if not bool(valid.any()):
        return {"share_overlapping": 0.0, "mean_abs_cos": 0.0, "pairs": 0.0}
    cos = (gram[valid] / scale[valid]).abs()
    return {
        "share_overlapping": float((cos > 1e-9).double().mean()),
        "mean_abs_cos": float(cos.mean()),
        "pairs": float(valid.sum()) / 2,
    }


def bundle_from_checkpoint(checkpoint: Mapping[str, Any], path: Path) -> ModelBundle:
    """Rebuild the model from a feature-tower checkpoint and fill a :class:`ModelBundle`."""
    missing = [key for key in ("state_dict", "item_features", "config") if key not in checkpoint]
    if missing:
        raise ModelLoadError(f"feature-tower checkpoint {path} lacks {', '.join(missing)}")
    version = checkpoint[LAYOUT_KEY]
    if version != LAYOUT_VERSION:
        raise ModelLoadError(
            f"feature-tower checkpoint {path} has layout version {version!r}; this plugin reads {LAYOUT_VERSION}"
        )
    config = dict(checkpoint["config"])
    features = torch.as_tensor(checkpoint["item_features"], dtype=torch.float32)
    try:
        module = FeatureTwoTower(int(config["n_users"]), features, int(config["dim"]))
        module.load_state_dict(checkpoint["state_dict"])
    except (KeyError, RuntimeError, ValueError) as exc:
        raise ModelLoadError(f"feature-tower checkpoint {path} does not match its config: {exc}") from exc
    live = FeatureTowerLive(module, float(config.get("temperature", 0.1)), float(config.get("lr", 0.1)))
    n_items = features.shape[0]
    with torch.no_grad():
        items = live.encode_items(module, torch.arange(n_items)).numpy().astype(np.float32)
        users = module.user_embedding.weight.numpy().astype(np.float32).copy()
    return ModelBundle(
        source=path,
        format=FORMAT,
        replaced_globals={},  # torch.load(weights_only=True) refuses any global outside torch's allow-list
        item_table=items,
        item_key="item_tower",
        user_table=users,
        user_key="user_embedding.weight",
        item_ids=_optional_array(checkpoint, "item_ids", n_items, path),
        item_frequencies=_optional_array(checkpoint, "item_frequencies", n_items, path),
        state_dict=checkpoint["state_dict"],
        optimizer_state=checkpoint.get("optimizer"),
        config=config,
        live=live,
        train_pairs=_pairs(checkpoint, n_items, int(config["n_users"]), path),
    )


def _read(path: Path) -> Mapping[str, Any] | None:
    if path.suffix.lower() not in (".pt", ".pth") or not path.is_file():
        return None
    try:
        # mmap: an unrelated large checkpoint is not read into memory just to be passed on.
        checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # not ours (legacy format, pickled module, ...): the built-in loader says why
        return None
    if isinstance(checkpoint, Mapping) and LAYOUT_KEY in checkpoint:
        return checkpoint
    return None


def _optional_array(checkpoint: Mapping[str, Any], key: str, n_items: int, path: Path) -> np.ndarray | None:
    value = checkpoint.get(key)
    if value is None:
        return None
    array = torch.as_tensor(value).numpy().astype(np.int64)
    if array.shape != (n_items,):
        raise ModelLoadError(f"feature-tower checkpoint {path}: {key} has shape {list(array.shape)}, expected [{n_items}]")
    return array


def _pairs(checkpoint: Mapping[str, Any], n_items: int, n_users: int, path: Path) -> InteractionPairs | None:
    value = checkpoint.get("train_pairs")
    if value is None:
        return None
    pairs = torch.as_tensor(value).numpy().astype(np.int64)
    if pairs.ndim != 2 or pairs.shape[1] != 2 or (pairs[:, 1] >= n_items).any() or (pairs[:, 0] >= n_users).any():
        raise ModelLoadError(f"feature-tower checkpoint {path}: train_pairs must be (n, 2) rows within the tables")
    return InteractionPairs(user_index=pairs[:, 0], item_rows=pairs[:, 1], user_ids=np.arange(n_users))


def train_example(
    *,
    n_users: int = 300,
    n_items: int = 200,
    n_features: int = 8,
    dim: int = 16,
    n_interactions: int = 20_000,
    epochs: int = 5,
    batch_size: int = 256,
    lr: float = 2.0,
    temperature: float = 0.1,
    seed: int = 0,
) -> tuple[dict[str, Any], np.ndarray, np.ndarray]:
    """Train a small feature tower on a seeded synthetic Zipf log (plain SGD, cosine InfoNCE).

    Returns the checkpoint dict and the (users, items) rows of the log it was trained on.
    """
    from auditor.train.data import synthetic_interactions
    from auditor.train.loop import train_live

    data = synthetic_interactions(n_users, n_items, n_interactions, 1.0, seed=seed, n_features=n_features)
    assert data.item_features is not None
    with torch.random.fork_rng(devices=[]):  # seed the initialisation, not the caller's RNG
        torch.manual_seed(seed)
        model = FeatureTwoTower(n_users, torch.from_numpy(data.item_features), dim)
    live = FeatureTowerLive(model, temperature, lr)
    users, items = torch.from_numpy(data.users), torch.from_numpy(data.items)
    optimizer = train_live(live, users, items, epochs=epochs, batch_size=batch_size, seed=seed)
    checkpoint = {
        LAYOUT_KEY: LAYOUT_VERSION,
        "state_dict": model.state_dict(),
        "item_features": model.item_tower.features.clone(),
        "config": {
            "n_users": n_users,
            "n_items": n_items,
            "n_features": n_features,
            "dim": dim,
            "loss": "infonce-cos",
            "temperature": temperature,
            "optimizer": "sgd",
            "lr": lr,
            "momentum": 0.0,
            "weight_decay": 0.0,
            "epochs": epochs,
            "batch_size": batch_size,
            "seed": seed,
        },
        "item_ids": torch.arange(n_items, dtype=torch.int64),
        "item_frequencies": torch.from_numpy(data.item_frequencies),
        "optimizer": optimizer.state_dict(),
        "train_pairs": torch.stack([users, items], dim=1),
    }
    return checkpoint, data.users, data.items


def write_example(out_dir: Path, **settings: Any) -> tuple[Path, Path]:
    """Write ``feature_tower.pt`` and ``interactions.parquet`` (user_id, item_id) into ``out_dir``.

    ``settings`` go to :func:`train_example`. Returns (model path, interactions path).
    """
    from auditor.train.loop import save_example

    return save_example(Path(out_dir), "feature_tower", *train_example(**settings))


def main(argv: list[str] | None = None) -> None:
    """``python plugins/feature_tower.py OUT_DIR``: write the trained example."""
    parser = argparse.ArgumentParser(description="Write a small trained feature-tower example.")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    model, log = write_example(args.out_dir, seed=args.seed)
    print(f"wrote {model} and {log}")


if __name__ == "__main__":
    main()
