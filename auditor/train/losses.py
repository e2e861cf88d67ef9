"""Training losses of the baselines, by name (docs/theory.md C4 is about which of them hold).

``infonce-cos`` and ``cosine`` depend on item embeddings only through q/||q|| (C4
holds); ``infonce-dot`` uses raw dot products (C4 violated). The logQ correction
subtracts a constant per item from the logits, so it leaves C4 as it was.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from auditor.errors import TrainingError
from auditor.train import LOSSES


def in_batch_logits(
    name: str,
    users: torch.Tensor,
    items: torch.Tensor,
    temperature: float = 0.1,
    log_q: torch.Tensor | None = None,
) -> torch.Tensor:
    """(b, b) logits of the in-batch softmax losses: row a scores user a against every
    item of the batch, s(u_a, q_b) / temperature with s the cosine (``infonce-cos``) or
    the dot product (``infonce-dot``).

    ``log_q`` (b,), the log sampling probability of each in-batch item, applies the logQ
    correction of Yi et al. 2019 ("Sampling-bias-corrected neural modeling for large
    corpus item recommendations", RecSys 2019): log_q[b] is subtracted from column b, after
    the temperature, so a popular item, often an in-batch negative, is not pushed down
    more than its share of the data warrants.
    """
    if name == "infonce-cos":
        logits = F.normalize(users, dim=1) @ F.normalize(items, dim=1).t() / temperature
    elif name == "infonce-dot":
        logits = users @ items.t() / temperature
    else:
        raise TrainingError(f"{name!r} is not an in-batch softmax loss (infonce-cos, infonce-dot)")
    if log_q is not None:
        logits = logits - log_q.to(logits.dtype)[None, :]
    return logits


def two_tower_loss(
    name: str,
    users: torch.Tensor,
    items: torch.Tensor,
    temperature: float = 0.1,
    log_q: torch.Tensor | None = None,
) -> torch.Tensor:
    """Scalar loss of a batch of matched (user, item) embeddings, both (b, dim).

    * ``infonce-cos``: in-batch softmax cross-entropy over cos(u_a, q_b) / temperature,
      the matched item being the target.
    * ``infonce-dot``: the same over u_a . q_b / temperature.
    * ``cosine``: pointwise cosine embedding loss: 1 - cos(u_a, q_a) for each matched
      pair, plus max(0, cos(u_a, q_{a-1})) for one in-batch negative per user (the
      previous item in the batch, the first user's the last), so it needs no random
      state. It has no softmax, so ``temperature`` does not apply.

    ``log_q``: the logQ correction of the softmax losses (:func:`in_batch_logits`).
    """
    if name == "cosine":
        if log_q is not None:
            raise TrainingError("the logQ correction applies to the in-batch softmax losses, not 'cosine'")
        b = users.shape[0]
        negatives = items.roll(1, dims=0)
        target = torch.cat([users.new_ones(b), -users.new_ones(b)])
        return F.cosine_embedding_loss(
            torch.cat([users, users]), torch.cat([items, negatives]), target, margin=0.0
        )
    if name not in LOSSES:
        raise TrainingError(f"unknown loss {name!r}; choose one of {', '.join(LOSSES)}")
    logits = in_batch_logits(name, users, items, temperature, log_q)
    labels = torch.arange(users.shape[0], device=users.device)
    return F.cross_entropy(logits, labels)
