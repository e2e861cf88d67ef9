"""The live model of popaudit checkpoints and its built-in plugin."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch

from auditor.config import LoadOptions
from auditor.errors import ModelLoadError
from auditor.model import LiveModel, ModelBundle
from auditor.plugins import BUILTIN_PLUGINS, call_hook, get_plugin_manager
from auditor.train.data import synthetic_interactions
from auditor.train.live import PopauditLiveModel, load_live_model
from auditor.train.loop import TrainConfig, save_checkpoint, train


@pytest.fixture(scope="module")
def data():  # type: ignore[no-untyped-def]
    return synthetic_interactions(120, 150, 3000, 1.0, seed=1)


@pytest.mark.parametrize(
    ("item", "user"),
    [
        ("embedding", "embedding"),
        ("onehot-linear", "mlp"),
        ("dense-linear", "transformer"),
        ("embedding-linear", "embedding"),
        ("mlp", "embedding"),
    ],
)
def test_rebuilt_towers_reproduce_the_saved_embeddings(data, tmp_path: Path, item: str, user: str) -> None:  # type: ignore[no-untyped-def]
    result = train(data, TrainConfig(item_encoder=item, user_encoder=user, epochs=1, batch_size=256, lr=1.0, history_length=5))
    path = save_checkpoint(result, tmp_path / "m.pt")
    live = load_live_model(path)
    assert isinstance(live, LiveModel)
    ck = torch.load(path, weights_only=True)
    with torch.no_grad():
        q = live.encode_items(live.module, torch.arange(150))
        u = live.encode_users(live.module, torch.arange(120))
    assert torch.allclose(q, ck["item_embeddings"], atol=1e-6)
    assert torch.allclose(u, ck["user_embeddings"], atol=1e-5)
    assert [p.shape for p in live.item_parameters(live.module)] == [p.shape for p in result.model.item_parameters()]
    assert live.loss_name == "infonce-cos"


def test_probe_step_continues_training_exactly(data, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # a momentum run: the live optimizer carries the saved buffers, so one step on a copy
    # equals the step the trained optimizer itself would take next
    result = train(data, TrainConfig(optimizer="momentum", lr=1.0, epochs=2, batch_size=256))
    live = load_live_model(save_checkpoint(result, tmp_path / "m.pt"))
    users, items = torch.from_numpy(data.users[:64]), torch.from_numpy(data.items[:64])

    module = copy.deepcopy(live.module)
    opt = live.make_optimizer(module)
    assert isinstance(opt, torch.optim.SGD) and opt.defaults["momentum"] == 0.9
    loss = live.loss(live.encode_users(module, users), live.encode_items(module, items))
    opt.zero_grad()
    loss.backward()
    opt.step()

    ref = result.model
    ref_loss = live.loss(ref.encode_users(users), ref.encode_items(items))
    result.item_optimizer.zero_grad()
    ref_loss.backward()
    result.item_optimizer.step()
    assert torch.equal(module.item_tower.table.weight, ref.item_tower.table.weight)
    # the live model's own module is untouched by the probe on its copy
    assert not torch.equal(live.module.item_tower.table.weight, module.item_tower.table.weight)


def test_optimizer_state_follows_a_float64_copy(data, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    result = train(data, TrainConfig(optimizer="adam", epochs=1, batch_size=256))
    live = load_live_model(save_checkpoint(result, tmp_path / "m.pt"))
    module = copy.deepcopy(live.module).double()
    opt = live.make_optimizer(module)
    assert isinstance(opt, torch.optim.Adam)
    state = opt.state[module.item_tower.table.weight]
    assert state["exp_avg"].dtype == torch.float64
    saved = result.item_optimizer.state[result.model.item_tower.table.weight]["exp_avg"]
    assert torch.allclose(state["exp_avg"], saved.double())


def test_builtin_plugin_builds_the_live_model(data, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from auditor.loading import load_model

    assert "auditor.train.plugin" in BUILTIN_PLUGINS
    result = train(data, TrainConfig(user_encoder="transformer", epochs=1, batch_size=256, history_length=3))
    path = save_checkpoint(result, tmp_path / "m.pt")
    pm = get_plugin_manager(entry_points=False)
    bundle = load_model(path, LoadOptions(), pm)
    assert bundle.format == "popaudit"
    live = call_hook(pm, "popaudit_live_model", bundle=bundle)
    assert isinstance(live, PopauditLiveModel)
    with torch.no_grad():
        q = live.encode_items(live.module, torch.arange(150)).numpy()
    assert np.allclose(q, bundle.item_table, atol=1e-6)

    other = ModelBundle(source=tmp_path / "t.npy", format="npy", item_table=np.zeros((3, 2), np.float32))
    assert call_hook(pm, "popaudit_live_model", bundle=other) is None


@pytest.mark.parametrize(
    ("item", "user", "reread"),
    [("embedding", "embedding", False), ("dense-linear", "embedding", True), ("embedding", "transformer", True)],
)
def test_the_plugin_reads_the_file_again_only_for_features_or_histories(  # type: ignore[no-untyped-def]
    data, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, item: str, user: str, reread: bool
) -> None:
    """The live model the plugin builds from the restricted reader's bundle equals the one
    ``torch.load`` builds (parameters and optimizer state); ``torch.load`` runs only when
    a tower needs the item features or user histories the bundle does not carry."""
    import auditor.train.live as live_module
    from auditor.loading import load_model

    config = TrainConfig(optimizer="momentum", item_encoder=item, user_encoder=user, epochs=1, batch_size=256,
                         history_length=3)
    path = save_checkpoint(train(data, config), tmp_path / "m.pt")
    bundle = load_model(path, LoadOptions(), get_plugin_manager(entry_points=False))
    reads: list[Path] = []
    real = live_module.read_checkpoint
    monkeypatch.setattr(live_module, "read_checkpoint", lambda p: reads.append(p) or real(p))
    live = PopauditLiveModel.from_bundle(bundle)
    assert bool(reads) is reread
    want = load_live_model(path)
    got_params, want_params = live.module.state_dict(), want.module.state_dict()
    assert list(got_params) == list(want_params)
    assert all(torch.equal(got_params[k], want_params[k]) for k in got_params)
    got_state = live.make_optimizer(live.module).state_dict()["state"]
    want_state = want.make_optimizer(want.module).state_dict()["state"]
    assert got_state.keys() == want_state.keys() and got_state
    assert all(torch.equal(got_state[k]["momentum_buffer"], want_state[k]["momentum_buffer"]) for k in got_state)


def test_not_a_popaudit_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "plain.pt"
    torch.save({"state_dict": {"w": torch.zeros(2)}}, path)
    with pytest.raises(ModelLoadError, match="not a popaudit checkpoint"):
        load_live_model(path)
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"nope")
    with pytest.raises(ModelLoadError, match="cannot read"):
        load_live_model(bad)
