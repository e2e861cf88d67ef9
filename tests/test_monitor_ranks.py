"""Multi-process training (QA round 4, F1): only global rank 0 watches and writes the trace,
counts must be given (a rank sees only its shard of every batch), and rank 0's stop reaches
every rank. The plain-loop policy with the process group's rank and size faked; Lightning's
DDP with two real CPU (gloo) processes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from auditor.errors import TrainingError
from auditor.monitor import TrainingMonitor, read_trace


def fake_group(monkeypatch: pytest.MonkeyPatch, rank: int, world: int) -> None:
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_rank", lambda: rank)
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda: world)


def test_a_monitor_is_made_on_rank_0_with_given_counts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    table = torch.nn.Embedding(10, 4)
    path = tmp_path / "trace.jsonl"
    fake_group(monkeypatch, 1, 2)
    with pytest.raises(TrainingError, match="process rank 1 of 2: make the monitor on rank 0 only"):
        TrainingMonitor(table, counts=np.ones(10), trace=path)
    fake_group(monkeypatch, 0, 2)
    with pytest.raises(TrainingError, match="training runs on 2 processes: running counts would count only one rank"):
        TrainingMonitor(table, trace=path)
    assert not path.exists()
    TrainingMonitor(table, counts=np.ones(10), trace=path).close()
    assert read_trace(path).complete


SCRIPT = '''
import sys, warnings
import numpy as np, torch
import lightning.pytorch as pl
from auditor.monitor.lightning import PopauditCallback

rng = np.random.default_rng(0)
items = torch.from_numpy(np.minimum(rng.zipf(1.3, 2048) - 1, 59))
users = torch.from_numpy(rng.integers(0, 40, 2048))

class TwoTower(pl.LightningModule):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.user_embedding, self.item_embedding = torch.nn.Embedding(40, 8), torch.nn.Embedding(60, 8)
    def training_step(self, batch, batch_idx):
        u = torch.nn.functional.normalize(self.user_embedding(batch[0]), dim=1)
        q = torch.nn.functional.normalize(self.item_embedding(batch[1]), dim=1)
        return torch.nn.functional.cross_entropy(u @ q.T / 0.1, torch.arange(len(u)))
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=5.0)

given = sys.argv[1] == "given"
options = {"counts": np.bincount(items.numpy(), minlength=60)} if given else {}
callback = PopauditCallback("item_embedding", batch_items=lambda b: b[1], interval=3, trace="trace.jsonl",
                            alerts=["angle_share_90_1>0.9"], on_alert="stop", **options)
trainer = pl.Trainer(max_epochs=2, accelerator="cpu", devices=2, strategy="ddp", callbacks=[callback], logger=False,
                     enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(users, items), batch_size=64)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    trainer.fit(TwoTower(), data)
print(f"rank {trainer.global_rank} step {trainer.global_step} monitor {callback.monitor is not None}", flush=True)
'''


@pytest.mark.slow
def test_lightning_ddp_writes_one_trace_from_rank_0(tmp_path: Path) -> None:
    """Two gloo processes, 16 steps an epoch each (2,048 rows, batches of 64 per rank): rank 0
    alone writes a readable trace; the angle alert at the first record (step 3: plain SGD on a cosine loss) stops both ranks
    there; the angles compare the whole table (basis step: rank 0 sees only its rows)."""
    script = tmp_path / "ddp.py"
    script.write_text(textwrap.dedent(SCRIPT))
    done = subprocess.run([sys.executable, str(script), "given"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rank 0 step 3 monitor True" in done.stdout and "rank 1 step 3 monitor False" in done.stdout
    trace = read_trace(tmp_path / "trace.jsonl")
    assert trace.complete and [r.step for r in trace.steps] == [3] and trace.steps[0].n_counted == 2048
    # Lightning deals the rows by a shuffled DistributedSampler (seed 0): step 3 moved both ranks' third batches
    items = np.minimum(np.random.default_rng(0).zipf(1.3, 2048) - 1, 59)
    dealt = [list(torch.utils.data.DistributedSampler(range(2048), num_replicas=2, rank=r, seed=0))[128:192] for r in (0, 1)]
    both, rank_0 = np.unique(items[dealt[0] + dealt[1]]), np.unique(items[dealt[0]])
    assert trace.steps[0].growth_basis == "step" and trace.steps[0].angle_share_90_1 == 1.0
    assert trace.steps[0].angle_n == both.size == 28 and rank_0.size == 19  # not only rank 0's rows
    assert trace.end is not None and trace.end.reason == "stopped by alert angle_share_90_1>0.9 at step 3"
    (tmp_path / "trace.jsonl").unlink()
    done = subprocess.run([sys.executable, str(script), "running"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "running counts would count only one rank's shard" in done.stderr
    assert not (tmp_path / "trace.jsonl").exists()


def test_under_several_processes_a_plain_loop_compares_the_whole_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """QA 11 monitor F3: rank 0 is given its own batch rows (2, 5, 5), but the all-reduced step
    also moves row 7, another rank's. Rows along e_1 with norms i + 1, each moved 0.5 across
    e_1: growth ‖Δq‖²/‖q‖² = 0.25/(i+1)². The whole table compared, per step (as the Lightning
    callback does): 3 rows, median 0.25/36. Per rank-0 appearance it was 2 rows,
    median(0.25/9, 0.25/36/2) and growth_basis 'appearance'."""
    def run() -> tuple[int, float | None, str | None]:
        table = torch.zeros(10, 4, dtype=torch.float64)
        table[:, 0] = torch.arange(1, 11, dtype=torch.float64)
        monitor = TrainingMonitor(table, counts=np.ones(10), interval=1, n_queries=3)
        with monitor.step(torch.tensor([2, 5, 5])):
            table[[2, 5, 7], 1] += 0.5
        record = monitor.records[-1]
        assert record.angle_median == 90.0
        return record.angle_n, record.growth_per_update, record.growth_basis

    alone = run()  # one process: the batch's rows, per appearance
    assert alone == (2, pytest.approx(np.median([0.25 / 9, 0.25 / 36 / 2]), rel=1e-12), "appearance")
    fake_group(monkeypatch, 0, 2)
    assert run() == (3, pytest.approx(0.25 / 36, rel=1e-12), "step")


def test_a_monitor_made_before_the_process_group_is_judged_by_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """QA 11 monitor N2: a monitor made before ``init_process_group`` (no launcher variables)
    took one process for good: rank 0's rows per appearance (basis 'appearance', 2 rows), and no
    rank check. The group is asked again at the first step: the whole table (3 rows, 'step')."""
    for name in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    table = torch.zeros(10, 4, dtype=torch.float64)
    table[:, 0] = torch.arange(1, 11, dtype=torch.float64)
    monitor = TrainingMonitor(table, counts=np.ones(10), interval=1, n_queries=3)
    assert monitor.processes == 1
    fake_group(monkeypatch, 0, 2)  # init_process_group, after the monitor
    with monitor.step(torch.tensor([2, 5, 5])):
        table[[2, 5, 7], 1] += 0.5
    record = monitor.records[-1]
    assert monitor.processes == 2
    assert (record.angle_n, record.growth_basis) == (3, "step")  # was (2, 'appearance')
    assert record.growth_per_update == pytest.approx(0.25 / 36, rel=1e-12)


def test_a_monitor_made_before_the_group_on_another_rank_is_refused_at_its_first_step(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "trace.jsonl"
    monitor = TrainingMonitor(torch.nn.Embedding(10, 4), counts=np.ones(10), interval=1, trace=path)
    fake_group(monkeypatch, 1, 2)
    with pytest.raises(TrainingError, match="process rank 1 of 2: make the monitor on rank 0 only"):
        monitor.before_step(torch.tensor([1]))  # was accepted: the check ran only when it was made
    trace = read_trace(path)
    assert trace.end is not None and trace.end.reason.startswith("error: TrainingError: this is process rank 1 of 2")
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: False)  # the same rule for running counts
    running = TrainingMonitor(torch.nn.Embedding(10, 4), interval=0)
    fake_group(monkeypatch, 0, 2)
    with pytest.raises(TrainingError, match="training runs on 2 processes: running counts"):
        running.end_epoch()


def test_torchruns_variables_stand_in_before_the_group_exists(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Under torchrun (RANK, WORLD_SIZE set), a monitor made before the group is refused on
    another rank before anything is written, as one made after it."""
    path = tmp_path / "trace.jsonl"
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(TrainingError, match="process rank 1 of 2: make the monitor on rank 0 only"):
        TrainingMonitor(torch.nn.Embedding(10, 4), counts=np.ones(10), trace=path)
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(TrainingError, match="training runs on 2 processes: running counts"):
        TrainingMonitor(torch.nn.Embedding(10, 4), trace=path)
    assert not path.exists()
    assert TrainingMonitor(torch.nn.Embedding(10, 4), counts=np.ones(10)).processes == 2
