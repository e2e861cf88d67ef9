"""The monitor in a plain PyTorch loop on the bundled sample data reproduces ``retrain``'s
trace (same seed), and its last ρ is ``check``'s on the saved model (issue #26)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from auditor.cli import cli
from auditor.monitor import TrainingMonitor, read_trace
from auditor.train.data import read_interactions
from auditor.train.losses import two_tower_loss
from auditor.train.loop import TrainConfig, save_checkpoint, train
from auditor.train.models import build_model
from auditor.train.watch import WatchOptions, query_users

SAMPLE = Path(__file__).resolve().parents[1] / "sample_data"
CONFIG = TrainConfig(optimizer="sgd", lr=10.0, loss="infonce-cos", dim=32, epochs=3, batch_size=256, seed=0)
ANGLES = ("angle_n", "angle_share_90_1", "angle_share_90_10", "angle_median", "growth_per_update", "lr")
SAME = ("spearman", "mean_norm", "head_share_dot", "head_share_cosine", "head_share_ratio")


def plain_loop(data, config: TrainConfig, trace: Path) -> TrainingMonitor:
    """A hand-written loop (retrain's model, seed and batches) with the public monitor API:
    running counts from the batches, the user tower on a fixed sample as queries."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        model = build_model(config.model_spec(data))
    item_opt, user_opt = config.optimizers(model)
    users = query_users(data.n_users, config.seed)
    monitor = TrainingMonitor(model.encode_items, n_items=data.n_items, optimizer=item_opt, trace=trace,
                              queries=lambda: model.encode_users(users), seed=config.seed, interval=100)
    rng = np.random.default_rng(config.seed)
    all_users, all_items = torch.from_numpy(data.users), torch.from_numpy(data.items)
    with monitor:
        for _ in range(config.epochs):
            perm = torch.from_numpy(rng.permutation(data.n_interactions))
            total = 0.0
            for start in range(0, data.n_interactions, config.batch_size):
                batch = perm[start : start + config.batch_size]
                loss = two_tower_loss(config.loss, model.encode_users(all_users[batch]),
                                      model.encode_items(all_items[batch]), config.temperature)
                item_opt.zero_grad(set_to_none=True)
                user_opt.zero_grad(set_to_none=True)
                loss.backward()
                with monitor.step(all_items[batch]):
                    item_opt.step()
                    user_opt.step()
                total += float(loss.detach())
            monitor.end_epoch(loss=total / math.ceil(data.n_interactions / config.batch_size))
    return monitor


def test_plain_loop_reproduces_retrains_trace_and_checks_rho(tmp_path: Path) -> None:
    data = read_interactions(SAMPLE / "interactions.parquet")
    assert data.n_interactions % CONFIG.batch_size >= 2  # retrain then keeps the same batches
    plain_loop(data, CONFIG, tmp_path / "plain.jsonl")
    mine = read_trace(tmp_path / "plain.jsonl")
    result = train(data, CONFIG, watch=WatchOptions(trace=tmp_path / "retrain.jsonl", interval=100))
    theirs = read_trace(tmp_path / "retrain.jsonl")
    model_path = save_checkpoint(result, tmp_path / "model.pt")

    assert mine.header.counts == "running" and theirs.header.counts == "given"
    assert len(mine.records) == len(theirs.records) == 6  # 3 x 118 steps: steps 100, 200, 300 and 3 epoch ends
    assert [r.step for r in mine.steps] == [100, 200, 300]
    for a, b in zip(mine.records, theirs.records):
        assert (a.kind, a.step, a.epoch) == (b.kind, b.step, b.epoch)
        # the same table and the same steps: the same angles and growth, bit for bit
        assert [getattr(a, f) for f in ANGLES] == [getattr(b, f) for f in ANGLES] and a.angle_n > 0
        if a.kind == "epoch":  # running counts are now epoch x frequency: the same ranks and head
            assert [getattr(a, f) for f in SAME] == [getattr(b, f) for f in SAME]
            assert a.loglog_slope == pytest.approx(b.loglog_slope, rel=1e-9)
            assert a.loss == pytest.approx(b.loss, rel=1e-6) and a.n_counted == a.epoch * data.n_interactions
    # retrain's per-epoch rows are the monitor's epoch records
    assert [row["spearman"] for row in result.trace] == [r.spearman for r in theirs.epochs]
    assert [row["angle_share_90_1"] for row in result.trace] == [r.angle_share_90_1 for r in theirs.epochs]
    assert theirs.epochs[-1].spearman > 0.9 and theirs.angles().share_90_1 > 0.99

    # the last rho is check's on the saved model, exactly
    out = tmp_path / "report.json"
    done = CliRunner().invoke(cli, ["check", str(model_path), "--json", str(out), "--bootstrap", "0", "--no-probes", "-q",
                                    "--trace", str(tmp_path / "plain.jsonl")])
    assert done.exit_code == 0, done.output
    report = json.loads(out.read_text())
    assert report["frequency_norm"]["spearman"] == mine.epochs[-1].spearman
    # and the plain loop's trace renders beside the saved model, as the same catalogue
    assert report["training"]["source"] == "pytorch" and report["training"]["matches_model"]
    assert [p["step"] for p in report["training"]["points"]] == [100, 200, 300]
    assert report["training"]["angles"]["n"] == mine.angles().n


def test_retrain_writes_its_trace_and_an_alert_stops_it(tmp_path: Path) -> None:
    trace, model = tmp_path / "trace.jsonl", tmp_path / "m.pt"
    args = ["retrain", "--n-users", "100", "--n-items", "150", "--n-interactions", "3000", "--epochs", "3",
            "--trace", str(trace), "--trace-every", "4", "-o", str(model)]
    done = CliRunner().invoke(cli, args)
    assert done.exit_code == 0, done.output
    read = read_trace(trace)
    ckpt = torch.load(model, weights_only=True)
    assert read.header.source == "retrain" and read.header.config["lr"] == 10.0 and read.complete
    assert [r.spearman for r in read.epochs] == [row["spearman"] for row in ckpt["trace"]]
    assert [r.step for r in read.steps] == list(range(4, 37, 4))  # 12 steps per epoch, 36 in all

    done = CliRunner().invoke(cli, [*args, "--alert", "spearman>0.3", "--on-alert", "stop"])
    assert done.exit_code == 0, done.output
    assert "stopped in epoch 1 at step 4 by an alert" in done.output
    stopped = read_trace(trace)
    assert [a.step for a in stopped.alerts] == [4] and stopped.end is not None and "stopped by alert" in stopped.end.reason
    ckpt = torch.load(model, weights_only=True)
    assert ckpt["config"]["epochs"] == 1 and len(ckpt["trace"]) == 1

    done = CliRunner().invoke(cli, [*args, "--alert", "spearman>0.3", "--on-alert", "fail", "-o", str(tmp_path / "no.pt")])
    # Exit 3 is a tripped alert, not an error (CLI.md keeps "Error:" for exit 1 and 2): said as a tripped gate
    assert done.exit_code == 3 and "Error" not in done.output
    assert re.search(r"^alert spearman>0\.3 fired at step 4 \(epoch 1\): spearman = [\d.]+ \(TRIPPED\); training stopped$",
                     done.output, re.M), done.output
    assert not (tmp_path / "no.pt").exists()


def test_retrains_default_interval_is_the_monitors() -> None:
    from auditor.monitor import DEFAULT_INTERVAL

    (option,) = [p for p in cli.commands["retrain"].params if p.name == "trace_every"]
    assert option.default == DEFAULT_INTERVAL
