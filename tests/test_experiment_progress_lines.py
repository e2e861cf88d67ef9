"""F5: off a terminal (CI logs) an experiment prints a line per finished run, however fast,
through the one progress module (before: a grid of sub-second runs printed nothing)."""

from __future__ import annotations

import io
import re
from pathlib import Path

from click.testing import CliRunner
from rich.console import Console

from auditor.cli import cli
from auditor.cli._progress import PlainLines, RichProgress
from auditor.progress import SILENT
from auditor.train.grid import run_tasks


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _square(_shared: object, task: int) -> int:
    return task * task


def test_fast_runs_print_a_line_each_off_a_terminal() -> None:
    stream = io.StringIO()
    progress = RichProgress(console=Console(file=stream, force_terminal=False))
    assert run_tasks(_square, [1, 2, 3, 4], progress=progress, description="experiment demo") == [1, 4, 9, 16]
    lines = [line.split("] ", 1)[1] for line in stream.getvalue().splitlines()]
    assert [line.split(",")[0] for line in lines] == [
        "experiment demo: 1/4 (25%)", "experiment demo: 2/4 (50%)", "experiment demo: 3/4 (75%)", "experiment demo: 4/4 (100%)",
    ]  # before: none (4 runs in well under a second)
    assert run_tasks(_square, [5], progress=SILENT) == [25]  # the silent default keeps working


def test_a_tasks_threshold_does_not_change_other_tracks() -> None:
    clock = Clock()
    lines: list[str] = []
    plain = PlainLines(lines.append, interval=10.0, task_seconds=1.0, clock=clock)
    with plain.track("reading", total=100) as advance:  # fast units of an ordinary track: throttled
        for _ in range(100):
            clock.now += 0.01
            advance(1)
    with plain.track("runs", total=2, task_seconds=0.0) as advance:
        for _ in range(2):
            clock.now += 0.01
            advance(1)
    assert [line.split("] ", 1)[1].split(",")[0] for line in lines] == ["runs: 1/2 (50%)", "runs: 2/2 (100%)"]


def test_experiment_prints_a_line_per_run_to_a_log(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, [
        "experiment", "conditions", "--n-users", "30", "--n-items", "20", "--n-interactions", "200", "--epochs", "1",
        "--seeds", "1", "--settings", "reference,adam,momentum", "--threads", "1", "-o", str(tmp_path / "grid"),
    ])
    assert result.exit_code == 0, result.output
    runs = re.findall(r"^\[\d\d:\d\d:\d\d\] experiment conditions: (\d)/3 ", result.stderr, re.M)
    assert runs == ["1", "2", "3"], result.stderr
