"""The end record of a run that diverged says how many item rows were NaN or infinite at the
end, not only at the first record that found any (QA 11 monitor F4: "58 item rows … from step 5"
where 397 of 400 had diverged by the end)."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
import torch

from auditor.monitor import TrainingMonitor, read_trace


def test_the_end_record_gives_the_last_records_count_and_the_first_step(tmp_path: Path) -> None:
    # 40 rows; one more row goes NaN or infinite at each of steps 2..5 after 3 at step 2: 3, 4, 5, 6.
    table = torch.ones(40, 4, dtype=torch.float64) * torch.arange(1, 41, dtype=torch.float64)[:, None]
    path = tmp_path / "t.jsonl"
    monitor = TrainingMonitor(table, counts=np.arange(40.0), interval=1, trace=path, fsync=False)
    bad = {2: [0, 1, 2], 3: [3], 4: [4], 5: [5]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TrainingDivergedWarning at step 2
        for step in range(1, 6):
            with monitor.step(torch.tensor([7])):
                table[7, 1] += 0.1
                for row in bad.get(step, []):
                    table[row, 0] = math.nan if row % 2 else math.inf
        monitor.end_epoch()
    monitor.close()
    trace = read_trace(path)
    assert [r.n_nonfinite for r in trace.steps] == [0, 3, 4, 5, 6] and trace.epochs[0].n_nonfinite == 6
    assert monitor.diverged == (2, 3)
    assert trace.end is not None and trace.end.step == 5
    assert trace.end.reason == ("completed; training diverged: 6 of 40 item rows NaN or infinite at the last record "
                                "(step 5); first at step 2 (3 rows)")  # was "3 item rows … from step 2"


def test_a_run_that_diverged_at_its_only_record_says_so_once(tmp_path: Path) -> None:
    table = torch.eye(5, dtype=torch.float64)
    table[4, 0] = math.inf
    path = tmp_path / "t.jsonl"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with TrainingMonitor(table, counts=np.arange(5.0), interval=0, trace=path) as monitor:
            monitor.end_epoch()
    end = read_trace(path).end
    assert end is not None and end.reason == ("completed; training diverged: 1 of 5 item rows NaN or infinite at "
                                              "step 0, the last record and the first to find any")
