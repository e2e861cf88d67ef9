"""Step records carry the loss (QA round 4, F9): ``monitor.step(items, loss=...)`` in a plain
loop and ``retrain``, so a loss alert (a divergence guard) fires at the step that met it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from click.testing import CliRunner

from auditor.cli import cli
from auditor.monitor import TrainingMonitor, read_trace


def test_the_step_context_takes_the_batch_loss(tmp_path: Path) -> None:
    torch.manual_seed(0)
    table = torch.nn.Embedding(20, 4)
    opt = torch.optim.SGD(table.parameters(), lr=0.5)
    items = torch.from_numpy(np.random.default_rng(0).integers(0, 20, (6, 8)))
    losses = []
    with TrainingMonitor(table, optimizer=opt, counts=np.ones(20), interval=3, trace=tmp_path / "t.jsonl") as monitor:
        for batch in items:
            loss = (1 - torch.nn.functional.normalize(table(batch), dim=1)[:, 0]).mean()
            opt.zero_grad()
            loss.backward()
            losses.append(float(loss))
            with monitor.step(batch, loss=loss.detach()):
                opt.step()
    assert [(r.step, r.loss) for r in read_trace(tmp_path / "t.jsonl").steps] == [(3, losses[2]), (6, losses[5])]


def test_retrain_stops_on_a_loss_alert_at_the_step(tmp_path: Path) -> None:
    """``--alert 'loss>0' --on-alert stop`` with a record every 10 steps stops at step 10
    (every InfoNCE loss is above 0), not at the end of the first epoch (79 steps)."""
    trace = tmp_path / "rt.jsonl"
    done = CliRunner().invoke(cli, ["retrain", "--data", "synthetic", "--n-users", "300", "--n-items", "500",
                                    "--n-interactions", "20000", "--epochs", "3", "--trace", str(trace),
                                    "--trace-every", "10", "--alert", "loss>0", "--on-alert", "stop",
                                    "-o", str(tmp_path / "m.pt"), "-q"])
    assert done.exit_code == 0, done.output
    read = read_trace(trace)
    assert [(a.step, a.metric) for a in read.alerts] == [(10, "loss")] and read.steps[0].loss > 0
    assert read.end is not None and read.end.reason == "stopped by alert loss>0 at step 10"
