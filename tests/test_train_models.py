"""Encoders, losses and optimizers of the training baselines."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from auditor.errors import TrainingError
from auditor.train import ITEM_ENCODERS, USER_ENCODERS
from auditor.train.losses import two_tower_loss
from auditor.train.models import ModelSpec, OneHotLinear, build_model
from auditor.train.optim import effective_momentum, make_optimizer

N_USERS, N_ITEMS, DIM = 7, 11, 4


def _model(item: str = "embedding", user: str = "embedding") -> torch.nn.Module:
    torch.manual_seed(0)
    spec = ModelSpec(N_USERS, N_ITEMS, DIM, item, user, init_std=0.1, hidden_dim=8, n_features=5, history_length=3)
    features = torch.randn(N_ITEMS, 5)
    histories = torch.full((N_USERS, 3), N_ITEMS, dtype=torch.int64)
    histories[0] = torch.tensor([1, 2, 3])
    histories[1, 2] = 4  # user 1 has one item; users 2.. have none
    return build_model(spec, item_features=features, user_histories=histories)


@pytest.mark.parametrize("item", ITEM_ENCODERS)
@pytest.mark.parametrize("user", USER_ENCODERS)
def test_every_encoder_maps_rows_to_dim(item: str, user: str) -> None:
    model = _model(item, user)
    q = model.encode_items(torch.tensor([0, 3, 3, 10]))
    u = model.encode_users(torch.arange(N_USERS))
    assert q.shape == (4, DIM) and u.shape == (N_USERS, DIM)
    assert torch.isfinite(u).all()  # empty histories are well defined (the [CLS] token)
    assert torch.equal(q[1], q[2])


def test_onehot_linear_equals_a_linear_layer_over_one_hot_ids() -> None:
    torch.manual_seed(1)
    enc = OneHotLinear(N_ITEMS, DIM, 0.1)
    assert enc.linear.weight.shape == (DIM, N_ITEMS)
    rows = torch.tensor([2, 5, 2, 9])
    ref = F.one_hot(rows, N_ITEMS).float() @ enc.linear.weight.t()
    out = enc(rows)
    assert torch.allclose(out, ref)
    g = torch.randn_like(out)
    (grad,) = torch.autograd.grad((out * g).sum(), enc.linear.weight)
    (ref_grad,) = torch.autograd.grad((ref * g).sum(), enc.linear.weight)
    assert torch.allclose(grad, ref_grad)
    # non-shared (C3): only the columns of the rows in the batch get a gradient
    assert set(torch.nonzero(grad.abs().sum(0)).flatten().tolist()) == {2, 5, 9}


def test_dense_linear_is_a_linear_map_of_the_features() -> None:
    model = _model("dense-linear")
    tower = model.item_tower
    rows = torch.tensor([0, 4])
    assert torch.allclose(model.encode_items(rows), tower.features[rows] @ tower.linear.weight.t())
    assert "item_tower.features" not in model.state_dict()  # stored apart in the checkpoint


def test_init_std_sets_the_scale_of_the_id_tables() -> None:
    torch.manual_seed(0)
    model = build_model(ModelSpec(10, 4000, 16, init_std=0.3))
    assert model.item_tower.table.weight.std().item() == pytest.approx(0.3, rel=0.03)


def test_spec_rejects_unknown_names() -> None:
    with pytest.raises(TrainingError, match="item encoder"):
        ModelSpec(2, 2, item_encoder="gnn")
    with pytest.raises(TrainingError, match="user encoder"):
        ModelSpec(2, 2, user_encoder="rnn")


def test_infonce_cos_matches_a_hand_computation() -> None:
    u = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    q = torch.tensor([[3.0, 0.0], [1.0, 1.0]])
    # cosines: u0.q0 = 1, u0.q1 = 1/sqrt2, u1.q0 = 0, u1.q1 = 1/sqrt2; temperature 0.5
    c = 1 / 2**0.5
    l0 = -torch.log(torch.exp(torch.tensor(2.0)) / (torch.exp(torch.tensor(2.0)) + torch.exp(torch.tensor(2 * c))))
    l1 = -torch.log(torch.exp(torch.tensor(2 * c)) / (1 + torch.exp(torch.tensor(2 * c))))
    assert two_tower_loss("infonce-cos", u, q, 0.5).item() == pytest.approx(((l0 + l1) / 2).item(), rel=1e-6)
    # infonce-dot: logits u.q / t = [[6, 2], [0, 4]]
    dot = F.cross_entropy(torch.tensor([[6.0, 2.0], [0.0, 4.0]]), torch.tensor([0, 1]))
    assert two_tower_loss("infonce-dot", u, q, 0.5).item() == pytest.approx(dot.item(), rel=1e-6)


def test_pointwise_cosine_loss_known_values() -> None:
    eye = torch.eye(2)
    assert two_tower_loss("cosine", eye, eye).item() == pytest.approx(0.0, abs=1e-7)
    same = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    # positives: 1 - 1 = 0; negatives (the other item, identical): max(0, 1) = 1 each
    assert two_tower_loss("cosine", same, same).item() == pytest.approx(0.5)


@pytest.mark.parametrize("name", ["infonce-cos", "cosine"])
def test_cosine_losses_give_gradients_orthogonal_to_q(name: str) -> None:
    # C4: the loss depends on q only through q/||q||, so q_i . dL/dq_i = 0 for every row
    torch.manual_seed(0)
    u = torch.randn(16, 8, dtype=torch.float64)
    q = torch.randn(16, 8, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(two_tower_loss(name, u, q, 0.1), q)
    assert (q * g).sum(1).abs().max().item() < 1e-12
    assert g.abs().max().item() > 1e-3
    scaled = two_tower_loss(name, u, 3 * q.detach(), 0.1)
    assert scaled.item() == pytest.approx(two_tower_loss(name, u, q.detach(), 0.1).item())


def test_dot_loss_gradient_is_not_orthogonal() -> None:
    torch.manual_seed(0)
    u = torch.randn(16, 8, dtype=torch.float64)
    q = torch.randn(16, 8, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(two_tower_loss("infonce-dot", u, q, 1.0), q)
    assert (q * g).sum(1).abs().max().item() > 1e-2


def test_unknown_loss_raises() -> None:
    with pytest.raises(TrainingError, match="unknown loss"):
        two_tower_loss("bpr", torch.zeros(2, 2), torch.zeros(2, 2))


def test_optimizers_by_name() -> None:
    p = [torch.nn.Parameter(torch.zeros(3))]
    sgd = make_optimizer("sgd", p, lr=0.5, weight_decay=0.1)
    assert isinstance(sgd, torch.optim.SGD) and sgd.defaults["momentum"] == 0
    assert sgd.defaults["weight_decay"] == 0.1
    mom = make_optimizer("momentum", p, lr=0.5, momentum=0.8)
    assert isinstance(mom, torch.optim.SGD) and mom.defaults["momentum"] == 0.8
    assert isinstance(make_optimizer("adam", p, lr=1e-3), torch.optim.Adam)
    assert isinstance(make_optimizer("adamw", p, lr=1e-3), torch.optim.AdamW)
    with pytest.raises(TrainingError):
        make_optimizer("lion", p, lr=1.0)
    with pytest.raises(TrainingError):
        make_optimizer("sgd", p, lr=0.0)
    with pytest.raises(TrainingError):
        make_optimizer("momentum", p, lr=1.0, momentum=1.0)
    assert effective_momentum("sgd", 0.9) == 0.0 and effective_momentum("momentum", 0.9) == 0.9
