"""Independent runs in worker processes (auditor/train/grid.py): order, one progress
display, errors. The run functions live here, in a module that imports little, so
spawned workers start quickly."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from auditor.errors import InputError
from auditor.progress import Progress
from auditor.train.grid import run_tasks


class _Recording(Progress):
    def __init__(self) -> None:
        self.tracks: list[tuple[str, float | None]] = []
        self.advanced = 0.0

    @contextmanager
    def track(self, description: str, total: float | None = None) -> Iterator[Callable[[float], None]]:
        self.tracks.append((description, total))

        def advance(n: float = 1) -> None:
            self.advanced += n

        yield advance


def _square(shared: int, task: int) -> tuple[int, int]:
    return task * task + shared, os.getpid()


@pytest.mark.slow  # two workers import torch (a few seconds)
def test_run_tasks_keeps_task_order_in_workers_with_one_display() -> None:
    progress = _Recording()
    out = run_tasks(_square, [3, 1, 2, 5], shared=10, jobs=2, threads=1, progress=progress, description="grid")
    assert [value for value, _ in out] == [19, 11, 14, 35]
    assert os.getpid() not in {pid for _, pid in out}  # ran in worker processes
    assert progress.tracks == [("grid", 4)] and progress.advanced == 4


def test_run_tasks_inline() -> None:
    progress = _Recording()
    inline = run_tasks(_square, [3, 1], shared=0, jobs=1, progress=progress)
    assert [v for v, _ in inline] == [9, 1] and {pid for _, pid in inline} == {os.getpid()}
    assert progress.tracks == [("runs", 2)] and progress.advanced == 2
    with pytest.raises(InputError, match="jobs"):
        run_tasks(_square, [1], jobs=0)


def _fail_on_two(shared: None, task: int) -> int:
    if task == 2:
        raise InputError("run 2 failed")
    return task


@pytest.mark.slow
def test_a_failing_run_stops_the_grid_with_its_error() -> None:
    with pytest.raises(InputError, match="run 2 failed"):
        run_tasks(_fail_on_two, [1, 2, 3], jobs=2, threads=1)
