"""``check --trace`` and the run a trace records (docs/monitor.md, "A trace of another model"):
a trace whose config contradicts the declared settings is another run's (QA F1), and a
running-count trace stopped within its first epoch is not held to the audit's ρ (QA F10)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from scipy.stats import spearmanr

from auditor.cli import cli
from auditor.monitor import TrainingMonitor

N = 50


def orthogonal_trace(path: Path, config: dict[str, Any], *, seen: np.ndarray | None = None) -> np.ndarray:
    """A trace of one recorded step whose every update is at 90° to its row, and the table
    it leaves: row i is (1 + i/100, 0) and the step adds (0, 0.1) to the rows it moves, so
    norms rise with the row and each measured angle is atan2(0.1, 0) = 90°. ``seen``:
    running counts of those rows; else the log's counts (row i: 50 - i) given up front."""
    table = torch.zeros(N, 2, dtype=torch.float64)
    table[:, 0] = 1.0 + torch.arange(N, dtype=torch.float64) / 100
    rows = torch.arange(N) if seen is None else torch.from_numpy(seen)
    counts = None if seen is not None else np.arange(N, 0, -1)
    monitor = TrainingMonitor(table, counts=counts, interval=1, trace=path, config=config, fsync=False)
    with monitor:
        monitor.before_step(rows)
        table[rows, 1] += 0.1
        monitor.after_step()
    return table.numpy()


def audit(folder: Path, table: np.ndarray, *extra: str) -> dict[str, Any]:
    np.save(folder / "items.npy", table)
    (folder / "counts.csv").write_text("item_id,count\n" + "".join(f"{i},{N - i}\n" for i in range(N)))
    done = CliRunner().invoke(cli, ["check", str(folder / "items.npy"), "--frequencies", str(folder / "counts.csv"),
                                    "--trace", str(folder / "t.jsonl"), "--bootstrap", "0", "--no-probes",
                                    "--format", "json", *extra])
    assert done.exit_code == 0, done.output
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def test_a_trace_contradicting_the_declared_loss_or_lr_is_another_runs(tmp_path: Path) -> None:
    """The QA case: a cosine-loss run at lr 0.02 given as the trace of a table declared to be
    trained with a dot-product loss at lr 0.05. Its orthogonal angles made C4 hold (the
    measurement won over the name); now it is flagged and C4 follows the declared name."""
    table = orthogonal_trace(tmp_path / "t.jsonl", {"loss": "infonce-cos", "lr": 0.02, "optimizer": "sgd"})
    sgd = ["--optimizer", "sgd", "--momentum", "0", "--weight-decay", "0"]
    report = audit(tmp_path, table, "--loss", "infonce-dot", "--lr", "0.05", *sgd)
    training, c4 = report["training"], report["conditions"]["C4"]
    assert not training["matches_model"]
    assert training["mismatch"] == ("the trace's config records the loss 'infonce-cos', --loss declares "
                                    "'infonce-dot' (one scores by cosine, the other not)")
    assert training["recorded_loss"] == "infonce-cos" and training["recorded_lr"] == 0.02
    assert c4["status"] == "violated" and "trace_angles" not in c4["details"]
    assert any("is of another model" in w for w in report["warnings"])
    # the loss agrees in kind (another name for a cosine loss): only the rate contradicts it
    report = audit(tmp_path, table, "--loss", "cosine", "--lr", "0.05", *sgd)
    assert report["training"]["mismatch"] == "the trace's config records the learning rate 0.02, --lr declares 0.05"
    report = audit(tmp_path, table, "--optimizer", "adam", "--loss", "cosine")
    assert report["training"]["mismatch"] == "the trace's run used SGD, --optimizer declares Adam"
    # the same settings as the trace's: its evidence stands (every angle at 90°: C4 holds by it)
    report = audit(tmp_path, table, "--loss", "cosine", "--lr", "0.02", *sgd)
    assert report["training"]["matches_model"] and report["training"]["angles"]["share_90_1"] == 1.0
    assert report["conditions"]["C4"]["status"] == "holds"


def test_a_running_count_trace_stopped_in_its_first_epoch_is_not_held_to_the_audits_rho(tmp_path: Path) -> None:
    """Running counts over 10 of the log's 1,275 interactions (rows 40-49 once each: the
    longest rows) give ρ = that of a 0/1 indicator against the norms, far from the audit's
    ρ over the log (counts 50 - i against rising norms: -1). Before, the ±0.05 margin
    declared the trace another model's; now the two are not compared, and a warning says why."""
    seen = np.arange(40, 50)
    table = orthogonal_trace(tmp_path / "t.jsonl", {}, seen=seen)
    indicator = np.isin(np.arange(N), seen).astype(float)
    expected = spearmanr(indicator, np.linalg.norm(table, axis=1)).statistic
    report = audit(tmp_path, table)
    training = report["training"]
    assert abs(report["frequency_norm"]["spearman"] + 1.0) < 1e-12
    assert abs(training["end_spearman"] - expected) < 1e-12 and expected > 0.6
    assert training["matches_model"] and training["end_spearman_range"] is None
    assert training["counts"] == "running" and training["end_counted"] == 10
    assert training["end_spearman_rule"].startswith("not compared: running counts over 10 of the log's 1,275 ")
    assert any("over running counts of 10 of the log's 1,275 interactions" in w for w in report["warnings"])
    assert report["conditions"]["C4"]["details"]["trace_angles"]["share_90_1"] == 1.0


def test_a_running_count_trace_past_one_epoch_is_still_compared(tmp_path: Path) -> None:
    """Counts over a whole epoch (each row seen as often as the log has it, but reversed: row i
    seen i + 1 times, 1,275 in all) are compared, and their ρ (+1 against -1) flags the trace."""
    seen = np.repeat(np.arange(N), np.arange(1, N + 1))
    report = audit(tmp_path, orthogonal_trace(tmp_path / "t.jsonl", {}, seen=seen))
    training = report["training"]
    assert training["end_counted"] == 1275 and abs(training["end_spearman"] - 1.0) < 1e-12
    assert not training["matches_model"] and "its ρ ± 0.05: running counts" in training["mismatch"]


def stopped_loop(path: Path, config: dict[str, Any]) -> np.ndarray:
    """A plain loop stopped by an alert at its first record (step 1 of an epoch of 5), an epoch
    record written at the stop as docs/monitor.md's loop writes it; the step moves every row at 90°."""
    table = torch.zeros(N, 2, dtype=torch.float64)
    table[:, 0] = 1.0 + torch.arange(N, dtype=torch.float64) / 100
    monitor = TrainingMonitor(table, counts=np.arange(N, 0, -1), interval=1, trace=path, config=config,
                              alerts=["n_nonfinite<1"], on_alert="stop", fsync=False)
    with monitor, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(5):
            monitor.before_step(torch.arange(N))
            table[:, 1] += 0.1
            monitor.after_step()
            if monitor.should_stop:
                break
        monitor.end_epoch()
    return table.numpy()


def test_c5_of_a_plain_loop_stopped_within_its_first_epoch(tmp_path: Path) -> None:
    """QA F13: the trace does not record an epoch's steps, so C5 projected over 1 whole epoch
    without a word; now its evidence says the projection counts the epoch begun whole, an
    upper bound. With the loop's steps_per_epoch in the config: 1/5 of an epoch exactly."""
    table = stopped_loop(tmp_path / "t.jsonl", {})
    report = audit(tmp_path, table)
    assert report["training"]["ended_within_epoch"] and report["training"]["steps"] == 1
    c5 = report["conditions"]["C5"]
    assert c5["details"]["epochs"] == 1.0
    assert "over frequency × 1 epoch (trace (epochs begun: training ended within the last, whose steps the trace " \
           "does not record, so the projection counts it whole and is an upper bound))" in c5["evidence"]
    table = stopped_loop(tmp_path / "t.jsonl", {"steps_per_epoch": 5})
    c5 = audit(tmp_path, table)["conditions"]["C5"]
    assert c5["details"]["epochs"] == 0.2 and "(1 steps taken ÷ 5 steps per epoch)" in c5["evidence"]


def test_growth_per_step_is_said_as_such(tmp_path: Path) -> None:
    """QA F11: rows 0 and 1 move by (0, 0.1) in a batch [0, 0, 1]. Knowing the rows, growth
    c/s² is per appearance: 0.01/1 ÷ 2 for row 0 and 0.01/1.01² for row 1, median their mean;
    without them (Keras, RecBole: the whole table compared) it is per step, 0.01 for row 0.
    The records say which, and C5 says a per-step growth overstates the per-appearance one."""
    for rows, basis, expected in ((torch.tensor([0, 0, 1]), "appearance", (0.005 + 0.01 / 1.01 ** 2) / 2),
                                  (None, "step", (0.01 + 0.01 / 1.01 ** 2) / 2)):
        table = torch.zeros(N, 2, dtype=torch.float64)
        table[:, 0] = 1.0 + torch.arange(N, dtype=torch.float64) / 100
        with TrainingMonitor(table, counts=np.arange(N, 0, -1), interval=1, trace=tmp_path / "t.jsonl",
                             fsync=False) as monitor:
            monitor.before_step(rows)
            table[:2, 1] += 0.1
            record = monitor.after_step()
        assert record is not None and record.growth_basis == basis
        assert record.growth_per_update == pytest.approx(expected, rel=1e-12)
        c5 = audit(tmp_path, table.numpy())["conditions"]["C5"]
        assert ("per optimizer step, not per appearance" in c5["evidence"]) is (basis == "step")


def test_the_trace_records_the_momentum_weight_decay_and_loss_the_table_does_not(tmp_path: Path) -> None:
    """QA conditions F5: a momentum run's trace (header class SGD, config momentum 0.9, loss
    infonce-cos) of a bare table made C1 unknown ("names SGD but not its momentum ...
    declare --momentum 0") and C4 "no recorded loss" beside the report's recorded_loss."""
    table = orthogonal_trace(tmp_path / "t.jsonl", {"optimizer": "momentum", "momentum": 0.9, "weight_decay": 0.0,
                                                   "loss": "cosine", "lr": 0.02})
    report = audit(tmp_path, table)
    training, c1, c4 = report["training"], report["conditions"]["C1"], report["conditions"]["C4"]
    assert training["matches_model"] and (training["recorded_momentum"], training["recorded_weight_decay"]) == (0.9, 0)
    assert c1["status"] == "violated" and "momentum 0.9" in c1["evidence"]
    assert c1["details"]["sources"]["momentum"] == "trace (config.momentum)"
    assert c4["details"]["loss"] == "cosine" and "the trace's config.loss" in c4["evidence"]
    # the plain-SGD contrast: the trace's momentum 0 and weight decay 0 settle C1 (holds)
    table = orthogonal_trace(tmp_path / "t.jsonl", {"optimizer": "sgd", "momentum": 0.0, "weight_decay": 0.0})
    assert audit(tmp_path, table)["conditions"]["C1"]["status"] == "holds"


def epochs_loop(path: Path, config: dict[str, Any], plan: list[int]) -> np.ndarray:
    """A plain loop with ``plan[e]`` steps in epoch e + 1 (0: an empty epoch, a loader that
    yielded nothing); each step moves every row at 90°."""
    table = torch.zeros(N, 2, dtype=torch.float64)
    table[:, 0] = 1.0 + torch.arange(N, dtype=torch.float64) / 100
    with TrainingMonitor(table, counts=np.arange(N, 0, -1), interval=1, trace=path, config=config,
                         fsync=False) as monitor:
        for steps in plan:
            for _ in range(steps):
                monitor.before_step(torch.arange(N))
                table[:, 1] += 0.1
                monitor.after_step()
            monitor.end_epoch()
    return table.numpy()


@pytest.mark.parametrize(("plan", "config", "epochs", "empty", "projected"), [
    # QA verify, new problem 2: training.epochs said 2 beside C5's 5 steps ÷ 5 = 1 epoch
    ([0, 5], {"steps_per_epoch": 5}, 1, [1], 1.0),
    # without steps_per_epoch, epoch 1's record (at step 0) gave none: C5 projected over 3 epochs
    ([0, 5, 5], {}, 2, [1], 2.0),
    ([5, 0, 5], {}, 2, [2], 2.0),
    ([0, 0, 5], {}, 1, [1, 2], 1.0),
    ([0, 5, 3], {}, 2, [1], 1.6),  # the steps of an epoch from the first with steps: 8 ÷ 5
])
def test_an_epoch_without_a_step_is_no_epoch_trained(tmp_path: Path, plan: list[int], config: dict[str, Any],
                                                     epochs: int, empty: list[int], projected: float) -> None:
    """An epoch record at the step its epoch began at trained nothing: the report's epochs
    and C5's projection both leave it out, as if the loop had never called end_epoch there
    (the same figures as the trace without it), and a warning names it."""
    report = audit(tmp_path, epochs_loop(tmp_path / "t.jsonl", config, plan))
    training, c5 = report["training"], report["conditions"]["C5"]
    assert training["epochs"] == epochs and training["empty_epochs"] == empty
    assert c5["details"]["epochs"] == projected and f"over frequency × {projected:g} epoch" in c5["evidence"]
    assert "× 1 epochs" not in c5["evidence"]  # QA retrain wording: one epoch is singular
    listed = ", ".join(str(e) for e in empty)
    said = [w for w in report["warnings"] if "ended without an optimizer step" in w]
    assert said == [f"--trace {tmp_path / 't.jsonl'}: epoch{'s' if len(empty) > 1 else ''} {listed} ended without an "
                    f"optimizer step (an epoch record at the step {'they' if len(empty) > 1 else 'it'} began at: a "
                    f"loader that yielded nothing?); not counted as epochs trained (the run trained {epochs} "
                    f"epoch{'s' if epochs > 1 else ''}), nor in C5's projection"]
    without = audit(tmp_path, epochs_loop(tmp_path / "t.jsonl", config, [s for s in plan if s]))
    assert without["training"]["epochs"] == epochs and without["training"]["empty_epochs"] == []
    assert without["conditions"]["C5"]["details"]["epochs"] == projected
