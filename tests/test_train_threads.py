"""torch's thread default for training (auditor/train/threads.py, with the usable cores of
auditor/parallel.py) and --threads."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from auditor import parallel
from auditor.cli import cli
from auditor.train import threads


def test_usable_cores_follow_affinity_and_the_cgroup_quota(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5})
    quota = tmp_path / "cpu.max"
    monkeypatch.setattr(parallel, "CGROUP_CPU_MAX", quota)
    assert parallel.usable_cores() == 6  # no cgroup file
    quota.write_text("max 100000\n")
    assert parallel.usable_cores() == 6  # unlimited
    quota.write_text("250000 100000\n")
    assert parallel.usable_cores() == 3  # 2.5 cores of quota: 3 threads
    quota.write_text("garbage\n")
    assert parallel.usable_cores() == 6


def test_default_threads_cap_and_share_among_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    monkeypatch.setattr(threads, "usable_cores", lambda: 64)
    assert threads.default_threads() == threads.MAX_DEFAULT_THREADS == 8
    assert threads.default_threads(jobs=2) == 4 and threads.default_threads(jobs=16) == 1
    monkeypatch.setattr(threads, "usable_cores", lambda: 3)
    assert threads.default_threads() == 3 and threads.default_threads(jobs=2) == 1
    assert threads.default_threads(jobs=8) == 1  # never 0


def test_busy_cores_are_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    monkeypatch.setattr(threads, "usable_cores", lambda: 16)
    monkeypatch.setattr(os, "getloadavg", lambda: (12.0, 0.0, 0.0))  # 12 of 16 cores busy
    assert threads.idle_cores() == 4 and threads.default_threads() == 4
    monkeypatch.setattr(os, "getloadavg", lambda: (40.0, 0.0, 0.0))  # overloaded: still one thread
    assert threads.idle_cores() == 1 and threads.default_threads() == 1
    monkeypatch.setattr(threads, "usable_cores", lambda: 4)  # pinned to 4 of 16 cores, machine half busy
    monkeypatch.setattr(os, "getloadavg", lambda: (8.0, 0.0, 0.0))
    assert threads.idle_cores() == 2


def test_set_threads_sets_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    before = torch.get_num_threads()
    try:
        assert threads.set_threads(1) == 1 and torch.get_num_threads() == 1
        monkeypatch.setattr(threads, "idle_cores", lambda: 2)
        assert threads.set_threads(None) == 2 and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_retrain_threads_option(tmp_path: Path) -> None:
    before = torch.get_num_threads()
    try:
        res = CliRunner().invoke(cli, ["retrain", "--n-users", "20", "--n-items", "10", "--n-interactions", "100",
                                       "--epochs", "1", "--threads", "1", "-o", str(tmp_path / "m.pt")])
        assert res.exit_code == 0, res.output
        assert "(1 thread)" in res.output
    finally:
        torch.set_num_threads(before)
    res = CliRunner().invoke(cli, ["retrain", "--help"])
    assert "--threads" in res.output and "affinity" in res.output
    res = CliRunner().invoke(cli, ["retrain", "--threads", "0"])
    assert res.exit_code == 2
