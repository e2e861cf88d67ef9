"""The Lightning callback with the real Lightning: a few steps write a trace, and an alert
stops the run (auditor/monitor/lightning.py)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

pl = pytest.importorskip("lightning.pytorch")

from auditor.monitor import TrainingAlertWarning, read_trace  # noqa: E402
from auditor.monitor.lightning import PopauditCallback  # noqa: E402

N_USERS, N_ITEMS = 40, 60


class TwoTower(pl.LightningModule):
    """Id embeddings, cosine InfoNCE, plain SGD: the all-conditions-hold baseline."""

    def __init__(self) -> None:
        super().__init__()
        self.user_embedding = torch.nn.Embedding(N_USERS, 8)
        self.item_embedding = torch.nn.Embedding(N_ITEMS, 8)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        u = torch.nn.functional.normalize(self.user_embedding(batch["user"]), dim=1)
        q = torch.nn.functional.normalize(self.item_embedding(batch["item"]), dim=1)
        logits = u @ q.T / 0.1
        return torch.nn.functional.cross_entropy(logits, torch.arange(len(logits)))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=5.0)


def loader() -> torch.utils.data.DataLoader:
    rng = np.random.default_rng(0)
    items = np.minimum(rng.zipf(1.3, 1024) - 1, N_ITEMS - 1)
    users = rng.integers(0, N_USERS, 1024)
    rows = [{"user": torch.tensor(u), "item": torch.tensor(i)} for u, i in zip(users, items)]
    return torch.utils.data.DataLoader(rows, batch_size=64, shuffle=False)


def fit(callback: PopauditCallback, epochs: int, module: pl.LightningModule | None = None, **trainer_options: int) -> pl.Trainer:
    torch.manual_seed(0)
    trainer = pl.Trainer(max_epochs=epochs, callbacks=[callback], accelerator="cpu", logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         **trainer_options)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*(num_workers|does not have many workers).*")
        trainer.fit(module or TwoTower(), loader())
    return trainer


def test_lightning_writes_a_trace_of_real_steps(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    callback = PopauditCallback("item_embedding", batch_items=lambda b: b["item"], interval=4, trace=path)
    trainer = fit(callback, epochs=2)
    trace = read_trace(path)
    assert trace.header.source == "lightning" and trace.header.counts == "running" and trace.header.optimizer == "SGD"
    assert [r.step for r in trace.steps] == [4, 8, 12, 16, 20, 24, 28, 32] and trainer.global_step == 32
    assert [r.epoch for r in trace.epochs] == [1, 2] and trace.complete
    assert trace.epochs[-1].n_counted == 2 * 1024 and trace.steps[0].lr == 5.0
    assert trace.epochs[0].loss is not None and trace.epochs[0].loss > trace.epochs[1].loss
    angles = trace.angles()  # plain SGD on a cosine loss: every update at 90°
    assert angles is not None and angles.n > 50 and angles.share_90_1 == 1.0
    assert trace.epochs[-1].spearman > 0.3


def test_check_renders_the_lightning_trace(tmp_path: Path) -> None:
    """The trace beside the trained table: check --trace shows it and takes C1 and C4 from its angles."""
    import json

    from click.testing import CliRunner

    from auditor.cli import cli

    path = tmp_path / "trace.jsonl"
    trainer = fit(PopauditCallback("item_embedding", batch_items=lambda b: b["item"], interval=4, trace=path), 2)
    np.save(tmp_path / "items.npy", trainer.lightning_module.item_embedding.weight.detach().numpy())
    items = np.concatenate([batch["item"].numpy() for batch in loader()])
    counts = np.bincount(items, minlength=N_ITEMS)
    (tmp_path / "counts.csv").write_text("item_id,count\n" + "".join(f"{i},{c}\n" for i, c in enumerate(counts)))
    done = CliRunner().invoke(cli, ["check", str(tmp_path / "items.npy"), "--frequencies", str(tmp_path / "counts.csv"),
                                    "--trace", str(path), "--bootstrap", "0", "--format", "json"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    trace = read_trace(path)
    assert report["training"]["source"] == "lightning" and report["training"]["matches_model"]
    assert [p["step"] for p in report["training"]["points"]] == [r.step for r in trace.steps]
    # running counts over 2 epochs rank the items as the log's counts: the same rho as check's
    assert report["training"]["points"][-1]["spearman"] == trace.epochs[-1].spearman == report["frequency_norm"]["spearman"]
    for key in ("C1", "C4"):
        assert report["conditions"][key]["status"] == "holds" and "(source: trace)" in report["conditions"][key]["evidence"]


def test_an_alert_stops_lightning(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    callback = PopauditCallback("item_embedding", batch_items=lambda b: b["item"], interval=2, trace=path,
                                alerts=["angle_share_90_1>0.9"], on_alert="stop")
    with pytest.warns(TrainingAlertWarning, match="asking the trainer to stop"):
        trainer = fit(callback, epochs=5)
    assert trainer.global_step == 2  # stopped right after the step that fired, not after 5 x 16 steps
    trace = read_trace(path)
    assert [(a.step, a.alert, a.action) for a in trace.alerts] == [(2, "angle_share_90_1>0.9", "stop")]
    assert trace.end is not None and trace.end.reason == "stopped by alert angle_share_90_1>0.9 at step 2"


class Recorded(TwoTower):
    """The two-tower model keeping each training_step's loss, as it returned it."""

    def __init__(self) -> None:
        super().__init__()
        self.losses: list[float] = []

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        self.losses.append(float(loss.detach()))
        return loss


def test_gradient_accumulation_keeps_the_loss_and_every_micro_batch(tmp_path: Path) -> None:
    """accumulate_grad_batches=2 (QA F3): 16 batches of 64 make 8 optimizer steps an epoch.
    The epoch loss is the mean of training_step's losses (Lightning hands callbacks each
    divided by 2: it was half), and a step's angles cover the rows of both its micro-batches
    (plain SGD moves every row a batch holds), not only the last one's."""
    path = tmp_path / "trace.jsonl"
    module = Recorded()
    callback = PopauditCallback("item_embedding", batch_items=lambda b: b["item"], interval=1, trace=path)
    trainer = fit(callback, 1, module, accumulate_grad_batches=2)
    trace = read_trace(path)
    assert trainer.global_step == 8 and [r.step for r in trace.steps] == list(range(1, 9))
    assert trace.header.config["steps_per_epoch"] == 8  # recorded for C5 (QA F13): 16 batches / 2
    assert trace.epochs[0].loss == pytest.approx(float(np.mean(module.losses)), rel=1e-12)
    batches = [batch["item"].numpy() for batch in loader()]
    moved = [np.unique(np.concatenate(batches[2 * s: 2 * s + 2])).size for s in range(8)]
    last_only = [np.unique(batches[2 * s + 1]).size for s in range(8)]
    assert [r.angle_n for r in trace.steps] == moved and moved != last_only


def test_a_second_fit_or_a_blind_callback_is_refused(tmp_path: Path) -> None:
    """QA F12: a second fit with the same callback would replace the first fit's trace; QA
    F14: with neither batch_items nor counts the monitor counted nothing (ρ never measured)."""
    from auditor.errors import TrainingError

    path = tmp_path / "trace.jsonl"
    callback = PopauditCallback("item_embedding", batch_items=lambda b: b["item"], interval=4, trace=path)
    fit(callback, 1)
    first = path.read_bytes()
    with pytest.raises(TrainingError, match="this popaudit callback already watched a fit"):
        fit(callback, 1)
    assert path.read_bytes() == first and read_trace(path).complete
    with pytest.raises(TrainingError, match="give batch_items .* or counts"):
        PopauditCallback("item_embedding", trace=path)
    PopauditCallback("item_embedding", counts=np.ones(N_ITEMS))  # counts alone: angles over the whole table


class Nested(pl.LightningModule):
    """The towers in a sub-module (``self.m``); counts the training steps it ran."""

    def __init__(self) -> None:
        super().__init__()
        self.m = TwoTower()
        self.steps = 0

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        self.steps += 1
        return self.m.training_step(batch, batch_idx)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=5.0)


def test_a_wrong_item_table_is_refused_before_training(tmp_path: Path) -> None:
    """QA round 4, F6: a name the module lacks, or a whole sub-module, is a TrainingError
    naming the embeddings there are, before a batch is trained; the dotted name works."""
    from auditor.errors import TrainingError

    for name, message in [
        ("item_embedding", r"items: the LightningModule has no attribute 'item_embedding' \(its embeddings: "
                           r"m\.user_embedding, m\.item_embedding\); a dotted name"),
        ("m", r"items is a TwoTower module, not an item table: give its item nn\.Embedding \(its embeddings: "
              r"m\.user_embedding, m\.item_embedding\), or n_items"),  # the names to pass (QA verify nit)
    ]:
        module = Nested()
        with pytest.raises(TrainingError, match=message):
            fit(PopauditCallback(name, batch_items=lambda b: b["item"], trace=tmp_path / "t.jsonl"), 1, module)
        assert module.steps == 0 and not (tmp_path / "t.jsonl").exists()
    module = Nested()
    fit(PopauditCallback("m.item_embedding", batch_items=lambda b: b["item"], interval=4, trace=tmp_path / "t.jsonl"),
        1, module)
    assert module.steps == 16 and read_trace(tmp_path / "t.jsonl").complete


def test_step_records_carry_the_step_loss(tmp_path: Path) -> None:
    """QA round 4, F9: each step record holds the loss of the batches its step trained on
    (the mean of both micro-batches under accumulate_grad_batches=2), so a loss alert fires
    at that step, not at the epoch's end."""
    path = tmp_path / "trace.jsonl"
    module = Recorded()
    fit(PopauditCallback("item_embedding", batch_items=lambda b: b["item"], interval=2, trace=path), 1, module,
        accumulate_grad_batches=2)
    steps = read_trace(path).steps
    pairs = np.asarray(module.losses).reshape(8, 2).mean(axis=1)
    assert [r.step for r in steps] == [2, 4, 6, 8]
    assert [r.loss for r in steps] == pytest.approx(pairs[[1, 3, 5, 7]].tolist(), rel=1e-12)
    module = Recorded()
    with pytest.warns(TrainingAlertWarning, match="loss"):
        trainer = fit(PopauditCallback("item_embedding", batch_items=lambda b: b["item"], interval=3, trace=path,
                                       alerts=["loss>0"], on_alert="stop"), 2, module)
    assert trainer.global_step == 3 and read_trace(path).steps[0].loss == pytest.approx(module.losses[2], rel=1e-12)
