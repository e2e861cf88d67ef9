"""Training losses of the baselines, by name (docs/theory.md C4 is about which of them hold).

``infonce-cos`` and ``cosine`` depend on item embeddings only through q/||q|| (C4
holds); ``infonce-dot`` uses raw dot products (C4 violated).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from auditor.errors import TrainingError
from auditor.train import LOSSES


def two_tower_loss(
    name: str, users: torch.Tensor, items: torch.Tensor, temperature: float = 0.1
) -> torch.Tensor:
    """Scalar loss of a batch of matched (user, item) embeddings, both (b, dim).

    * ``infonce-cos``: in-batch softmax cross-entropy over cos(u_a, q_b) / temperature,
      the matched item being the target.
    * ``infonce-dot``: the same over u_a . q_b / temperature.
    * ``cosine``: pointwise cosine embedding loss: 1 - cos(u_a, q_a) for each matched
      pair, plus max(0, cos(u_a, q_{a+1})) for one in-batch negative per user (the next
      item in the batch), so it needs no random state.
    """
    if name == "infonce-cos":
        logits = F.normalize(users, dim=1) @ F.normalize(items, dim=1).t() / temperature
    elif name == "infonce-dot":
        logits = users @ items.t() / temperature
    elif name == "cosine":
        b = users.shape[0]
        negatives = items.roll(1, dims=0)
        target = torch.cat([users.new_ones(b), -users.new_ones(b)])
        return F.cosine_embedding_loss(
            torch.cat([users, users]), torch.cat([items, negatives]), target, margin=0.0
        )
    else:
        raise TrainingError(f"unknown loss {name!r}; choose one of {', '.join(LOSSES)}")
    labels = torch.arange(users.shape[0], device=users.device)
    return F.cross_entropy(logits, labels)
