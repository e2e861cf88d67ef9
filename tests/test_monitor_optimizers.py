"""One optimizer per tower (QA round 4, F10): the trace names the optimizer and learning
rate that step the item table (matched by parameter identity), and its update angles are
measured around that optimizer's step only, in a plain loop and in Lightning's manual
optimization; ``check --trace`` then reads the run as plain SGD at the item table's rate."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from auditor.cli import cli
from auditor.errors import TrainingError
from auditor.monitor import TrainingMonitor, read_trace

N_USERS, N_ITEMS, DIM = 40, 60, 8


def log() -> tuple[torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(0)
    items = np.minimum(rng.zipf(1.3, 1024) - 1, N_ITEMS - 1)
    return torch.from_numpy(rng.integers(0, N_USERS, 1024)), torch.from_numpy(items)


def cosine_loss(users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
    logits = torch.nn.functional.normalize(users, dim=1) @ torch.nn.functional.normalize(items, dim=1).T / 0.1
    return torch.nn.functional.cross_entropy(logits, torch.arange(len(logits)))


def towers() -> tuple[torch.nn.Embedding, torch.nn.Embedding]:
    torch.manual_seed(0)
    return torch.nn.Embedding(N_USERS, DIM), torch.nn.Embedding(N_ITEMS, DIM)


def _trained_trace(tmp_path: Path, item_opt: torch.optim.Optimizer, item_table: torch.nn.Embedding,
                   user_tower: torch.nn.Embedding, user_opt: torch.optim.Optimizer) -> tuple[Path, TrainingMonitor]:
    """The trace of 16 steps of a two-tower loop, the user optimizer listed first, and its monitor."""
    users, items = log()
    path = tmp_path / "trace.jsonl"
    with TrainingMonitor(item_table, optimizer=[user_opt, item_opt], counts=np.bincount(items, minlength=N_ITEMS),
                         interval=4, trace=path) as monitor:
        for start in range(0, 1024, 64):
            loss = cosine_loss(user_tower(users[start:start + 64]), item_table(items[start:start + 64]))
            user_opt.zero_grad()
            item_opt.zero_grad()
            loss.backward()
            user_opt.step()
            with monitor.step(items[start:start + 64]):
                item_opt.step()
    return path, monitor


def test_a_plain_loop_with_two_optimizers_records_the_item_tables(tmp_path: Path) -> None:
    """Adam (lr 0.01) on the user tower listed first, SGD (lr 5) on the item table: the
    trace says SGD at lr 5, and plain SGD on a cosine loss moves every item at 90°."""
    user_tower, item_table = towers()
    user_opt = torch.optim.Adam(user_tower.parameters(), lr=0.01)
    item_opt = torch.optim.SGD(item_table.parameters(), lr=5.0)
    path, monitor = _trained_trace(tmp_path, item_opt, item_table, user_tower, user_opt)
    trace = read_trace(path)
    assert monitor.optimizer is item_opt and trace.header.optimizer == "SGD"
    assert [r.lr for r in trace.steps] == [5.0, 5.0, 5.0, 5.0]
    assert all(r.angle_n > 0 and r.angle_share_90_1 == 1.0 for r in trace.steps)


def test_an_optimizer_list_that_cannot_be_matched_is_refused() -> None:
    user_tower, item_table = towers()
    adam = torch.optim.Adam(user_tower.parameters(), lr=0.01)
    both = torch.optim.SGD(list(user_tower.parameters()) + list(item_table.parameters()), lr=1.0)
    with pytest.raises(TrainingError, match=r"optimizer: 2 optimizers were given \(Adam, Adam\) and none of them holds"):
        TrainingMonitor(item_table, optimizer=[adam, torch.optim.Adam(user_tower.parameters())], counts=np.ones(N_ITEMS))
    with pytest.raises(TrainingError, match="several of them hold the item table"):
        TrainingMonitor(item_table, optimizer=(both, torch.optim.SGD(item_table.parameters(), lr=1.0)), counts=np.ones(N_ITEMS))
    with pytest.raises(TrainingError, match=r"none of them holds .*\(they hold: Adam holding 1 parameter, shape "
                                            r"\(40, 8\); Adam holding 1 parameter, shape \(40, 8\)\)"):
        TrainingMonitor(item_table, optimizer=[adam, torch.optim.Adam(user_tower.parameters())], counts=np.ones(N_ITEMS))


WRONG = (r"optimizer: the optimizer given \(Adam holding 1 parameter, shape \(40, 8\)\) does not hold the item "
         r"table's parameter \(shape \(60, 8\); matched by identity or shared memory\): pass the optimizer that steps "
         r"the item table")


@pytest.mark.parametrize("given", ["alone", "list of one", "tuple of one"])
def test_one_optimizer_that_does_not_hold_the_table_is_refused(given: str) -> None:
    """QA verify, new problem 1: the user tower's Adam given alone (or as a list of one)
    while SGD steps the item table was taken silently, and C1 then judged an SGD-trained
    table as Adam's. One optimizer is checked as a list is, naming what it holds."""
    user_tower, item_table = towers()
    adam = torch.optim.Adam(user_tower.parameters(), lr=0.01)
    optimizer = {"alone": adam, "list of one": [adam], "tuple of one": (adam,)}[given]
    with pytest.raises(TrainingError, match=WRONG):
        TrainingMonitor(item_table, optimizer=optimizer, counts=np.ones(N_ITEMS))


def test_one_optimizer_that_holds_the_table_or_cannot_be_matched_is_taken() -> None:
    """The optimizer of every parameter holds the table; so does one whose parameter the
    table shares memory with (``weight.detach()``, ``weight[1:]``); a callable encoder's
    and a Keras-like optimizer (no param groups) cannot be matched and are taken as given."""
    user_tower, item_table = towers()
    both = torch.optim.SGD([*user_tower.parameters(), *item_table.parameters()], lr=0.5)
    adam = torch.optim.Adam(user_tower.parameters(), lr=0.01)
    for table in (item_table, item_table.weight.detach(), item_table.weight.data, item_table.weight[1:]):
        assert TrainingMonitor(table, optimizer=both, counts=np.ones(table.shape[0] if isinstance(table, torch.Tensor)
                                                                     else N_ITEMS)).optimizer is both
    encoder = TrainingMonitor(lambda rows: item_table(rows), n_items=N_ITEMS, optimizer=adam, counts=np.ones(N_ITEMS))
    assert encoder.optimizer is adam and encoder._lr() == 0.01

    class KerasLike:
        learning_rate = 0.25

    keras_like = KerasLike()
    assert TrainingMonitor(item_table, optimizer=keras_like, counts=np.ones(N_ITEMS)).optimizer is keras_like


pl = pytest.importorskip("lightning.pytorch")


class Manual(pl.LightningModule):
    """Manual optimization, one optimizer per tower, the user tower's listed first (QA F10)."""

    def __init__(self) -> None:
        super().__init__()
        self.user_embedding, self.item_embedding = towers()
        self.automatic_optimization = False

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        user_opt, item_opt = self.optimizers()
        loss = cosine_loss(self.user_embedding(batch[0]), self.item_embedding(batch[1]))
        user_opt.zero_grad()
        item_opt.zero_grad()
        self.manual_backward(loss)
        item_opt.step()
        user_opt.step()  # its pre-step hook came after the item step: it must not replace the snapshot
        return loss

    def configure_optimizers(self) -> list[torch.optim.Optimizer]:
        return [torch.optim.Adam(self.user_embedding.parameters(), lr=0.01),
                torch.optim.SGD(self.item_embedding.parameters(), lr=5.0)]


def test_lightning_manual_optimization_watches_the_item_optimizer(tmp_path: Path) -> None:
    from auditor.monitor.lightning import PopauditCallback

    users, items = log()
    counts = np.bincount(items.numpy(), minlength=N_ITEMS)
    path = tmp_path / "trace.jsonl"
    module = Manual()
    trainer = pl.Trainer(max_epochs=1, callbacks=[PopauditCallback("item_embedding", batch_items=lambda b: b[1],
                                                                   counts=counts, interval=4, trace=path)],
                         accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(users, items), batch_size=64)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*(num_workers|does not have many workers).*")
        trainer.fit(module, data)
    trace = read_trace(path)
    assert trace.header.optimizer == "SGD" and {r.lr for r in trace.records} == {5.0}
    moved = [np.unique(items[64 * (s - 1):64 * s].numpy()).size for s in (4, 8, 12, 16)]
    assert [r.angle_n for r in trace.steps] == moved and all(r.angle_share_90_1 == 1.0 for r in trace.steps)
    np.save(tmp_path / "items.npy", module.item_embedding.weight.detach().numpy())
    (tmp_path / "counts.csv").write_text("item_id,count\n" + "".join(f"{i},{c}\n" for i, c in enumerate(counts)))
    done = CliRunner().invoke(cli, ["check", str(tmp_path / "items.npy"), "--frequencies", str(tmp_path / "counts.csv"),
                                    "--trace", str(path), "--bootstrap", "0", "--format", "json"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert report["training"]["recorded_optimizer"] == "SGD"
    assert report["conditions"]["C1"]["status"] == "holds" and "(source: trace)" in report["conditions"]["C1"]["evidence"]


class UserOnly(pl.LightningModule):
    """Automatic optimization whose one optimizer holds the user tower only (the item
    table frozen or stepped elsewhere): the callback's monitor must refuse it."""

    def __init__(self) -> None:
        super().__init__()
        self.user_embedding, self.item_embedding = towers()

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return cosine_loss(self.user_embedding(batch[0]), self.item_embedding(batch[1]))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.user_embedding.parameters(), lr=0.01)


def test_lightning_refuses_a_trainer_optimizer_without_the_item_table(tmp_path: Path) -> None:
    from auditor.monitor.lightning import PopauditCallback

    users, items = log()
    path = tmp_path / "trace.jsonl"
    trainer = pl.Trainer(max_epochs=1, callbacks=[PopauditCallback("item_embedding", batch_items=lambda b: b[1],
                                                                   counts=np.ones(N_ITEMS), interval=4, trace=path)],
                         accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(users, items), batch_size=64)
    with warnings.catch_warnings(), pytest.raises(TrainingError, match=WRONG):
        warnings.filterwarnings("ignore", message=".*(num_workers|does not have many workers).*")
        trainer.fit(UserOnly(), data)
    assert not path.exists()  # refused before anything was written


def test_an_optimizer_holding_a_sparse_tensor_is_matched_without_error() -> None:
    """A sparse tensor has no storage to compare: it is not the table, and no error escapes."""
    _, item_table = towers()
    sgd = torch.optim.SGD([torch.nn.Parameter(torch.ones(2, 2))], lr=1.0)
    sgd.param_groups[0]["params"].append(torch.ones(N_ITEMS, DIM).to_sparse())
    with pytest.raises(TrainingError, match=r"\(SGD holding 2 parameters, shapes \(2, 2\), \(60, 8\)\) does not hold"):
        TrainingMonitor(item_table, optimizer=sgd, counts=np.ones(N_ITEMS))


@pytest.mark.parametrize(("settings", "status", "said"), [
    # the number is read at the header config's own key, which the evidence names (QA13 conditions F2)
    ({"momentum": 0.9}, "violated", "momentum 0.9 (from trace (config.momentum)) on the item parameters"),
    ({"weight_decay": 0.01}, "violated", "weight decay 0.01 (from trace (config.weight_decay)) on the item parameters"),
    ({}, "holds", "SGD (lr=5, momentum=0, weight_decay=0)"),
])
def test_the_trace_header_records_the_item_optimizers_momentum_and_weight_decay(
        tmp_path: Path, settings: dict[str, float], status: str, said: str) -> None:
    """QA round 7 (monitor F6): the header's config records the item group's momentum and
    weight decay (those of the item optimizer, not the user tower's Adam), so ``check
    --trace`` settles C1 without a declaration, as it does for a ``retrain`` trace."""
    user_tower, item_table = towers()
    user_opt = torch.optim.Adam(user_tower.parameters(), lr=0.01, weight_decay=0.5)
    item_opt = torch.optim.SGD(item_table.parameters(), lr=5.0, **settings)  # type: ignore[arg-type]
    path, _ = _trained_trace(tmp_path, item_opt, item_table, user_tower, user_opt)
    expected = {"momentum": 0.0, "weight_decay": 0.0, **settings}
    assert dict(read_trace(path).header.config) == expected
    np.save(tmp_path / "items.npy", item_table.weight.detach().numpy())
    counts = np.bincount(log()[1].numpy(), minlength=N_ITEMS)
    (tmp_path / "counts.csv").write_text("item_id,count\n" + "".join(f"{i},{c}\n" for i, c in enumerate(counts)))
    done = CliRunner().invoke(cli, ["check", str(tmp_path / "items.npy"), "--frequencies", str(tmp_path / "counts.csv"),
                                    "--trace", str(path), "--bootstrap", "0", "--format", "json"])
    assert done.exit_code == 0, done.output
    c1 = json.loads(done.stdout)["conditions"]["C1"]
    assert c1["status"] == status and said in c1["evidence"]
    assert (c1["details"]["momentum"], c1["details"]["weight_decay"]) == (expected["momentum"], expected["weight_decay"])


def test_a_callers_config_wins_and_disagreeing_groups_or_an_adaptive_optimizer_record_what_they_can(tmp_path: Path) -> None:
    """``config=`` (retrain's) keeps its own values; item groups that disagree record nothing
    for that setting; Adam has no ``momentum`` to record (C1 does not read one), only its decay."""
    user_tower, item_table = towers()
    user_opt = torch.optim.SGD(user_tower.parameters(), lr=1.0)
    item_opt = torch.optim.SGD(item_table.parameters(), lr=5.0, momentum=0.9)
    header = TrainingMonitor(item_table, optimizer=[user_opt, item_opt], counts=np.ones(N_ITEMS),
                             config={"momentum": 0.5, "loss": "infonce-cos"}).header
    assert dict(header.config) == {"momentum": 0.5, "weight_decay": 0.0, "loss": "infonce-cos"}
    table = torch.nn.Parameter(torch.randn(N_ITEMS, DIM))
    split = torch.optim.SGD([{"params": [table], "momentum": 0.9}, {"params": [torch.nn.Parameter(torch.ones(2))]}],
                            lr=1.0, weight_decay=0.1)
    assert dict(TrainingMonitor(table, optimizer=split, counts=np.ones(N_ITEMS)).header.config) == {
        "momentum": 0.9, "weight_decay": 0.1}  # the item table's group only
    adam = torch.optim.Adam([table], lr=0.01, weight_decay=0.02)
    assert dict(TrainingMonitor(table, optimizer=adam, counts=np.ones(N_ITEMS)).header.config) == {"weight_decay": 0.02}
    assert dict(TrainingMonitor(table, counts=np.ones(N_ITEMS)).header.config) == {}
    tower = torch.nn.Linear(DIM, DIM)  # an encoder: its optimizer's groups are all read, and disagree on momentum
    groups = torch.optim.SGD([{"params": [tower.weight], "momentum": 0.9}, {"params": [tower.bias]}], lr=1.0)
    encoder = TrainingMonitor(lambda rows: tower(table[rows]), n_items=N_ITEMS, optimizer=groups, counts=np.ones(N_ITEMS))
    assert dict(encoder.header.config) == {"weight_decay": 0.0}
