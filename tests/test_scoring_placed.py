"""Loaders 2 (QA N2, N3): a TorchScript forward() counts as cosine scoring only where the
normalised lookups go straight into the score (their mul-sum, or cosine_similarity); a
projection or layer applied after the normalisation makes the tables stand in, said. A
user-side normalisation alone never makes cosine: it ranks as dot, and beside an item bias
as u·i/|u| + b_i, as the ONNX reader reads the same module.

Known answers: ARP@5 (training items excluded) of numpy's ranking of the scores the model
itself computes (run here with torch, never by popaudit).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from scoring_samples import DIM, N_ITEMS, N_USERS, arp_at_5, audit_at_5, zipf_log



class _Tower(nn.Module):
    def __init__(self, bias: bool = False) -> None:
        super().__init__()
        rng = np.random.default_rng(1)
        users = (rng.normal(size=(N_USERS, DIM)) * rng.uniform(0.2, 5, size=(N_USERS, 1))).astype(np.float32)
        items = (rng.normal(size=(N_ITEMS, DIM)) * rng.uniform(0.2, 5, size=(N_ITEMS, 1))).astype(np.float32)
        self.user_embedding = nn.Embedding.from_pretrained(torch.from_numpy(users), freeze=False)
        self.item_embedding = nn.Embedding.from_pretrained(torch.from_numpy(items), freeze=False)
        if bias:
            values = rng.normal(scale=0.5, size=(N_ITEMS, 1)).astype(np.float32)
            self.item_bias = nn.Embedding.from_pretrained(torch.from_numpy(values), freeze=False)

    def own_scores(self) -> np.ndarray:
        """The model's own score of every (user, item), computed by its forward()."""
        with torch.no_grad():
            users = torch.arange(N_USERS).repeat_interleave(N_ITEMS)
            return self(users, torch.arange(N_ITEMS).repeat(N_USERS)).numpy().reshape(N_USERS, N_ITEMS)


class _NormThenProj(_Tower):
    """The QA's V2b: both lookups normalised, then the item side projected before the dot."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(DIM, DIM, bias=False)
        with torch.no_grad():
            self.proj.weight.copy_(torch.eye(DIM) + 8 * torch.ones(DIM, DIM) / DIM)

    def forward(self, user_ids: torch.Tensor, item_ids: torch.Tensor) -> torch.Tensor:
        u = F.normalize(self.user_embedding(user_ids), dim=-1)
        i = F.normalize(self.item_embedding(item_ids), dim=-1)
        return (u * self.proj(i)).sum(-1)


class _UserOnly(_Tower):
    def forward(self, user_ids: torch.Tensor, item_ids: torch.Tensor) -> torch.Tensor:
        return (F.normalize(self.user_embedding(user_ids), dim=-1) * self.item_embedding(item_ids)).sum(-1)


class _UserOnlyBias(_Tower):
    def __init__(self) -> None:
        super().__init__(bias=True)

    def forward(self, user_ids: torch.Tensor, item_ids: torch.Tensor) -> torch.Tensor:
        u = F.normalize(self.user_embedding(user_ids), dim=-1)
        return (u * self.item_embedding(item_ids)).sum(-1) + self.item_bias(item_ids).squeeze(-1)


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_a_projection_after_the_normalisation_is_no_cosine(tmp_path: Path) -> None:
    """Was: 'scores by cosine', rec 'Keep serving by cosine'. The model's own lists are
    n(u)·W·n(i), not the cosine of the stored rows: the tables stand in, said first."""
    model = _NormThenProj()
    path = tmp_path / "ntp.pt"
    torch.jit.script(model).save(str(path))
    log = zipf_log(tmp_path)
    own = model.own_scores()
    users, items = (t.detach().numpy() for t in (model.user_embedding.weight, model.item_embedding.weight))
    assert np.allclose(own, _unit(users) @ (_unit(items) @ model.proj.weight.detach().numpy().T).T, atol=1e-5)
    assert arp_at_5(own, log) != pytest.approx(arp_at_5(_unit(users) @ _unit(items).T, log))  # cosine is not its score
    result = audit_at_5(path, log)
    served = result.served_vectors
    assert served is not None and not served.as_served and served.scoring == "dot", served
    assert result.warnings[0].startswith("the stored tables stand in for the vectors the model in ntp.pt scores"), \
        result.warnings
    assert not any("scores by cosine: its own lists" in w for w in result.warnings), result.warnings
    assert not result.verdict.recommendations[0].startswith("Keep serving by cosine")
    assert result.retrieval is not None
    assert result.retrieval.at[5].dot["arp"] == pytest.approx(arp_at_5(users @ items.T, log), rel=1e-9)


def test_a_user_only_normalisation_ranks_as_dot(tmp_path: Path) -> None:
    """Was: the tables stood in, warned 'it may score by cosine'. u·i/|u| ranks as u·i for
    each user: the plain dot audit, with no doubt."""
    model = _UserOnly()
    path = tmp_path / "uo.pt"
    torch.jit.script(model).save(str(path))
    log = zipf_log(tmp_path)
    mine = arp_at_5(model.own_scores(), log)
    result = audit_at_5(path, log)
    assert not any("may score by cosine" in w or "stand in" in w for w in result.warnings), result.warnings
    assert result.retrieval is not None
    assert result.retrieval.at[5].dot["arp"] == pytest.approx(mine, rel=1e-9)


def test_a_user_only_normalisation_beside_an_item_bias_is_served(tmp_path: Path) -> None:
    """Was: the tables stood in (bias left out). Served as the model scores, u·i/|u| + b_i."""
    model = _UserOnlyBias()
    path = tmp_path / "uob.pt"
    torch.jit.script(model).save(str(path))
    log = zipf_log(tmp_path)
    mine = arp_at_5(model.own_scores(), log)
    users, items = (t.detach().numpy() for t in (model.user_embedding.weight, model.item_embedding.weight))
    assert mine != pytest.approx(arp_at_5(users @ items.T, log))
    result = audit_at_5(path, log)
    served = result.served_vectors
    assert served is not None and served.as_served and served.source == "bias", served
    assert served.description.endswith("the model's own scores, u·i/|u| + b_i"), served.description
    assert result.retrieval is not None
    assert result.retrieval.at[5].dot["arp"] == pytest.approx(mine, rel=1e-9)


class _NormThenProjBias(_NormThenProj):
    def __init__(self) -> None:
        super().__init__()
        values = np.random.default_rng(2).normal(scale=0.5, size=(N_ITEMS, 1)).astype(np.float32)
        self.item_bias = nn.Embedding.from_pretrained(torch.from_numpy(values), freeze=False)

    def forward(self, user_ids: torch.Tensor, item_ids: torch.Tensor) -> torch.Tensor:
        u = F.normalize(self.user_embedding(user_ids), dim=-1)
        i = F.normalize(self.item_embedding(item_ids), dim=-1)
        return (u * self.proj(i)).sum(-1) + self.item_bias(item_ids).squeeze(-1)


def test_a_bias_beside_a_score_it_cannot_place_is_kept_standing_in(tmp_path: Path) -> None:
    """Loaders 2 N1 said the bias was left out of bare tables' figures; Loaders 3 N2 keeps it:
    the bias enters the score whatever the rest is, so u·i + b_i stands in (not as served),
    said first, and the figures are u·i + b_i."""
    model = _NormThenProjBias()
    path = tmp_path / "ntpb.pt"
    torch.jit.script(model).save(str(path))
    log = zipf_log(tmp_path)
    users, items = (t.detach().numpy() for t in (model.user_embedding.weight, model.item_embedding.weight))
    bias = model.item_bias.weight.detach().numpy().reshape(-1)
    with_bias = arp_at_5(users @ items.T + bias, log)
    assert with_bias != pytest.approx(arp_at_5(users @ items.T, log))
    result = audit_at_5(path, log)
    served = result.served_vectors
    assert served is not None and not served.as_served and served.source == "bias", served
    assert result.warnings[0].startswith("u·i + b_i (the stored tables with the item bias) stands in"), result.warnings
    assert not any("retrieval serves as the model scores" in w or "left out" in w for w in result.warnings)
    assert any("item bias term" in w and "the figures are of u·i + b_i standing in" in w for w in result.warnings)
    assert result.retrieval is not None
    assert result.retrieval.at[5].dot["arp"] == pytest.approx(with_bias, rel=1e-9)
