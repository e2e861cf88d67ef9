"""Tiny two-tower LiveModel implementations for the condition and probe tests.

Item towers: ``embedding`` (an id table: C2, C3 hold), ``mlp`` (nonlinear: C2, C3
violated), ``dense-linear`` (a linear layer over fixed dense features: C2 holds, C3
violated), ``embedding-linear`` (a shared linear layer over an id table: bilinear).
``hashed`` (the hashing trick: item i is the sum of two rows of a shared bucket table,
``hashes[i]``: C2 holds, C3 violated where two items share a bucket), ``scaled`` (s_i·E[i]
with fixed per-item scales: C2, C3 hold). ``out_dtype`` casts what the item encoder returns
(``torch.float32``: serving code's ``.float()``).
Losses: in-batch InfoNCE over cosine/temperature (C4 holds) or over dot products.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

DTYPE = torch.float64


class Towers(torch.nn.Module):
    """A user id table and one of several item towers, all float64."""

    def __init__(self, n_items: int, n_users: int, dim: int, encoder: str = "embedding",
                 *, n_features: int = 6, seed: int = 0, init_std: float = 1.0,
                 hashes: torch.Tensor | None = None, out_dtype: torch.dtype | None = None) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.encoder = encoder
        self.out_dtype = out_dtype
        if encoder == "hashed":
            assert hashes is not None and hashes.shape == (n_items, 2)
            self.register_buffer("hashes", hashes.to(torch.int64))
            self.item_emb = torch.nn.Embedding(int(hashes.max()) + 1, dim, dtype=DTYPE)
            with torch.no_grad():
                self.item_emb.weight.copy_(torch.randn(int(hashes.max()) + 1, dim, generator=gen, dtype=DTYPE))
        if encoder == "scaled":
            self.register_buffer("scales", torch.linspace(0.5, 2.0, n_items, dtype=DTYPE))
        self.user_emb = torch.nn.Embedding(n_users, dim, dtype=DTYPE)
        with torch.no_grad():
            self.user_emb.weight.copy_(torch.randn(n_users, dim, generator=gen, dtype=DTYPE))
        if encoder in ("embedding", "mlp", "embedding-linear", "scaled"):
            self.item_emb = torch.nn.Embedding(n_items, dim, dtype=DTYPE)
            with torch.no_grad():
                self.item_emb.weight.copy_(init_std * torch.randn(n_items, dim, generator=gen, dtype=DTYPE))
        if encoder == "mlp":
            self.item_mlp = torch.nn.Sequential(
                torch.nn.Linear(dim, dim, dtype=DTYPE), torch.nn.Tanh(), torch.nn.Linear(dim, dim, dtype=DTYPE)
            )
        if encoder == "embedding-linear":
            self.item_proj = torch.nn.Linear(dim, dim, bias=False, dtype=DTYPE)
        if encoder == "dense-linear":
            # Dense, overlapping features (all positive, so every pair has x_iᵀx_j > 0).
            self.register_buffer("features", torch.rand(n_items, n_features, generator=gen, dtype=DTYPE) + 0.1)
            self.item_proj = torch.nn.Linear(n_features, dim, bias=False, dtype=DTYPE)

    def items(self, rows: torch.Tensor) -> torch.Tensor:
        out = self._items(rows)
        return out if self.out_dtype is None else out.to(self.out_dtype)

    def _items(self, rows: torch.Tensor) -> torch.Tensor:
        if self.encoder == "hashed":
            return self.item_emb(self.hashes[rows, 0]) + self.item_emb(self.hashes[rows, 1])
        if self.encoder == "scaled":
            return self.scales[rows, None] * self.item_emb(rows)
        if self.encoder == "embedding":
            return self.item_emb(rows)
        if self.encoder == "mlp":
            return self.item_mlp(self.item_emb(rows))
        if self.encoder == "embedding-linear":
            return self.item_proj(self.item_emb(rows))
        return self.item_proj(self.features[rows])

    def item_params(self) -> list[torch.nn.Parameter]:
        return [p for name, p in self.named_parameters() if not name.startswith("user_emb")]


@dataclass
class TinyLive:
    """A LiveModel over :class:`Towers` with a chosen loss and optimizer."""

    module: Towers
    loss_name: str | None = "infonce-cos"
    temperature: float = 0.5
    optimizer: str = "sgd"
    lr: float = 0.5
    momentum: float = 0.0
    weight_decay: float = 0.0
    optimizer_state: dict[str, Any] | None = None
    rebuild_optimizer: bool = True
    n_users: int = field(init=False)

    def __post_init__(self) -> None:
        self.n_users = int(self.module.user_emb.num_embeddings)

    def encode_items(self, module: torch.nn.Module, rows: torch.Tensor) -> torch.Tensor:
        return module.items(rows)

    def encode_users(self, module: torch.nn.Module, rows: torch.Tensor) -> torch.Tensor:
        return module.user_emb(rows)

    def item_parameters(self, module: torch.nn.Module) -> list[torch.nn.Parameter]:
        return module.item_params()

    def loss(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        if self.loss_name == "infonce-dot":
            logits = users @ items.T
        else:
            logits = F.normalize(users, dim=1) @ F.normalize(items, dim=1).T / self.temperature
        return F.cross_entropy(logits, torch.arange(len(users), device=users.device))  # device-aware: --device cuda

    def build_optimizer(self, module: torch.nn.Module) -> torch.optim.Optimizer:
        params = list(module.parameters())
        if self.optimizer == "adam":
            return torch.optim.Adam(params, lr=self.lr)
        return torch.optim.SGD(params, lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay)

    def make_optimizer(self, module: torch.nn.Module) -> torch.optim.Optimizer | None:
        if not self.rebuild_optimizer:
            return None
        opt = self.build_optimizer(module)
        if self.optimizer_state is not None:
            opt.load_state_dict(self.optimizer_state)
        return opt


def train_state(live: TinyLive, users: torch.Tensor, items: torch.Tensor, steps: int = 2) -> dict[str, Any]:
    """Optimizer state after ``steps`` real steps on a throwaway copy (loads momentum/Adam moments)."""
    import copy

    module = copy.deepcopy(live.module)
    opt = live.build_optimizer(module)
    for _ in range(steps):
        opt.zero_grad()
        live.loss(live.encode_users(module, users), live.encode_items(module, items)).backward()
        opt.step()
    return opt.state_dict()


class ScriptableTowers(torch.nn.Module):
    """Id tables for both towers, written so ``torch.jit.script`` accepts it."""

    def __init__(self, n_items: int, n_users: int, dim: int, seed: int = 0) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.item_emb = torch.nn.Embedding(n_items, dim)
        self.user_emb = torch.nn.Embedding(n_users, dim)
        with torch.no_grad():
            self.item_emb.weight.copy_(torch.randn(n_items, dim, generator=gen))
            self.user_emb.weight.copy_(torch.randn(n_users, dim, generator=gen))

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        return self.item_emb(rows)


@dataclass
class ScriptLive(TinyLive):
    """A LiveModel over a TorchScript module (float32, as scripted models usually are)."""

    def __post_init__(self) -> None:
        self.n_users = int(self.module.user_emb.weight.shape[0])

    def encode_items(self, module: torch.nn.Module, rows: torch.Tensor) -> torch.Tensor:
        return module.item_emb(rows)

    def item_parameters(self, module: torch.nn.Module) -> list[torch.nn.Parameter]:
        return list(module.item_emb.parameters())


@dataclass
class SharedHistoryLive(TinyLive):
    """A user tower that reads the item table: u = U[u] + mean of E[hist_u] (a history-average
    user, as a YouTube-DNN user tower is). Over the item parameters, J_u = Σ_h (c_h/H) I on
    the history rows h (c_h: its count among the H slots), so for an item i of the history
    ‖J_iJ_uᵀ‖/√(‖J_iJ_iᵀ‖‖J_uJ_uᵀ‖) = c_i/√(Σ_h c_h²)."""

    hist: torch.Tensor = field(default_factory=lambda: torch.zeros(0, 0, dtype=torch.int64))

    def encode_users(self, module: torch.nn.Module, rows: torch.Tensor) -> torch.Tensor:
        return module.user_emb(rows) + module.item_emb(self.hist.to(rows.device)[rows]).mean(dim=1)
