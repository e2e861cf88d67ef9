"""Outputs on this process's own descriptors with stdout redirected to a regular file
(QA F12): ``-o /dev/stdout > results.parquet`` renamed a temp file onto the /dev/stdout
link itself (as root: the machine's /dev/stdout gone for every later process) and left
the redirect target empty, exit 0. These tests use a link like /dev/stdout in their own
folder, and /dev/fd/1, never the machine's /dev/stdout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

FAST = ["--bootstrap", "0", "--no-probes", "-q"]


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    np.save(tmp_path / "items.npy", rng.normal(size=(30, 4)).astype(np.float32))
    items = np.repeat(np.arange(30), np.arange(1, 31))
    pq.write_table(pa.table({"user_id": np.arange(items.size) % 7, "item_id": items}), tmp_path / "log.parquet")
    (tmp_path / "m.csv").write_text("model\nitems.npy\nitems.npy\n")
    (tmp_path / "fakedev").mkdir()
    os.symlink("/proc/self/fd/1", tmp_path / "fakedev" / "stdout")  # what /dev/stdout is
    return tmp_path


def _run(folder: Path, args: list[str], stdout: Path, append: bool = False) -> subprocess.CompletedProcess[bytes]:
    with open(stdout, "ab" if append else "wb") as fh:  # `> stdout` (or `>> stdout`)
        return subprocess.run([sys.executable, "-m", "auditor", *args], cwd=folder, stdout=fh,
                              stderr=subprocess.PIPE, timeout=300, check=False)


@pytest.mark.parametrize("name", ["fakedev/stdout", "/dev/fd/1"])
def test_batch_results_on_stdout_redirected_to_a_file(folder: Path, name: str) -> None:
    done = _run(folder, ["batch", "m.csv", "-o", name, "--interactions", "log.parquet", *FAST],
                folder / "results.parquet")
    assert done.returncode == 0, done.stderr.decode()
    assert os.readlink(folder / "fakedev" / "stdout") == "/proc/self/fd/1"  # the link is still a link
    table = pq.read_table(folder / "results.parquet")  # one whole table, not one per rewrite
    assert table.column("status").to_pylist() == ["ok", "ok"]
    assert sorted(p.name for p in folder.iterdir()) == ["fakedev", "items.npy", "log.parquet", "m.csv",
                                                        "results.parquet"]


@pytest.mark.parametrize("name", ["fakedev/stdout", "/dev/fd/1"])
def test_check_json_on_stdout_appended_to_a_file(folder: Path, name: str) -> None:
    (folder / "ci.log").write_text("earlier step\n")
    done = _run(folder, ["check", "items.npy", "--interactions", "log.parquet", *FAST, "--json", name],
                folder / "ci.log", append=True)
    assert done.returncode == 0, done.stderr.decode()
    assert os.readlink(folder / "fakedev" / "stdout") == "/proc/self/fd/1"
    head, report = (folder / "ci.log").read_text().split("\n", 1)
    assert head == "earlier step" and json.loads(report)["schema_version"] == 1
