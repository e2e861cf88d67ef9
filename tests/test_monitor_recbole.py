"""The RecBole trainer hook: the trace a real RecBole run wrote (tests/data/recbole/
make_trace.py) read back, and the mixin's logic on a stand-in with RecBole's trainer
interface (RecBole needs numpy < 2, so it cannot run in the test environment)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from auditor.errors import TrainingError
from auditor.monitor import read_trace
from auditor.monitor.recbole import monitored

DATA = Path(__file__).resolve().parent / "data" / "recbole"


def test_the_real_recbole_run_wrote_a_readable_trace() -> None:
    trace = read_trace(DATA / "BPR-tiny.trace.jsonl")
    header = trace.header
    tokens = json.loads((DATA / "BPR-tiny.tokens.json").read_text())["item_id"]
    # rows are RecBole's item ids without the padding row 0, as check reads a RecBole checkpoint
    assert header.source == "recbole" and header.n_items == len(tokens) - 1 == 80 and header.dim == 16
    assert header.item_ids_sha256 == hashlib.sha256("\n".join(tokens[1:]).encode()).hexdigest()
    assert header.counts == "given" and header.optimizer == "SGD" and header.interval == 2
    assert [r.epoch for r in trace.epochs] == [1, 2, 3] and [r.step for r in trace.epochs] == [7, 14, 21]
    assert [r.step for r in trace.steps] == list(range(2, 21, 2)) and trace.complete and not trace.truncated
    assert all(r.lr == 5.0 and r.n_counted == trace.epochs[0].n_counted for r in trace.records)
    angles = trace.angles()  # BPR scores by dot product (C4 violated): the angles spread
    assert angles is not None and angles.n > 500 and angles.share_90_1 < 0.2 and angles.share_90_10 < 0.7
    assert [(a.step, a.alert) for a in trace.alerts] == [(2, "angle_share_90_1<0.5")]
    assert trace.epochs[-1].loss < trace.epochs[0].loss


class StandInTrainer:
    """RecBole 1.2's trainer interface as the mixin uses it: ``optimizer``, ``model``,
    ``_train_epoch`` returning the summed batch loss, ``fit`` looping over epochs."""

    def __init__(self, config: dict[str, Any], model: torch.nn.Module) -> None:
        self.model, self.epochs = model, config["epochs"]
        self.optimizer = torch.optim.SGD(model.parameters(), lr=config["learning_rate"])

    def _train_epoch(self, train_data: Any, epoch_idx: int, loss_func: Any = None, show_progress: bool = False) -> float:
        total = 0.0
        for interaction in train_data:
            self.optimizer.zero_grad()
            q = torch.nn.functional.normalize(self.model.item_embedding(interaction["item_id"]), dim=1)
            loss = (1 - q[:, 0]).mean()  # cosine to a fixed direction: updates at 90°
            loss.backward()
            self.optimizer.step()
            total += float(loss.detach())
        return total

    def fit(self, train_data: Any) -> None:
        for epoch in range(self.epochs):
            self._train_epoch(train_data, epoch)


class Loader(list[dict[str, torch.Tensor]]):
    dataset: Any


def test_the_mixin_hooks_every_step_and_epoch(tmp_path: Path) -> None:
    items = torch.tensor([1, 1, 2, 3, 1, 4, 2, 1])  # RecBole ids: row 0 is padding
    loader = Loader([{"item_id": items[:4]}, {"item_id": items[4:]}])
    loader.dataset = SimpleNamespace(iid_field="item_id", inter_feat={"item_id": items},
                                     field2id_token={"item_id": np.array(["[PAD]", "a", "b", "c", "d"])})
    torch.manual_seed(0)
    model = torch.nn.Module()
    model.item_embedding = torch.nn.Embedding(5, 3)
    trainer = monitored(StandInTrainer)({"epochs": 3, "learning_rate": 0.5}, model, trace=tmp_path / "t.jsonl", interval=1)
    assert type(trainer).__name__ == "PopauditStandInTrainer"
    trainer.fit(loader)
    trace = read_trace(tmp_path / "t.jsonl")
    assert trace.header.n_items == 4 and trace.header.counts == "given"
    assert [r.step for r in trace.steps] == [1, 2, 3, 4, 5, 6] and [r.epoch for r in trace.epochs] == [1, 2, 3]
    assert trainer.popaudit is not None and trainer.popaudit.counts.tolist() == [4, 2, 1, 1]
    assert all(r.angle_share_90_1 == 1.0 for r in trace.steps) and trace.complete
    with pytest.raises(TrainingError, match="alert action 'stop' is not one of warn, raise here"):
        monitored(StandInTrainer)({"epochs": 1, "learning_rate": 0.5}, model, on_alert="stop")


class EvaluatingTrainer(StandInTrainer):
    """RecBole's fit shape: a train epoch, then ``_valid_epoch`` (evaluation), which raises."""

    def _valid_epoch(self) -> None:
        raise RuntimeError("CUDA out of memory during evaluation")

    def fit(self, train_data: Any) -> None:
        for epoch in range(self.epochs):
            self._train_epoch(train_data, epoch)
            self._valid_epoch()


def test_a_fit_that_raises_outside_an_epoch_ends_the_trace_with_the_error(tmp_path: Path) -> None:
    """QA round 4, F4: the trace of a fit that died in evaluation is no completed run."""
    items = torch.tensor([1, 1, 2, 3, 1, 4, 2, 1])
    loader = Loader([{"item_id": items[:4]}, {"item_id": items[4:]}])
    loader.dataset = SimpleNamespace(iid_field="item_id", inter_feat={"item_id": items},
                                     field2id_token={"item_id": np.array(["[PAD]", "a", "b", "c", "d"])})
    model = torch.nn.Module()
    model.item_embedding = torch.nn.Embedding(5, 3)
    trainer = monitored(EvaluatingTrainer)({"epochs": 3, "learning_rate": 0.5}, model, trace=tmp_path / "t.jsonl",
                                           interval=1)
    with pytest.raises(RuntimeError, match="during evaluation"):
        trainer.fit(loader)
    trace = read_trace(tmp_path / "t.jsonl")
    assert trace.end is not None and (trace.end.step, trace.end.epoch) == (2, 1)
    assert trace.end.reason == "error: RuntimeError: CUDA out of memory during evaluation"


class NeuMFLike(torch.nn.Module):
    """A model whose item tables are not called ``item_embedding`` (as RecBole's NeuMF)."""

    def __init__(self) -> None:
        super().__init__()
        self.user_mf_embedding, self.item_mf_embedding = torch.nn.Embedding(3, 2), torch.nn.Embedding(5, 2)
        self.mlp = torch.nn.Linear(2, 2)


def test_a_model_without_the_named_item_table_is_a_training_error_naming_items(tmp_path: Path) -> None:
    """QA round 7 (monitor F4): not an AttributeError traceback from inside fit, but a
    TrainingError when the trainer is made, listing the model's embeddings and ``items=``."""
    config = {"epochs": 1, "learning_rate": 0.5}
    with pytest.raises(TrainingError, match=(
            r"^items: the RecBole model NeuMFLike has no attribute 'item_embedding' \(its embeddings: "
            r"user_mf_embedding, item_mf_embedding\); name its item table with items=, e.g. "
            r"monitored\(Trainer\)\(config, model, items='item_mf_embedding'\)$")):
        monitored(StandInTrainer)(config, NeuMFLike(), trace=tmp_path / "t.jsonl")
    with pytest.raises(TrainingError, match=r"^items: the model's mlp is a Linear, not an embedding table \(its "
                                            r"embeddings: user_mf_embedding, item_mf_embedding\); name its item"):
        monitored(StandInTrainer)(config, NeuMFLike(), items="mlp", trace=tmp_path / "t.jsonl")
    assert not (tmp_path / "t.jsonl").exists()
    trainer = monitored(StandInTrainer)(config, NeuMFLike(), items="item_mf_embedding", trace=tmp_path / "t.jsonl")
    assert trainer._popaudit_weight() is trainer.model.item_mf_embedding.weight
