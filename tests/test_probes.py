"""Numeric probes: update angles, Pythagorean residual, growth, C2/C3/C4 numerics.

Known answers: an embedding table + SGD + cosine InfoNCE step moves every item at 90°
and grows s by exactly ‖Δq‖²; momentum, weight decay and Adam give angles we compute
by hand from the gradient; a linear layer over features x has J_iJ_jᵀ = (x_iᵀx_j) I.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from auditor.model import InteractionPairs, ModelBundle
from auditor.probes import (
    ProbeBatch,
    cross_jacobian,
    gradient_alignment,
    item_tower_layers,
    run_probes,
    sample_batches,
    second_difference,
    summarise_angles,
    update_step,
    working_copy,
)
from live_towers import TinyLive, Towers, train_state

N_ITEMS, N_USERS, DIM = 40, 30, 8


def _bundle(live: TinyLive, **kw: object) -> ModelBundle:
    table = live.encode_items(live.module, torch.arange(N_ITEMS)).detach().numpy()
    return ModelBundle(source=Path("m.pt"), format="popaudit", item_table=table, live=live,
                       user_table=live.module.user_emb.weight.detach().numpy(), **kw)


def _batch(seed: int = 1, size: int = 12) -> ProbeBatch:
    rng = np.random.default_rng(seed)
    items = rng.choice(N_ITEMS, size=size, replace=False)
    items[-1] = items[0]  # one duplicate: its update is the sum of two copies' gradients
    return ProbeBatch(rng.integers(0, N_USERS, size=size), items.astype(np.int64), "test")


def _grad_wrt_items(live: TinyLive, batch: ProbeBatch) -> tuple[np.ndarray, np.ndarray]:
    """(unique item rows, ∇ of the batch loss w.r.t. each row's embedding) by autograd."""
    table = live.module.item_emb.weight.detach().clone().requires_grad_(True)
    users = live.module.user_emb.weight.detach()[torch.as_tensor(batch.users)]
    loss = live.loss(users, table[torch.as_tensor(batch.items)])
    (g,) = torch.autograd.grad(loss, table)
    rows = np.unique(batch.items)
    return rows, g.numpy()[rows]


def _angle(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    cos = np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return np.degrees(np.arccos(np.clip(cos, -1, 1)))


def test_embedding_sgd_cosine_step_is_exactly_orthogonal() -> None:
    live = TinyLive(Towers(N_ITEMS, N_USERS, DIM), lr=0.5)
    batch = _batch()
    module, dtype = working_copy(live)
    assert dtype == torch.float64
    probe = update_step(live, module, [batch], extra_rows=np.arange(N_ITEMS), fallback_lr=None)
    # Only the items in the batch move (11 distinct), each at 90° to float64 precision.
    assert probe.angles.size == len(np.unique(batch.items)) == 11
    assert np.max(np.abs(probe.angles - 90.0)) < 1e-6
    assert np.max(np.abs(probe.residuals)) < 1e-9
    # s grows by exactly ‖Δq‖²: the measured change of s equals c/s².
    np.testing.assert_allclose(probe.relative_change, probe.growth, rtol=1e-9)
    # Δq = −η∇_qL (duplicates summed), so c/s² = η²‖g‖²/‖q‖², checked by hand.
    rows, grad = _grad_wrt_items(live, batch)
    q = live.module.item_emb.weight.detach().numpy()[rows]
    expected = 0.5**2 * np.sum(grad**2, axis=1) / np.sum(q**2, axis=1)
    np.testing.assert_allclose(np.sort(probe.growth), np.sort(expected), rtol=1e-9)
    # Per appearance: the duplicated item's growth is split over its two copies.
    copies = np.array([np.sum(batch.items == r) for r in rows])
    np.testing.assert_allclose(np.sort(probe.growth_per_appearance), np.sort(expected / copies), rtol=1e-9)
    assert probe.optimizer == "SGD" and probe.optimizer_restored and probe.lr == 0.5
    # The user's module is untouched.
    assert module is not live.module
    assert torch.equal(live.module.item_emb.weight, Towers(N_ITEMS, N_USERS, DIM).item_emb.weight)


def test_weight_decay_angles_match_hand_computation() -> None:
    lam, lr = 0.3, 0.5
    live = TinyLive(Towers(N_ITEMS, N_USERS, DIM), lr=lr, weight_decay=lam)
    batch = _batch()
    module, _ = working_copy(live)
    probe = update_step(live, module, [batch], extra_rows=np.arange(N_ITEMS), fallback_lr=None)
    # Every row decays, so all items move: batch rows along −η(g + λq), others along −ηλq (180°).
    assert probe.angles.size == N_ITEMS
    table = live.module.item_emb.weight.detach().numpy()
    rows, grad = _grad_wrt_items(live, batch)
    dq = -lr * (grad + lam * table[rows])
    expected = _angle(table[rows], dq)
    got = np.sort(probe.angles)
    want = np.sort(np.concatenate([expected, np.full(N_ITEMS - len(rows), 180.0)]))
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert np.all(probe.angles > 90.0)


def test_loaded_momentum_buffer_moves_angles_off_90() -> None:
    mu, lr = 0.9, 0.5
    live = TinyLive(Towers(N_ITEMS, N_USERS, DIM), lr=lr, momentum=mu)
    history = _batch(seed=7, size=20)
    live.optimizer_state = train_state(live, torch.as_tensor(history.users), torch.as_tensor(history.items))
    batch = _batch()
    saved = copy.deepcopy(live.optimizer_state)
    module, _ = working_copy(live)
    probe = update_step(live, module, [batch], extra_rows=np.arange(N_ITEMS), fallback_lr=None)
    index = [n for n, _ in live.module.named_parameters()].index("item_emb.weight")
    buf = live.optimizer_state["state"][index]["momentum_buffer"].numpy()
    # The probe stepped its own copy of the optimizer state, not the live model's.
    assert torch.equal(saved["state"][index]["momentum_buffer"], live.optimizer_state["state"][index]["momentum_buffer"])
    table = live.module.item_emb.weight.detach().numpy()
    rows, grad = _grad_wrt_items(live, batch)
    full = np.zeros_like(table)
    full[rows] = grad
    dq = -lr * (mu * buf + full)  # torch SGD: b ← μb + g, θ ← θ − ηb
    moved = np.linalg.norm(dq, axis=1) > 0
    want = np.sort(_angle(table[moved], dq[moved]))
    np.testing.assert_allclose(np.sort(probe.angles), want, atol=1e-6)
    assert probe.angles.size == int(moved.sum()) > len(rows)  # old buffers move items outside the batch
    assert np.max(np.abs(probe.angles - 90.0)) > 1.0


def test_adam_moves_angles_off_90() -> None:
    live = TinyLive(Towers(N_ITEMS, N_USERS, DIM), optimizer="adam", lr=0.05)
    history = _batch(seed=3, size=20)
    live.optimizer_state = train_state(live, torch.as_tensor(history.users), torch.as_tensor(history.items))
    module, _ = working_copy(live)
    probe = update_step(live, module, [_batch()], extra_rows=np.arange(N_ITEMS), fallback_lr=None)
    summary = summarise_angles(probe.angles)
    assert probe.optimizer == "Adam"
    assert summary.share_90pm1 < 0.5
    assert summary.max_abs_deviation_from_90 > 10.0
    assert np.max(np.abs(probe.residuals)) > 1e-3


def test_fallback_sgd_when_the_optimizer_cannot_be_rebuilt() -> None:
    live = TinyLive(Towers(N_ITEMS, N_USERS, DIM), rebuild_optimizer=False)
    module, _ = working_copy(live)
    probe = update_step(live, module, [_batch()], extra_rows=np.arange(N_ITEMS), fallback_lr=0.25)
    assert not probe.optimizer_restored and probe.lr == 0.25
    assert probe.optimizer.startswith("SGD (fallback")
    assert np.max(np.abs(probe.angles - 90.0)) < 1e-6


def test_summarise_angles_histogram_and_shares() -> None:
    angles = np.array([90.0, 90.5, 89.2, 95.0, 120.0, 10.0])
    out = summarise_angles(angles)
    assert out.n == 6
    assert out.median == pytest.approx(90.25)
    assert out.share_90pm1 == pytest.approx(3 / 6)
    assert out.share_90pm10 == pytest.approx(4 / 6)
    edges, counts = out.edges, out.counts
    assert edges[0] == 0.0 and edges[-1] == 180.0 and len(edges) == 46
    assert sum(counts) == 6
    assert counts[22] == 3  # [88°, 92°) holds 89.2, 90, 90.5
    assert summarise_angles(np.zeros(0)).median is None


def test_second_difference_linear_vs_curved() -> None:
    rows = torch.arange(10)
    gen = torch.Generator().manual_seed(0)
    for encoder in ("embedding", "dense-linear"):
        live = TinyLive(Towers(N_ITEMS, N_USERS, DIM, encoder))
        out = second_difference(live, live.module, rows, generator=gen)
        assert out.linear and max(out.relative) < 1e-13
    # A shared linear layer over an embedding is bilinear: the second difference is
    # exactly 2ε²·V·u, so it scales with ε² (ratio 100 per decade of ε).
    live = TinyLive(Towers(N_ITEMS, N_USERS, DIM, "embedding-linear"))
    out = second_difference(live, live.module, rows, generator=gen)
    rel = out.relative
    assert not out.linear
    assert rel[0] / rel[1] == pytest.approx(100.0, rel=1e-9)
    assert rel[1] / rel[2] == pytest.approx(100.0, rel=1e-6)
    live = TinyLive(Towers(N_ITEMS, N_USERS, DIM, "mlp"))
    assert not second_difference(live, live.module, rows, generator=gen).linear


def test_cross_jacobian_embedding_is_zero_and_dense_linear_is_feature_cosine() -> None:
    rows = torch.tensor([0, 3, 5, 11, 17])
    live = TinyLive(Towers(N_ITEMS, N_USERS, DIM))
    out = cross_jacobian(live, live.module, rows)
    assert out.max_offdiag_relative == 0.0 and out.max_isotropy_deviation == 0.0
    assert out.shared is False and out.isotropic is True and out.n_pairs == 10
    # Linear over features x: J_iJ_jᵀ = (x_iᵀx_j) I, so the normalised block norm is |cos(x_i, x_j)|.
    live = TinyLive(Towers(N_ITEMS, N_USERS, DIM, "dense-linear"))
    out = cross_jacobian(live, live.module, rows)
    x = live.module.features[rows].numpy()
    cos = (x @ x.T) / np.outer(np.linalg.norm(x, axis=1), np.linalg.norm(x, axis=1))
    off = cos[~np.eye(len(rows), dtype=bool)]
    assert out.max_offdiag_relative == pytest.approx(off.max(), rel=1e-12)
    assert out.median_offdiag_relative == pytest.approx(np.median(off), rel=1e-12)
    assert out.max_isotropy_deviation < 1e-12  # J_iJ_iᵀ = ‖x_i‖² I
    assert out.shared is True
    live = TinyLive(Towers(N_ITEMS, N_USERS, DIM, "mlp"))
    out = cross_jacobian(live, live.module, rows)
    assert out.shared is True and out.isotropic is False


def test_gradient_alignment_cosine_vs_dot() -> None:
    batch = _batch()
    cos = gradient_alignment(TinyLive(Towers(N_ITEMS, N_USERS, DIM)), Towers(N_ITEMS, N_USERS, DIM), batch)
    assert cos.orthogonal is True and cos.max < 1e-12 and cos.n == 12
    live = TinyLive(Towers(N_ITEMS, N_USERS, DIM), loss_name="infonce-dot")
    dot = gradient_alignment(live, live.module, batch)
    assert dot.orthogonal is False
    # Hand check of one slot: g_j = (softmax column j − e_j)ᵀ users, by the InfoNCE formula.
    u = live.module.user_emb.weight.detach()[torch.as_tensor(batch.users)]
    q = live.module.item_emb.weight.detach()[torch.as_tensor(batch.items)]
    p = F.softmax(u @ q.T, dim=1)
    g = ((p - torch.eye(len(u), dtype=u.dtype)).T @ u) / len(u)
    align = (q * g).sum(1).abs() / (q.norm(dim=1) * g.norm(dim=1))
    assert dot.max == pytest.approx(float(align.max()), rel=1e-10)


def test_item_tower_layers() -> None:
    assert item_tower_layers(*_live_and_module("embedding")).kind == "embedding"
    assert item_tower_layers(*_live_and_module("dense-linear")).kind == "linear"
    mlp = item_tower_layers(*_live_and_module("mlp"))
    assert mlp.kind == "nonlinear" and "Tanh" in mlp.layers
    assert item_tower_layers(*_live_and_module("embedding-linear")).kind == "composed"


def _live_and_module(encoder: str) -> tuple[TinyLive, torch.nn.Module]:
    live = TinyLive(Towers(N_ITEMS, N_USERS, DIM, encoder))
    return live, live.module


def test_batches_from_the_log_map_user_ids() -> None:
    live = TinyLive(Towers(N_ITEMS, N_USERS, DIM))
    # Raw user ids 100.., model rows in reverse order of the raw ids.
    bundle = _bundle(live, user_ids=np.arange(100 + N_USERS)[::-1][:N_USERS].copy())
    pairs = InteractionPairs(
        user_index=np.array([0, 1, 2, 0]), item_rows=np.array([5, 6, 7, 8]),
        user_ids=np.array([129, 128, 999]),  # 999 is not a model user: dropped
    )
    (batch,) = sample_batches(bundle, pairs, live, size=10, steps=1, rng=np.random.default_rng(0))
    got = sorted(zip(batch.users.tolist(), batch.items.tolist()))
    assert got == [(0, 5), (0, 8), (1, 6)]
    assert "mapped" in batch.source
    # Without a log: sampled pairs, reproducible under the seed.
    a = sample_batches(bundle, None, live, size=8, steps=2, rng=np.random.default_rng(4))
    b = sample_batches(bundle, None, live, size=8, steps=2, rng=np.random.default_rng(4))
    assert len(a) == 2 and all(np.array_equal(x.items, y.items) for x, y in zip(a, b))


def test_run_probes_is_seeded_and_leaves_the_model_alone() -> None:
    live = TinyLive(Towers(N_ITEMS, N_USERS, DIM))
    before = copy.deepcopy(live.module.state_dict())
    bundle = _bundle(live)
    one = run_probes(live, bundle, None, seed=5, batch_size=16).to_dict()
    two = run_probes(live, bundle, None, seed=5, batch_size=16).to_dict()
    assert one == two
    assert all(torch.equal(before[k], v) for k, v in live.module.state_dict().items())
    assert one["dtype"] == "float64" and "errors" not in one
    ua = one["update_angles"]
    assert set(ua) >= {"n", "median", "share_90pm1", "share_90pm10", "histogram"}
    assert ua["share_90pm1"] == 1.0 and ua["median"] == pytest.approx(90.0, abs=1e-6)
    assert one["c3_cross_jacobian"]["max_offdiag_relative"] == 0.0
    import json

    json.dumps(one)  # JSON-serialisable as it stands


def test_torchscript_module_is_copied_and_probed() -> None:
    from live_towers import ScriptableTowers, ScriptLive

    scripted = torch.jit.script(ScriptableTowers(N_ITEMS, N_USERS, DIM))
    live = ScriptLive(scripted, lr=0.5)  # type: ignore[arg-type]
    before = {k: v.clone() for k, v in scripted.state_dict().items()}
    table = scripted.item_emb.weight.detach().numpy()
    bundle = ModelBundle(source=Path("m.ts"), format="torchscript", item_table=table, live=live,
                         user_table=scripted.user_emb.weight.detach().numpy())
    out = run_probes(live, bundle, None, seed=0, batch_size=16).to_dict()
    assert "errors" not in out, out.get("errors")
    assert out["dtype"] == "float64" and out["item_tower"]["kind"] == "embedding"
    assert out["update_angles"]["share_90pm1"] == 1.0
    assert out["c2_second_difference"]["linear"] and out["c3_cross_jacobian"]["shared"] is False
    assert all(torch.equal(before[k], v) for k, v in scripted.state_dict().items())
    assert scripted.item_emb.weight.dtype == torch.float32  # the user's module was not cast


def test_models_that_refuse_float64_are_probed_in_float32() -> None:
    class Float32Only(TinyLive):
        def encode_items(self, module: torch.nn.Module, rows: torch.Tensor) -> torch.Tensor:
            if module.item_emb.weight.dtype != torch.float32:
                raise TypeError("this encoder only runs in float32")
            return module.items(rows)

    live = Float32Only(Towers(N_ITEMS, N_USERS, DIM).float())
    live.loss_name = "infonce-cos"
    out = run_probes(live, _bundle(live), None, seed=0, batch_size=16).to_dict()
    assert out["dtype"] == "float32" and "errors" not in out, out.get("errors")
    assert out["c2_second_difference"]["tolerance"] == 1e-4
    # float32 rounding only: still within 90° ± 0.01°.
    assert out["update_angles"]["max_abs_deviation_from_90"] < 1e-2
