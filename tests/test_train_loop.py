"""The training loop and the checkpoint it writes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from auditor.errors import TrainingError
from auditor.train import default_lr
from auditor.train import loop as loop_module
from auditor.train.data import synthetic_interactions
from auditor.train.loop import TrainConfig, build_checkpoint, save_checkpoint, spearman, train
from auditor.progress import Progress

SMALL = dict(n_users=200, n_items=300, n_interactions=6000)


@pytest.fixture(scope="module")
def data():  # type: ignore[no-untyped-def]
    return synthetic_interactions(SMALL["n_users"], SMALL["n_items"], SMALL["n_interactions"], 1.0, seed=0)


def test_training_is_deterministic_and_seeded(data) -> None:  # type: ignore[no-untyped-def]
    cfg = TrainConfig(epochs=2, batch_size=128, seed=3)
    a, b = train(data, cfg), train(data, cfg)
    for key, value in a.model.state_dict().items():
        assert torch.equal(value, b.model.state_dict()[key]), key
    assert [r["loss"] for r in a.trace] == [r["loss"] for r in b.trace]
    c = train(data, TrainConfig(epochs=2, batch_size=128, seed=4))
    assert not torch.equal(a.model.item_tower.table.weight, c.model.item_tower.table.weight)


def test_training_leaves_the_global_rng_alone(data) -> None:  # type: ignore[no-untyped-def]
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    train(data, TrainConfig(epochs=1, batch_size=128))
    assert torch.equal(torch.rand(3), expected)


def test_reference_baseline_learns_and_shows_the_bias(data) -> None:  # type: ignore[no-untyped-def]
    result = train(data, TrainConfig(epochs=4, batch_size=128))
    trace = result.trace
    assert [r["epoch"] for r in trace] == [1, 2, 3, 4]
    assert set(trace[0]) >= {"epoch", "loss", "spearman", "mean_norm", "step"} and "seconds" not in trace[0]
    assert trace[-1]["loss"] < trace[0]["loss"] < np.log(128)  # below chance (uniform softmax)
    assert trace[-1]["spearman"] >= 0.8
    assert trace[-1]["mean_norm"] > 0.1 * np.sqrt(32) * 1.5  # norms grew from their init
    norms = result.item_embeddings().norm(dim=1).numpy()
    assert trace[-1]["spearman"] == pytest.approx(spearman(data.item_frequencies, norms))


def test_progress_gets_one_bar_per_epoch_and_notes(data) -> None:  # type: ignore[no-untyped-def]
    class Recorder(Progress):
        def __init__(self) -> None:
            self.tracks: list[tuple[str, float | None]] = []
            self.advanced = 0.0
            self.notes: list[str] = []

        def track(self, description, total=None):  # type: ignore[no-untyped-def,override]
            self.tracks.append((description, total))
            return super().track(description, total)

        def note(self, message: str) -> None:
            self.notes.append(message)

    rec = Recorder()
    train(data, TrainConfig(epochs=2, batch_size=1000), progress=rec)
    assert [t[1] for t in rec.tracks] == [6, 6]
    assert rec.tracks[0][0] == "epoch 1/2" and "loss" in rec.tracks[1][0] and "ρ" in rec.tracks[1][0]
    assert len(rec.notes) == 2 and "ρ" in rec.notes[0]


def test_default_learning_rates() -> None:
    assert TrainConfig().lr == default_lr("sgd", "infonce-cos") == 10.0
    assert TrainConfig(loss="infonce-dot").lr == 1.0
    cfg = TrainConfig(optimizer="adam")
    assert cfg.lr == 0.01 and cfg.resolved_user_lr == 0.01
    mixed = TrainConfig(optimizer="sgd", lr=5.0, user_optimizer="adam")
    assert mixed.resolved_user_lr == 0.01 and mixed.resolved_user_optimizer == "adam"
    assert TrainConfig(lr=2.0, user_lr=0.5).resolved_user_lr == 0.5
    assert TrainConfig(lr=2.0).resolved_user_lr == 2.0


@pytest.mark.parametrize(
    "kwargs",
    [{"optimizer": "rmsprop"}, {"loss": "bpr"}, {"epochs": 0}, {"batch_size": 1}, {"lr": -1.0}, {"temperature": 0.0}],
)
def test_bad_settings_raise(kwargs: dict) -> None:  # type: ignore[type-arg]
    with pytest.raises(TrainingError):
        TrainConfig(**kwargs)


def test_divergence_is_reported(data) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(TrainingError, match="lower lr"):
        train(data, TrainConfig(loss="infonce-dot", lr=1e4, epochs=2, batch_size=128))


def test_checkpoint_contents_load_with_weights_only(data, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cfg = TrainConfig(optimizer="momentum", momentum=0.8, user_optimizer="adam", user_lr=0.003, epochs=2, batch_size=128)
    result = train(data, cfg)
    path = save_checkpoint(result, tmp_path / "sub" / "m.pt")
    assert sorted(p.name for p in path.parent.iterdir()) == ["m.pt"]  # no temp file left
    ck = torch.load(path, weights_only=True)
    assert ck["popaudit_checkpoint"] == 1
    c = ck["config"]
    for key, value in {
        "optimizer": "momentum", "lr": 10.0, "momentum": 0.8, "weight_decay": 0.0, "loss": "infonce-cos",
        "temperature": 0.1, "item_encoder": "embedding", "user_encoder": "embedding", "user_optimizer": "adam",
        "user_lr": 0.003, "dim": 32, "init_std": 0.1, "epochs": 2, "batch_size": 128, "seed": 0,
        "n_users": 200, "n_items": 300, "user_momentum": 0.0,
    }.items():
        assert c[key] == value, key
    assert c["data"]["kind"] == "synthetic" and c["data"]["n_interactions"] == 6000
    assert ck["item_ids"] == list(range(300)) and ck["user_ids"] == list(range(200))
    assert ck["item_frequencies"].dtype == torch.int64
    assert ck["item_frequencies"].tolist() == data.item_frequencies.tolist()
    assert ck["item_embeddings"].dtype == torch.float32 and ck["item_embeddings"].shape == (300, 32)
    assert torch.equal(ck["item_embeddings"], result.model.item_tower.table.weight.detach())
    assert torch.equal(ck["user_embeddings"], result.model.user_tower.table.weight.detach())
    assert ck["train_pairs"].dtype == torch.int64 and ck["train_pairs"].shape == (6000, 2)
    assert np.array_equal(ck["train_pairs"].numpy(), np.stack([data.users, data.items], 1))
    assert len(ck["trace"]) == 2 and ck["trace"][1]["epoch"] == 2
    # the saved optimizer states are those of the run: momentum buffers, Adam moments
    buf = ck["optimizer_state_dict"]["state"][0]["momentum_buffer"]
    assert torch.equal(buf, result.item_optimizer.state[result.model.item_tower.table.weight]["momentum_buffer"])
    assert "exp_avg" in ck["user_optimizer_state_dict"]["state"][0]
    assert "item_features" not in ck and "user_histories" not in ck


def test_checkpoint_stores_tower_inputs_and_caps_pairs(data, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    result = train(data, TrainConfig(item_encoder="dense-linear", user_encoder="transformer", epochs=1, batch_size=500, history_length=4))
    monkeypatch.setattr(loop_module, "MAX_TRAIN_PAIRS", 1000)
    ck = build_checkpoint(result)
    assert torch.equal(ck["item_features"], torch.from_numpy(data.item_features))
    assert torch.equal(ck["user_histories"], torch.from_numpy(data.histories(4)))
    pairs = ck["train_pairs"].numpy()
    assert pairs.shape == (1000, 2)
    all_pairs = data.users * 300 + data.items
    assert np.isin(pairs[:, 0] * 300 + pairs[:, 1], all_pairs).all()
    assert np.array_equal(ck["train_pairs"], build_checkpoint(result)["train_pairs"])  # seeded


def test_dense_linear_without_data_features_uses_a_random_projection(data) -> None:  # type: ignore[no-untyped-def]
    from dataclasses import replace as dc_replace

    plain = dc_replace(data, item_features=None)
    result = train(plain, TrainConfig(item_encoder="dense-linear", n_features=16, epochs=1, batch_size=500))
    assert result.item_features is not None and result.item_features.shape == (300, 16)


def test_train_live_one_full_batch_epoch_is_one_sgd_step() -> None:
    import copy

    from live_towers import TinyLive, Towers

    from auditor.train.loop import train_live

    gen = torch.Generator().manual_seed(0)
    users, items = torch.randint(0, 10, (32,), generator=gen), torch.randint(0, 20, (32,), generator=gen)
    torch.manual_seed(0)
    live = TinyLive(Towers(20, 10, 4), lr=0.5)
    # By hand: InfoNCE over the whole batch does not depend on the row order, so one epoch
    # in one batch is one plain SGD step on the full batch.
    expected = copy.deepcopy(live.module)
    step = torch.optim.SGD(expected.parameters(), lr=0.5)
    live.loss(expected.user_emb(users), expected.items(items)).backward()
    step.step()
    optimizer = train_live(live, users, items, epochs=1, batch_size=64, seed=3)
    assert isinstance(optimizer, torch.optim.SGD)
    for got, want in zip(live.module.parameters(), expected.parameters()):
        torch.testing.assert_close(got, want)
    with pytest.raises(TrainingError, match="no optimizer"):
        train_live(TinyLive(Towers(20, 10, 4), rebuild_optimizer=False), users, items, epochs=1, batch_size=8)


def test_save_example_writes_checkpoint_and_log(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from auditor.train.loop import save_example

    users, items = np.array([0, 1, 1], np.int64), np.array([2, 0, 5], np.int64)
    model, log = save_example(tmp_path, "tiny", {"w": torch.ones(2, 3), "version": 1}, users, items)
    assert (model, log) == (tmp_path / "tiny.pt", tmp_path / "interactions.parquet")
    saved = torch.load(model, weights_only=True)
    assert saved["version"] == 1 and torch.equal(saved["w"], torch.ones(2, 3))
    assert pq.read_table(log).to_pydict() == {"user_id": [0, 1, 1], "item_id": [2, 0, 5]}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["interactions.parquet", "tiny.pt"]  # no temp files
