"""``lr`` means one rate on every path: the rate the recorded step (or the epoch's last
step) trained at, whoever steps the scheduler and when (QA monitor F1). Lightning steps its
schedulers before the callbacks' batch and epoch hooks, and a Keras schedule evaluated
after a step is the next step's; the monitor reads the rate before each step."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from auditor.monitor import TrainingMonitor, read_trace

N_ITEMS, DIM, BATCHES = 30, 4, 6


def _batches() -> list[torch.Tensor]:
    rng = np.random.default_rng(0)
    return [torch.as_tensor(rng.integers(0, N_ITEMS, 8)) for _ in range(BATCHES)]


def test_plain_loop_with_a_per_step_scheduler_records_the_rate_each_step_used(tmp_path: Path) -> None:
    """A per-step scheduler stepped after each step, end_epoch after the last: the epoch
    record carries the last step's rate, 1·0.5^5, not the next one's 1·0.5^6."""
    torch.manual_seed(0)
    table = torch.nn.Embedding(N_ITEMS, DIM)
    opt = torch.optim.SGD(table.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    monitor = TrainingMonitor(table, counts=np.ones(N_ITEMS), optimizer=opt, interval=2, trace=tmp_path / "t.jsonl")
    for rows in _batches():
        loss = table(rows).pow(2).sum()
        opt.zero_grad()
        loss.backward()
        with monitor.step(rows):
            opt.step()
        sched.step()
    monitor.end_epoch()
    monitor.close()
    trace = read_trace(tmp_path / "t.jsonl")
    assert [(r.step, r.lr) for r in trace.steps] == [(2, 0.5), (4, 0.125), (6, 0.03125)]  # 0.5**(step-1)
    assert trace.epochs[0].lr == 0.5 ** (BATCHES - 1)


def test_lightning_epoch_records_carry_the_rate_the_epoch_trained_at(tmp_path: Path) -> None:
    """StepLR(step_size=1, gamma=0.1) per epoch from 5.0: epochs train at 5.0 and 0.5 (Lightning
    steps the scheduler before on_train_epoch_end: the old record said 0.5 and 0.05)."""
    pl = pytest.importorskip("lightning.pytorch")
    from auditor.monitor.lightning import PopauditCallback

    class Model(pl.LightningModule):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.item_embedding = torch.nn.Embedding(N_ITEMS, DIM)

        def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
            return torch.nn.functional.normalize(self.item_embedding(batch), dim=1).sum()

        def configure_optimizers(self) -> object:
            opt = torch.optim.SGD(self.parameters(), lr=5.0)
            return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.1)}

    torch.manual_seed(0)
    path = tmp_path / "t.jsonl"
    callback = PopauditCallback("item_embedding", batch_items=lambda b: b, interval=BATCHES, trace=path,
                                alerts=["lr<1"])
    trainer = pl.Trainer(max_epochs=2, callbacks=[callback], accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(Model(), torch.utils.data.DataLoader(_batches(), batch_size=None))
    trace = read_trace(path)
    assert [(r.epoch, r.step, r.lr) for r in trace.epochs] == [(1, 6, 5.0), (2, 12, pytest.approx(0.5))]
    assert [(r.step, r.lr) for r in trace.steps] == [(6, 5.0), (12, pytest.approx(0.5))]
    assert [(a.step, a.alert) for a in trace.alerts] == [(12, "lr<1")]  # not one epoch early, at step 6


def test_the_item_groups_are_found_once_not_at_every_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading the rate before every step must not scan every group's tensors each time (a
    600-tensor model paid 1.4 ms a step): the groups are found once, and again only when the
    optimizer gains a group; the rate itself is read fresh (a scheduler changes it)."""
    table = torch.nn.Embedding(N_ITEMS, DIM)
    other = torch.nn.Linear(DIM, DIM)
    opt = torch.optim.SGD(table.parameters(), lr=1.0)
    monitor = TrainingMonitor(table, counts=np.ones(N_ITEMS), optimizer=opt, interval=0)
    calls = []
    scan = type(monitor.source).groups_of
    monkeypatch.setattr(type(monitor.source), "groups_of", lambda self, o: calls.append(1) or scan(self, o))
    for step, rows in enumerate(_batches()):
        with monitor.step(rows):
            opt.step()
        opt.param_groups[0]["lr"] = 0.5 ** (step + 1)
    assert len(calls) == 1 and monitor._lr() == 0.5 ** BATCHES
    opt.add_param_group({"params": other.parameters(), "lr": 9.0})
    assert monitor._lr() == 0.5 ** BATCHES and len(calls) == 2  # the new group holds no item row
    monitor.close()
