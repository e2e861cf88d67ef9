"""Two-tower baselines: item and user encoders, chosen by name.

The item encoders span the conditions of docs/theory.md §2: ``embedding`` and
``onehot-linear`` satisfy C2/C3 (parameter-linear, non-shared); ``dense-linear`` is
parameter-linear but shares its weight between items (C3 violated);
``embedding-linear`` and ``mlp`` are not parameter-linear (C2 violated; the shared
layers also break C3). User encoders do not matter for the conditions (only the item
tower's do) but let the asymmetric, production-like case be trained.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from auditor.errors import TrainingError, setting
from auditor.train import ITEM_ENCODERS, TRANSFORMER_HEADS, USER_ENCODERS, hidden_width_problem

NEEDS_FEATURES = frozenset({"dense-linear"})
NEEDS_HISTORIES = frozenset({"transformer"})


@dataclass(frozen=True)
class ModelSpec:
    """Everything needed to rebuild a :class:`TwoTower` (also stored in the config)."""

    n_users: int
    n_items: int
    dim: int = 32
    item_encoder: str = "embedding"
    user_encoder: str = "embedding"
    init_std: float = 0.1
    hidden_dim: int = 64
    n_features: int = 32
    history_length: int = 20
    n_heads: int = TRANSFORMER_HEADS
    n_layers: int = 1

    def __post_init__(self) -> None:
        if self.item_encoder not in ITEM_ENCODERS:
            raise TrainingError(
                f"unknown item encoder {self.item_encoder!r}; choose one of {', '.join(ITEM_ENCODERS)}"
            )
        if self.user_encoder not in USER_ENCODERS:
            raise TrainingError(
                f"unknown user encoder {self.user_encoder!r}; choose one of {', '.join(USER_ENCODERS)}"
            )
        for name in ("n_users", "n_items", "dim", "hidden_dim", "n_features", "history_length"):
            if getattr(self, name) < 1:
                raise TrainingError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.init_std <= 0:
            raise TrainingError(f"{setting('init_std')} must be positive, got {self.init_std}")
        if (why := hidden_width_problem(self.user_encoder, self.hidden_dim, self.n_heads)) is not None:
            raise TrainingError(f"{setting('hidden_dim')} {why}")

    def to_dict(self) -> dict[str, Any]:
        """Every field, as recorded in the checkpoint's config."""
        return asdict(self)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ModelSpec:
        """The spec recorded in a checkpoint's config (other keys are ignored)."""
        names = cls.__dataclass_fields__
        return cls(**{k: config[k] for k in names if k in config})


class EmbeddingItems(nn.Module):
    """An id embedding table: q_i is row i (C2 and C3 hold)."""

    def __init__(self, n: int, dim: int, init_std: float) -> None:
        super().__init__()
        self.table = nn.Embedding(n, dim)
        nn.init.normal_(self.table.weight, 0.0, init_std)

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        return self.table(rows)


class OneHotLinear(nn.Module):
    """``nn.Linear(n, dim, bias=False)`` over one-hot ids, computed as a column gather.

    Mathematically W e_i = W[:, i], so gathering the column gives the same output and
    gradient as the matrix product without an O(n) one-hot vector per example; the
    parameter is still the (dim, n) linear weight.
    """

    def __init__(self, n: int, dim: int, init_std: float) -> None:
        super().__init__()
        self.linear = nn.Linear(n, dim, bias=False)
        nn.init.normal_(self.linear.weight, 0.0, init_std)

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        return self.linear.weight.index_select(1, rows).t()


class DenseLinear(nn.Module):
    """``nn.Linear`` over fixed dense item features (shared weight: C3 violated)."""

    features: torch.Tensor

    def __init__(self, features: torch.Tensor, dim: int, init_std: float) -> None:
        super().__init__()
        # Not persistent: the checkpoint stores the features under "item_features".
        self.register_buffer("features", features.to(torch.float32), persistent=False)
        self.linear = nn.Linear(features.shape[1], dim, bias=False)
        nn.init.normal_(self.linear.weight, 0.0, init_std)

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        return self.linear(self.features[rows])


class EmbeddingLinear(nn.Module):
    """An embedding table followed by a shared linear map (C2 and C3 violated)."""

    def __init__(self, n: int, hidden: int, dim: int, init_std: float) -> None:
        super().__init__()
        self.table = nn.Embedding(n, hidden)
        nn.init.normal_(self.table.weight, 0.0, init_std)
        self.linear = nn.Linear(hidden, dim, bias=False)

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        return self.linear(self.table(rows))


class MLPTower(nn.Module):
    """An embedding table followed by a two-layer ReLU MLP (non-linear: C2 violated; its
    shared layers break C3 too).

    Also the ``mlp`` user encoder (over user ids).
    """

    def __init__(self, n: int, hidden: int, dim: int, init_std: float) -> None:
        super().__init__()
        self.table = nn.Embedding(n, hidden)
        nn.init.normal_(self.table.weight, 0.0, init_std)
        self.mlp = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, dim))

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.table(rows))


class HistoryTransformer(nn.Module):
    """A small transformer over each user's recent items; the output at a [CLS] token.

    Histories are a (n_users, L) tensor of item rows padded with ``n_items``; the
    always-present [CLS] token keeps users with an empty history well defined.
    """

    histories: torch.Tensor

    def __init__(
        self, histories: torch.Tensor, n_items: int, hidden: int, dim: int, init_std: float,
        n_heads: int, n_layers: int,
    ) -> None:
        super().__init__()
        self.register_buffer("histories", histories.to(torch.int64), persistent=False)
        self.pad = n_items
        self.tokens = nn.Embedding(n_items + 2, hidden, padding_idx=n_items)  # + pad, + CLS
        nn.init.normal_(self.tokens.weight, 0.0, init_std)
        with torch.no_grad():
            self.tokens.weight[n_items].zero_()
        self.position = nn.Parameter(torch.randn(histories.shape[1] + 1, hidden) * init_std)
        layer = nn.TransformerEncoderLayer(
            hidden, n_heads, dim_feedforward=2 * hidden, dropout=0.0, batch_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.out = nn.Linear(hidden, dim)

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        hist = self.histories[rows]
        cls = torch.full((hist.shape[0], 1), self.pad + 1, dtype=torch.int64, device=hist.device)
        seq = torch.cat([cls, hist], dim=1)
        x = self.tokens(seq) + self.position
        h = self.encoder(x, src_key_padding_mask=seq == self.pad)
        return self.out(h[:, 0])


class TwoTower(nn.Module):
    """A user tower and an item tower mapping table rows to ``dim``-d embeddings."""

    def __init__(self, item_tower: nn.Module, user_tower: nn.Module) -> None:
        super().__init__()
        self.item_tower = item_tower
        self.user_tower = user_tower

    def encode_items(self, rows: torch.Tensor) -> torch.Tensor:
        """Item embeddings (len(rows), dim) of item table rows ``rows``."""
        return self.item_tower(rows)

    def encode_users(self, rows: torch.Tensor) -> torch.Tensor:
        """User embeddings (len(rows), dim) of user rows ``rows``."""
        return self.user_tower(rows)

    def item_parameters(self) -> list[nn.Parameter]:
        """The item tower's parameters (what the item optimizer trains)."""
        return list(self.item_tower.parameters())

    def user_parameters(self) -> list[nn.Parameter]:
        """The user tower's parameters (what the user optimizer trains)."""
        return list(self.user_tower.parameters())


def build_model(
    spec: ModelSpec,
    *,
    item_features: torch.Tensor | None = None,
    user_histories: torch.Tensor | None = None,
) -> TwoTower:
    """A freshly initialised two-tower model (uses torch's global RNG: seed it first)."""
    d, h, s = spec.dim, spec.hidden_dim, spec.init_std
    item: nn.Module
    if spec.item_encoder == "embedding":
        item = EmbeddingItems(spec.n_items, d, s)
    elif spec.item_encoder == "onehot-linear":
        item = OneHotLinear(spec.n_items, d, s)
    elif spec.item_encoder == "dense-linear":
        if item_features is None or item_features.shape[0] != spec.n_items:
            raise TrainingError("the dense-linear item encoder needs (n_items, F) item features")
        item = DenseLinear(item_features, d, s)
    elif spec.item_encoder == "embedding-linear":
        item = EmbeddingLinear(spec.n_items, h, d, s)
    else:
        item = MLPTower(spec.n_items, h, d, s)

    user: nn.Module
    if spec.user_encoder == "embedding":
        user = EmbeddingItems(spec.n_users, d, s)
    elif spec.user_encoder == "mlp":
        user = MLPTower(spec.n_users, h, d, s)
    else:
        if user_histories is None or user_histories.shape[0] != spec.n_users:
            raise TrainingError("the transformer user encoder needs (n_users, L) histories")
        user = HistoryTransformer(user_histories, spec.n_items, h, d, s, spec.n_heads, spec.n_layers)
    return TwoTower(item, user)


@torch.no_grad()
def encode_all(encode: Callable[[torch.Tensor], torch.Tensor], n: int, chunk: int = 65_536) -> torch.Tensor:
    """float32 (n, dim): ``encode(rows)`` for rows 0..n-1, in chunks to bound memory."""
    parts = [
        encode(torch.arange(start, min(start + chunk, n), dtype=torch.int64))
        for start in range(0, n, chunk)
    ]
    return torch.cat(parts).to(torch.float32)
