"""The README's "While it trains" examples run as printed (issue #26): each Python block of
that section is executed with only the names it leaves to the reader defined (a model, its
optimizer and data), and the trace it writes is read back and rendered by ``check --trace``.
docs/monitor.md's plain-loop block ("In a plain PyTorch loop") is run as printed too.

RecBole needs numpy < 2 and cannot run here; its block is compiled and held to the calls
``tests/data/recbole/make_trace.py`` makes with real RecBole (which wrote the trace the
RecBole tests read).
"""

from __future__ import annotations

import ast
import os
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from auditor.monitor import read_trace

ROOT = Path(__file__).resolve().parents[1]
N_USERS, N_ITEMS = 40, 60


def blocks() -> dict[str, str]:
    """The section's Python blocks by the trainer they show."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## While it trains\n", 1)[1].split("\n## ", 1)[0]
    found = re.findall(r"```python\n(.*?)```", section, re.S)
    named = {}
    for code in found:
        key = next(k for k in ("lightning", "keras", "recbole") if f"auditor.monitor.{k}" in code) if (
            "auditor.monitor." in code) else "pytorch"
        named[key] = code
    return named


def zipf_pairs(n: int = 1024) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.integers(0, N_USERS, n), np.minimum(rng.zipf(1.3, n) - 1, N_ITEMS - 1)


class TwoTower(torch.nn.Module):
    """Id embeddings and cosine InfoNCE: what the README's ``model`` stands for."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.user_embedding = torch.nn.Embedding(N_USERS, 8)
        self.item_embedding = torch.nn.Embedding(N_ITEMS, 8)

    def loss(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        u = torch.nn.functional.normalize(self.user_embedding(users), dim=1)
        q = torch.nn.functional.normalize(self.item_embedding(items), dim=1)
        return torch.nn.functional.cross_entropy(u @ q.T / 0.1, torch.arange(len(u)))


def run(code: str, names: dict[str, Any], folder: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.chdir(folder)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(code, "README.md (While it trains)", "exec"), names)  # noqa: S102 - the README's own code
    return names


def renders(folder: Path, table: np.ndarray, counts: np.ndarray) -> dict[str, Any]:
    """``check --trace`` of the trace the example wrote, beside the table it trained."""
    import json

    from click.testing import CliRunner

    from auditor.cli import cli

    np.save(folder / "items.npy", table)
    (folder / "counts.csv").write_text("item_id,count\n" + "".join(f"{i},{c}\n" for i, c in enumerate(counts)))
    done = CliRunner().invoke(cli, ["check", "items.npy", "--frequencies", "counts.csv", "--trace", "trace.jsonl",
                                    "--bootstrap", "0", "--format", "json"])
    assert done.exit_code == 0, done.output
    report: dict[str, Any] = json.loads(done.stdout)
    assert report["training"]["matches_model"] and report["training"]["points"]
    return report


@pytest.mark.slow  # ten epochs and an audit
def test_the_plain_loop_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    model = TwoTower()
    users, items = zipf_pairs()
    loader = [(torch.from_numpy(users[s:s + 64]), torch.from_numpy(items[s:s + 64])) for s in range(0, 1024, 64)]
    names = {"model": model, "optimizer": torch.optim.SGD(model.parameters(), lr=5.0), "loader": loader}
    run(blocks()["pytorch"], names, tmp_path, monkeypatch)
    trace = read_trace(tmp_path / "trace.jsonl")
    assert trace.header.source == "pytorch" and trace.complete and trace.epochs
    assert "(array([" in capsys.readouterr().out  # the example prints the rho series
    report = renders(tmp_path, model.item_embedding.weight.detach().numpy(), np.bincount(items, minlength=N_ITEMS))
    assert report["training"]["source"] == "pytorch"


def test_the_plain_loop_example_stops_at_the_step_that_fired(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """QA round 4, F8: with records every 4 steps the alert fires within an epoch, and the
    README's loop stops right after that step (not at the epoch's end, 16 steps on)."""
    import functools

    import auditor.monitor

    monkeypatch.setattr(auditor.monitor, "TrainingMonitor", functools.partial(auditor.monitor.TrainingMonitor, interval=4))
    model = TwoTower()
    users, items = zipf_pairs()
    loader = [(torch.from_numpy(users[s:s + 64]), torch.from_numpy(items[s:s + 64])) for s in range(0, 1024, 64)]
    names = {"model": model, "optimizer": torch.optim.SGD(model.parameters(), lr=5.0), "loader": loader}
    run(blocks()["pytorch"], names, tmp_path, monkeypatch)
    trace = read_trace(tmp_path / "trace.jsonl")
    assert [a.alert for a in trace.alerts] == ["spearman>0.5"]
    fired = trace.alerts[0].step
    assert fired % 16 != 0 and trace.end is not None and trace.end.step == fired
    assert trace.end.reason == f"stopped by alert spearman>0.5 at step {fired}"


def lightning_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lr: float) -> tuple[Any, dict[str, Any]]:
    """The README's Lightning block on the two-tower model under plain SGD at ``lr``: the
    trace it wrote and ``check --trace``'s report of the table it trained."""
    pl = pytest.importorskip("lightning.pytorch")
    tmp_path.mkdir()

    class Module(pl.LightningModule):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.tower = TwoTower()
            self.item_embedding = self.tower.item_embedding

        def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
            return self.tower.loss(batch["user"], batch["item"])

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=lr)

    users, items = zipf_pairs()
    rows = [{"user": torch.tensor(u), "item": torch.tensor(i)} for u, i in zip(users, items)]
    names = {"model": Module(), "train_loader": torch.utils.data.DataLoader(rows, batch_size=64),
             "train_items": items, "n_items": N_ITEMS}
    names = run(blocks()["lightning"], names, tmp_path, monkeypatch)
    trace = read_trace(tmp_path / "trace.jsonl")
    assert trace.header.source == "lightning" and trace.header.counts == "given" and trace.complete
    report = renders(tmp_path, names["model"].item_embedding.weight.detach().numpy(),
                     np.bincount(items, minlength=N_ITEMS))
    assert report["training"]["source"] == "lightning"
    return trace, report


@pytest.mark.slow  # Lightning's start-up, up to ten epochs and an audit, twice
def test_the_lightning_example_stops_a_biased_run_and_not_a_control(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The recipe end to end (16 steps an epoch, records at step 100 and each epoch end): the
    biased run (lr 5) stops at its first record with a log-log slope above 0.1, the epoch 4
    record (step 64), and check --trace of the table it stopped with takes the trace as this
    model's, its ρ equal to the audit's to the last bit (the same counts); the control (lr
    0.05) fires nothing in 10 epochs, although every update of both is at 90°."""
    biased, report = lightning_run(tmp_path / "biased", monkeypatch, 5.0)
    assert [(a.step, a.alert) for a in biased.alerts] == [(64, "loglog_slope>0.1")]
    assert biased.end is not None and biased.end.reason == "stopped by alert loglog_slope>0.1 at step 64"
    assert report["training"]["end_spearman"] == report["frequency_norm"]["spearman"]
    assert 0.1 < biased.epochs[-1].loglog_slope < 0.11 and biased.epochs[-2].loglog_slope < 0.1
    control, report = lightning_run(tmp_path / "control", monkeypatch, 0.05)
    assert control.alerts == () and control.end is not None and control.end.reason == "completed"
    last = control.records[-1]
    assert last.step == 160 and round(last.spearman, 2) == -0.03 and round(last.loglog_slope, 2) == -0.01
    assert [r.angle_share_90_1 for r in control.steps] == [1.0]  # step 100: the mechanism alert would have stopped it
    assert report["training"]["matches_model"] and report["training"]["end_spearman"] == report["frequency_norm"]["spearman"]


def test_the_keras_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    os.environ.setdefault("KERAS_BACKEND", "torch")
    keras = pytest.importorskip("keras")
    if keras.backend.backend() != "torch":  # pragma: no cover - Keras was imported with another backend first
        pytest.skip("Keras runs on another backend in this process")
    keras.utils.set_random_seed(0)
    user_in, item_in = keras.Input((1,), dtype="int64"), keras.Input((1,), dtype="int64")
    u = keras.layers.Flatten()(keras.layers.Embedding(N_USERS, 8, name="user_embedding")(user_in))
    q = keras.layers.Flatten()(keras.layers.Embedding(N_ITEMS, 8, name="item_embedding")(item_in))
    model = keras.Model([user_in, item_in], keras.layers.Rescaling(5.0)(keras.layers.Dot(axes=1, normalize=True)([u, q])))
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=2.0),
                  loss=keras.losses.BinaryCrossentropy(from_logits=True))
    users, items = zipf_pairs(512)
    negatives = np.random.default_rng(1).integers(0, N_ITEMS, 512)
    train_items = np.concatenate([items, negatives])
    x = [np.concatenate([users, users])[:, None], train_items[:, None]]
    y = np.concatenate([np.ones(512), np.zeros(512)]).astype("float32")
    names = {"model": model, "x": x, "y": y, "train_items": train_items, "n_items": N_ITEMS}
    run(blocks()["keras"], names, tmp_path, monkeypatch)
    trace = read_trace(tmp_path / "trace.jsonl")
    assert trace.header.source == "keras" and trace.complete
    table = keras.ops.convert_to_numpy(model.get_layer("item_embedding").embeddings)
    report = renders(tmp_path, table, np.bincount(train_items, minlength=N_ITEMS))
    assert report["training"]["source"] == "keras"


def test_the_recbole_example_makes_the_calls_of_the_real_run() -> None:
    code = blocks()["recbole"]
    tree = ast.parse(code)  # it compiles
    script = (ROOT / "tests" / "data" / "recbole" / "make_trace.py").read_text(encoding="utf-8")

    def imported(source: str) -> set[tuple[str, str]]:
        return {(node.module or "", alias.name) for node in ast.walk(ast.parse(source))
                if isinstance(node, ast.ImportFrom) for alias in node.names}

    assert imported(code) <= imported(script)  # every import of the example, as the real run imports it
    calls = {ast.unparse(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    assert {"monitored(Trainer)", "create_dataset", "data_preparation", "trainer.fit"} <= calls
    for call in ("monitored(Trainer)(config, model, trace=", "create_dataset(config)", "data_preparation(config, dataset)",
                 "BPR(config, train_data.dataset)"):
        assert call in code and call in script, call


def test_a_loop_that_trains_on_after_a_stop_says_so_in_the_end_record(tmp_path: Path) -> None:
    """QA round 4, F8: a loop that checks should_stop only at the epoch's end trains past the
    alert; the end record then says where training really ended."""
    from auditor.monitor import TrainingMonitor

    table = torch.nn.Embedding(5, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with TrainingMonitor(table, counts=np.arange(5), interval=2, alerts=["mean_norm>0"], on_alert="stop",
                             trace=tmp_path / "t.jsonl") as monitor:
            for _ in range(5):
                with monitor.step(None):
                    pass
    trace = read_trace(tmp_path / "t.jsonl")
    assert trace.end is not None and (trace.end.step, trace.alerts[0].step) == (5, 2)
    assert trace.end.reason == "stopped by alert mean_norm>0 at step 2; training went on to step 5"


def test_the_plain_loop_example_records_the_epochs_mean_batch_loss(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """QA round 7 (monitor F5): the README's loop records each epoch's mean batch loss (the
    figure the docs define and the adapters record), not its last batch's, and makes torch
    warn of nothing (``float(loss)`` on a tensor that requires grad did)."""
    import functools

    import auditor.monitor

    # records every 4 steps (the alert may stop the run inside an epoch: the mean is of the batches run)
    monkeypatch.setattr(auditor.monitor, "TrainingMonitor", functools.partial(auditor.monitor.TrainingMonitor, interval=4))
    model = TwoTower()
    seen: list[float] = []
    real_loss = model.loss

    def loss(users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        value = real_loss(users, items)
        seen.append(float(value.detach()))
        return value

    model.loss = loss  # type: ignore[method-assign]
    users, items = zipf_pairs()
    loader = [(torch.from_numpy(users[s:s + 64]), torch.from_numpy(items[s:s + 64])) for s in range(0, 1024, 64)]
    names = {"model": model, "optimizer": torch.optim.SGD(model.parameters(), lr=5.0), "loader": loader}
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(compile(blocks()["pytorch"], "README.md (While it trains)", "exec"), names)  # noqa: S102
    assert [w for w in caught if w.category is UserWarning] == []
    epochs = read_trace(tmp_path / "trace.jsonl").epochs
    assert epochs
    ends = [0] + [r.step for r in epochs]  # one loss per optimizer step
    for record, start, stop in zip(epochs, ends, ends[1:]):
        assert record.loss == pytest.approx(np.mean(seen[start:stop]), rel=1e-6)
    assert epochs[0].loss != pytest.approx(seen[ends[1] - 1], rel=1e-6)  # not the last batch's


@pytest.mark.parametrize("interval", [None, 4])
def test_the_docs_plain_loop_stops_at_the_alert_in_both_loops(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              interval: int | None) -> None:
    """QA round 7 (monitor N2): docs/monitor.md's loop left only the batch loop on should_stop, so
    a stop set at an epoch record (default interval) or mid-epoch (records every 4 steps) still
    trained the first step of each epoch left (end: 'training went on to step ...'); run as
    printed for 10 epochs of 16 steps, it now stops at the step that fired."""
    import functools

    import auditor.monitor

    if interval is not None:
        monkeypatch.setattr(auditor.monitor, "TrainingMonitor",
                            functools.partial(auditor.monitor.TrainingMonitor, interval=interval))
    text = (ROOT / "docs" / "monitor.md").read_text(encoding="utf-8")
    code = re.findall(r"```python\n(.*?)```", text.split("\n## In a plain PyTorch loop\n", 1)[1], re.S)[0]
    model = TwoTower()
    users, items = zipf_pairs()
    loader = [(torch.from_numpy(users[s:s + 64]), torch.from_numpy(items[s:s + 64])) for s in range(0, 1024, 64)]
    optimizer = torch.optim.SGD(model.parameters(), lr=5.0)
    steps = []
    optimizer.register_step_post_hook(lambda *_: steps.append(1))
    run(code, {"model": model, "optimizer": optimizer, "loader": loader, "epochs": 10}, tmp_path, monkeypatch)
    trace = read_trace(tmp_path / "trace.jsonl")
    assert [a.alert for a in trace.alerts] == ["spearman>0.5"]
    fired = trace.alerts[0].step
    assert fired == (96 if interval is None else 88)  # epoch 6's record, or its 8th step: 4 epochs are left
    assert len(steps) == fired and trace.records[-1].step == fired
    assert trace.end is not None and trace.end.reason == f"stopped by alert spearman>0.5 at step {fired}"
