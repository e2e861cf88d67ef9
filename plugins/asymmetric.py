"""popaudit plugin: an asymmetric two-tower model (transformer users, id-embedding items).

Use it with ``--plugin``::

    python plugins/asymmetric.py example/
    popaudit check example/asymmetric.pt --plugin plugins/asymmetric.py

The user tower is a small transformer encoder over each user's recent item history
(with its own history-token embedding); the item tower is a plain id-embedding table.
Only the item tower enters C1-C3 (docs/theory.md §2), so the item-side verdict is the one
of a plain embedding table: C2 (parameter-linear) and C3 (non-shared rows) hold, and
with plain SGD, a cosine loss and a high learning rate the norms still follow
popularity however complex the user tower is.

Checkpoint layout (``torch.save`` of a dict, readable with ``weights_only=True``)::

    {"asymmetric_two_tower": 1,               # layout marker and version
     "state_dict": AsymmetricTwoTower.state_dict(),
     "user_histories": int64 (n_users, history_length), padded with n_items,
     "config": {"n_users", "n_items", "dim", "heads", "layers", "history_length",
                "loss", "temperature", "optimizer", "lr", "user_lr", ...},
     "item_frequencies": int64 (n_items,)   # optional
     "optimizer": SGD state_dict            # optional
     "train_pairs": int64 (n, 2)}           # optional: (user row, item row) for probes
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

FORMAT = "asymmetric_two_tower"
LAYOUT_KEY = "asymmetric_two_tower"
LAYOUT_VERSION = 1
INIT_STD = 0.1


class TransformerUserTower(nn.Module):
    """Masked-mean-pooled transformer encoder over a padded item history."""

    def __init__(self, n_items: int, dim: int, heads: int, layers: int) -> None:
        super().__init__()
        # Its own token table (row n_items is padding): the item tower's rows stay unshared.
        self.history_embedding = nn.Embedding(n_items + 1, dim, padding_idx=n_items)
        layer = nn.TransformerEncoderLayer(
            dim, heads, dim_feedforward=2 * dim, dropout=0.0, batch_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.out = nn.Linear(dim, dim)
        self.padding = n_items

    def forward(self, histories: torch.Tensor) -> torch.Tensor:
        pad = histories == self.padding
        # A user without history would mask every position (NaN attention): let the first
        # padding slot (a zero vector) be attended to; pooling still ignores it.
        attend_pad = pad.clone()
        attend_pad[:, 0] &= ~pad.all(dim=1)
        hidden = self.encoder(self.history_embedding(histories), src_key_padding_mask=attend_pad)
        keep = (~pad).unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * keep).sum(dim=1) / keep.sum(dim=1).clamp(min=1.0)
        return self.out(pooled)


class AsymmetricTwoTower(nn.Module):
    """Transformer user tower + id-embedding item tower; histories held as a buffer."""

    def __init__(self, histories: torch.Tensor, n_items: int, dim: int, heads: int = 2, layers: int = 1) -> None:
        super().__init__()
        self.user_tower = TransformerUserTower(n_items, dim, heads, layers)
        self.item_embedding = nn.Embedding(n_items, dim)
        # Small initial norms, as in common two-tower baselines: growth is then visible.
        nn.init.normal_(self.item_embedding.weight, std=INIT_STD)
        self.register_buffer("histories", histories.to(torch.int64), persistent=False)


@dataclass
class AsymmetricLive:
    """:class:`auditor.model.LiveModel` of an :class:`AsymmetricTwoTower`."""

    module: AsymmetricTwoTower
    temperature: float
    lr: float
    user_lr: float
    loss_name: str | None = "infonce-cos"

    def encode_items(self, module: torch.nn.Module, rows: torch.Tensor) -> torch.Tensor:
        return module.item_embedding(rows)  # type: ignore[operator]

    def encode_users(self, module: torch.nn.Module, rows: torch.Tensor) -> torch.Tensor:
        return module.user_tower(module.histories[rows])  # type: ignore[operator,index]

    def item_parameters(self, module: torch.nn.Module) -> list[torch.nn.Parameter]:
        return [module.item_embedding.weight]  # type: ignore[union-attr]

    def loss(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        # popaudit's own InfoNCE over cosine logits (in-batch negatives): a cosine loss, C4.
        return two_tower_loss("infonce-cos", users, items, self.temperature)

    def make_optimizer(self, module: torch.nn.Module) -> torch.optim.Optimizer | None:
        # Plain SGD on both towers, each with its own learning rate (one optimizer, two groups).
        return torch.optim.SGD(
            [
                {"params": module.item_embedding.parameters(), "lr": self.lr},  # type: ignore[union-attr]
                {"params": module.user_tower.parameters(), "lr": self.user_lr},  # type: ignore[union-attr]
            ],
            lr=self.lr,
        )


@hookimpl
def popaudit_load_model(path: Path, options: LoadOptions) -> ModelBundle | None:
    """Read an asymmetric two-tower checkpoint; None for any other file."""
    path = Path(path)
    if path.suffix.lower() not in (".pt", ".pth") or not path.is_file():
        return None
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # not ours: the built-in loader reads it or says why it cannot
        return None
    if not isinstance(checkpoint, Mapping) or LAYOUT_KEY not in checkpoint:
        return None
    return bundle_from_checkpoint(checkpoint, path)


@hookimpl
def popaudit_condition_evidence(bundle: ModelBundle) -> dict[str, Condition] | None:
    """The item tower is an id-embedding table: C2 and C3 hold whatever the user tower is."""
    if bundle.format != FORMAT:
        return None
    note = "asymmetric plugin: item tower is an id-embedding table (the transformer user tower does not enter C1-C3)"
    return {
        "C2": Condition("parameter-linear encoder", "holds", f"{note}; q_i = E_i (row i of E) is linear in E"),
        "C3": Condition("non-shared parameters", "holds", f"{note}; each item owns its row, J_i J_jᵀ = 0 for i≠j"),
    }


def bundle_from_checkpoint(checkpoint: Mapping[str, Any], path: Path) -> ModelBundle:
    """Rebuild the model from an asymmetric checkpoint and fill a :class:`ModelBundle`."""
    missing = [key for key in ("state_dict", "user_histories", "config") if key not in checkpoint]
    if missing:
        raise ModelLoadError(f"asymmetric checkpoint {path} lacks {', '.join(missing)}")
    if checkpoint[LAYOUT_KEY] != LAYOUT_VERSION:
        raise ModelLoadError(
            f"asymmetric checkpoint {path} has layout version {checkpoint[LAYOUT_KEY]!r}; "
            f"this plugin reads {LAYOUT_VERSION}"
        )
    config = dict(checkpoint["config"])
    histories = torch.as_tensor(checkpoint["user_histories"], dtype=torch.int64)
    try:
        n_items = int(config["n_items"])
        module = AsymmetricTwoTower(histories, n_items, int(config["dim"]), int(config["heads"]), int(config["layers"]))
        module.load_state_dict(checkpoint["state_dict"])
    except (KeyError, RuntimeError, ValueError, AssertionError) as exc:
        raise ModelLoadError(f"asymmetric checkpoint {path} does not match its config: {exc}") from exc
    if histories.ndim != 2 or int(histories.min()) < 0 or int(histories.max()) > n_items:
        raise ModelLoadError(f"asymmetric checkpoint {path}: user_histories must be (n_users, L) rows in 0..{n_items}")
    live = AsymmetricLive(
        module,
        float(config.get("temperature", 0.1)),
        float(config.get("lr", 0.1)),
        float(config.get("user_lr", config.get("lr", 0.1))),
    )
    module.eval()
    with torch.no_grad():
        users = live.encode_users(module, torch.arange(histories.shape[0])).numpy().astype(np.float32)
    module.train()
    freq = checkpoint.get("item_frequencies")
    pairs = checkpoint.get("train_pairs")
    train_pairs = None
    if pairs is not None:
        p = torch.as_tensor(pairs).numpy().astype(np.int64)
        train_pairs = InteractionPairs(p[:, 0], p[:, 1], np.arange(histories.shape[0]))
    return ModelBundle(
        source=path,
        format=FORMAT,
        replaced_globals={},  # torch.load(weights_only=True) refuses any global outside torch's allow-list
        item_table=module.item_embedding.weight.detach().numpy().astype(np.float32).copy(),
        item_key="item_embedding.weight",
        user_table=users,
        user_key="user_tower",
        item_frequencies=None if freq is None else torch.as_tensor(freq).numpy().astype(np.int64),
        state_dict=checkpoint["state_dict"],
        optimizer_state=checkpoint.get("optimizer"),
        config=config,
        live=live,
        train_pairs=train_pairs,
    )


def train_example(
    *,
    n_users: int = 300,
    n_items: int = 200,
    dim: int = 16,
    history_length: int = 8,
    n_interactions: int = 20_000,
    epochs: int = 5,
    batch_size: int = 256,
    lr: float = 2.0,
    user_lr: float = 0.05,
    temperature: float = 0.1,
    seed: int = 0,
) -> tuple[dict[str, Any], np.ndarray, np.ndarray]:
    """Train a small asymmetric model on a seeded synthetic Zipf log.

    Plain SGD on both towers (item lr ``lr``, user lr ``user_lr``) with cosine InfoNCE:
    C1-C4 hold on the item side. Returns the checkpoint and the (users, items) log rows.
    """
    from auditor.train.data import synthetic_interactions
    from auditor.train.loop import train_live

    data = synthetic_interactions(n_users, n_items, n_interactions, 1.0, seed=seed)
    histories = torch.from_numpy(data.histories(history_length))
    heads, layers = 2, 1
    with torch.random.fork_rng(devices=[]):  # seed the initialisation, not the caller's RNG
        torch.manual_seed(seed)
        model = AsymmetricTwoTower(histories, n_items, dim, heads, layers)
    live = AsymmetricLive(model, temperature, lr, user_lr)
    users, items = torch.from_numpy(data.users), torch.from_numpy(data.items)
    optimizer = train_live(live, users, items, epochs=epochs, batch_size=batch_size, seed=seed)
    checkpoint = {
        LAYOUT_KEY: LAYOUT_VERSION,
        "state_dict": model.state_dict(),
        "user_histories": histories,
        "config": {
            "n_users": n_users,
            "n_items": n_items,
            "dim": dim,
            "heads": heads,
            "layers": layers,
            "history_length": history_length,
            "loss": "infonce-cos",
            "temperature": temperature,
            "optimizer": "sgd",
            "lr": lr,
            "user_lr": user_lr,
            "momentum": 0.0,
            "weight_decay": 0.0,
            "epochs": epochs,
            "batch_size": batch_size,
            "seed": seed,
        },
        "item_frequencies": torch.from_numpy(data.item_frequencies),
        "optimizer": optimizer.state_dict(),
        "train_pairs": torch.stack([users, items], dim=1),
    }
    return checkpoint, data.users, data.items


def write_example(out_dir: Path, **settings: Any) -> tuple[Path, Path]:
    """Write ``asymmetric.pt`` and ``interactions.parquet`` into ``out_dir``; return both paths."""
    from auditor.train.loop import save_example

    return save_example(Path(out_dir), "asymmetric", *train_example(**settings))


def main(argv: list[str] | None = None) -> None:
    """``python plugins/asymmetric.py OUT_DIR``: write the trained example."""
    parser = argparse.ArgumentParser(description="Write a small trained asymmetric two-tower example.")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    model, log = write_example(args.out_dir, seed=args.seed)
    print(f"wrote {model} and {log}")


if __name__ == "__main__":
    main()
