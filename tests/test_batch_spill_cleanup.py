"""A streamed item table's temporary ``.npy`` never outlives the batch row that made it.

A table larger than ``max_memory`` is streamed to a file in ``$TMPDIR`` as large as the
table (README, ``--max-memory``: "deleted afterwards"). A worker process that dies runs
no clean-up, so the pool removes what its dead workers left: at once when
``--row-timeout`` kills a row or a row crashes its worker (before the next row runs),
and when the pool ends, Ctrl-C included. A row that fails with an exception frees its
table as it is recorded, not at the worker's next garbage collection. The same holds
for the forked child a plugin ``check`` audits in, when Ctrl-C kills it.

The runs are real ``python -m auditor batch`` processes with their own ``$TMPDIR``
(the workers fork from a server that inherits it). A measure plugin makes the 5,000-row
table's audit sleep, crash or raise (``SPILL_MODE``), and records what the temporary
folder holds when the small table is audited.
"""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from auditor.batch.jobs import build_jobs
from auditor.batch.manifest import read_manifest
from auditor.batch.workers import audit_job
from auditor.memory import SPILL_PREFIX

BIG_ROWS = 5000
"""Rows of the streamed table: 5,000 x 4 float32 is 80,000 bytes, over its 40K ceiling."""

PLUGIN = f'''
import os, tempfile, time
from auditor.hookspecs import hookimpl


class Measure:
    name = "spill_probe"
    description = "misbehaves on the streamed table; notes the temporary folder on the small one"

    def compute(self, bundle, stats, result):
        if bundle.n_items == {BIG_ROWS}:
            mode = os.environ.get("SPILL_MODE", "sleep")
            if mode == "exit":
                os._exit(3)
            if mode == "raise":
                raise MemoryError("out of memory in the measure")
            time.sleep(600)
        with open(os.environ["SPILL_NOTES"], "a") as fh:
            fh.write(" ".join(sorted(os.listdir(tempfile.gettempdir()))) + "\\n")
        return 1.0


@hookimpl
def popaudit_measures():
    return [Measure()]
'''


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """items.npy (10 rows), big.npy (float64, converted: streamed under a 40K ceiling), a
    log, the plugin and a $TMPDIR (short: the pool's socket lives there)."""
    rng = np.random.default_rng(0)
    np.save(tmp_path / "items.npy", rng.normal(size=(10, 4)).astype(np.float32))
    np.save(tmp_path / "big.npy", rng.normal(size=(BIG_ROWS, 4)))
    items = np.repeat(np.arange(10), np.arange(1, 11))
    pq.write_table(pa.table({"user_id": items % 5, "item_id": items}), tmp_path / "log.parquet")
    (tmp_path / "probe.py").write_text(PLUGIN, encoding="utf-8")
    (tmp_path / "m.csv").write_text("model,max_memory\nbig.npy,40K\nitems.npy,\n", encoding="utf-8")
    return tmp_path


def _tmpdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="spill-", dir="/tmp" if os.access("/tmp", os.W_OK) else None))


def _batch(*extra: str) -> list[str]:
    return [sys.executable, "-m", "auditor", "batch", "m.csv", "-o", "r.parquet", "--interactions", "log.parquet",
            "--bootstrap", "0", "--no-probes", "-q", "--plugin", "probe.py", *extra]


def _env(folder: Path, tmpdir: Path, mode: str) -> dict[str, str]:
    return {**os.environ, "TMPDIR": str(tmpdir), "SPILL_MODE": mode, "SPILL_NOTES": str(folder / "notes.txt")}


def _spills(names: str) -> list[str]:
    return [name for name in names.split() if name.startswith(SPILL_PREFIX)]


@pytest.mark.parametrize(("mode", "jobs", "extra", "error"), [
    ("sleep", "1", ("--row-timeout", "2"), "RowTimeout: the audit ran longer than --row-timeout 2 s"),
    ("exit", "1", (), "the worker process died while auditing this row"),
    ("exit", "2", (), "the worker process died while auditing this row"),
])
def test_a_dead_workers_table_file_is_removed_before_the_next_row(
    folder: Path, mode: str, jobs: str, extra: tuple[str, ...], error: str
) -> None:
    tmpdir = _tmpdir()
    try:
        done = subprocess.run([*_batch("-j", jobs, *extra)], cwd=folder,
                              env=_env(folder, tmpdir, mode), capture_output=True, text=True, timeout=120)
        left = sorted(os.listdir(tmpdir))
    finally:
        subprocess.run(["rm", "-rf", str(tmpdir)], check=False)
    assert done.returncode == 0, done.stderr
    rows = pq.read_table(folder / "r.parquet").to_pylist()
    assert [r["status"] for r in rows] == ["error", "ok"] and error in rows[0]["error"], rows
    assert left == []  # before: the dead worker's 80,128-byte popaudit-table-<pid>-*.npy stayed
    if jobs == "1":  # the small row ran after the big one, in a fresh pool: the file was gone by then
        assert _spills((folder / "notes.txt").read_text()) == []


def _ctrl_c_once_streaming(command: list[str], folder: Path) -> tuple[list[str], int, str, list[str]]:
    """Run ``command`` with its own $TMPDIR and press Ctrl-C once its table file is written (the
    measure then sleeps): (the table files seen, exit code, stderr, what is left in $TMPDIR)."""
    tmpdir = _tmpdir()
    proc = subprocess.Popen(command, cwd=folder, env=_env(folder, tmpdir, "sleep"), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not _spills(" ".join(os.listdir(tmpdir))) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        streaming = _spills(" ".join(os.listdir(tmpdir)))
        time.sleep(0.5)  # the table is written and the measure sleeps
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C sends
        stderr = proc.communicate(timeout=60)[1]
        left = sorted(os.listdir(tmpdir))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        subprocess.run(["rm", "-rf", str(tmpdir)], check=False)
    return streaming, proc.returncode, stderr, left


def test_ctrl_c_during_a_streamed_row_at_j2_leaves_no_table_file(folder: Path) -> None:
    streaming, returncode, stderr, left = _ctrl_c_once_streaming(_batch("-j", "2"), folder)
    assert len(streaming) == 1, streaming
    assert returncode == 130 and "Error: interrupted:" in stderr, stderr
    assert left == []  # before: the killed worker's table file stayed


def test_a_failed_rows_table_file_goes_as_the_row_is_recorded(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The exception's traceback holds the audit's frames (and so the table) in a
    reference cycle: without its frames cleared, the file would stay until the worker's
    next garbage collection (at -j N, maybe the end of the batch)."""
    tmpdir = _tmpdir()
    monkeypatch.chdir(folder)
    monkeypatch.setattr(tempfile, "tempdir", str(tmpdir))
    monkeypatch.setenv("SPILL_MODE", "raise")
    monkeypatch.setenv("SPILL_NOTES", str(folder / "notes.txt"))
    jobs = build_jobs(read_manifest(Path("m.csv")), {
        "interactions": Path("log.parquet"), "bootstrap": 0, "probes": False, "plugins": (Path("probe.py"),),
    })
    gc.disable()  # what an idle worker does: no allocations, no collection
    try:
        record = audit_job(jobs[0])
        left = sorted(os.listdir(tmpdir))
    finally:
        gc.enable()
        subprocess.run(["rm", "-rf", str(tmpdir)], check=False)
    assert record["status"] == "error" and "MemoryError: out of memory in the measure" in record["error"], record
    assert left == []  # before: ['popaudit-table-<pid>-*.npy'] until the next gc.collect()


def test_ctrl_c_during_a_plugin_checks_streamed_audit_leaves_no_table_file(folder: Path) -> None:
    """``check`` with a plugin audits in a forked child that Ctrl-C kills (it ignores
    SIGINT and would end by os._exit anyway): the parent removes what it streamed."""
    command = [sys.executable, "-m", "auditor", "check", "big.npy", "--interactions", "log.parquet", "--bootstrap", "0",
               "--no-probes", "-q", "--max-memory", "40K", "--plugin", "probe.py"]
    streaming, returncode, stderr, left = _ctrl_c_once_streaming(command, folder)
    assert len(streaming) == 1, streaming
    assert returncode == 130 and "Error: interrupted" in stderr, stderr
    assert left == []  # before: the killed child's popaudit-table-<pid>-*.npy stayed
