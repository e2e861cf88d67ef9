"""Batch in worker processes: parallel = serial, dead workers, a killed run resumed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from test_batch_core import calls, calls_by_pid, fake_audit, workspace, write_manifest  # noqa: F401

from auditor.batch import WORKER_DIED, run_batch
from auditor.batch.journal import journal_path, read_journal


def _comparable(path: Path) -> list[dict[str, Any]]:
    """Results without the wall-time column (the only one that differs between runs)."""
    return pq.read_table(path).drop(["seconds"]).to_pylist()


def test_parallel_equals_serial_and_reads_each_log_once_per_worker(workspace: dict[str, Any]) -> None:
    d = workspace["dir"]
    models = ["m0.npy", "m1.npy", "broken.npy", "m2.npy", "m3.npy", "m1.npy", "m0.npy"]
    logs = ["log_a.parquet", "log_b.parquet", "log_a.parquet", "log_a.parquet", "log_b.parquet", "log_b.parquet", None]
    manifest = write_manifest(d / "m.parquet", {"model": models, "interactions": logs, "k": ["5,10"] * 7})
    defaults = {"interactions": d / "log_b.parquet"}
    run_batch(manifest, d / "serial.parquet", defaults=defaults, audit_fn=fake_audit)
    (d / "calls.log").unlink()
    outcome = run_batch(manifest, d / "parallel.parquet", defaults=defaults, audit_fn=fake_audit, jobs=2)
    assert outcome.n_ok == 6 and outcome.n_error == 1
    assert _comparable(d / "parallel.parquet") == _comparable(d / "serial.parquet")
    audits = calls_by_pid(d)
    assert len(audits) == 7 and {pid for pid, _ in audits} != {os.getpid()}
    reads = calls_by_pid(d, "read")
    # Rows are grouped by log, so no worker reads a log twice (a worker that only saw
    # the broken row, which fails before reading, reads nothing).
    assert len(reads) == len(set(reads)) and 2 <= len(reads) <= 4


def test_a_killed_worker_fails_only_its_row_and_resume_reruns_it(workspace: dict[str, Any]) -> None:
    d = workspace["dir"]
    np.save(d / "killme.npy", np.load(d / "m1.npy"))
    (d / "kill.flag").write_text("")
    manifest = write_manifest(d / "m.csv", {"model": ["m0.npy", "killme.npy", "m1.npy", "m2.npy", "m3.npy"]})
    out = d / "r.parquet"
    defaults = {"interactions": d / "log_b.parquet", "ks": (10,)}
    outcome = run_batch(manifest, out, defaults=defaults, audit_fn=fake_audit, jobs=2)
    rows = pq.read_table(out).to_pylist()
    assert [r["status"] for r in rows] == ["ok", "error", "ok", "ok", "ok"]
    assert rows[1]["error"] == WORKER_DIED
    assert outcome.failures == [(1, "killme.npy", WORKER_DIED)]
    # The row beside it when the worker died was re-run, not failed.
    assert all(r["spearman"] is not None for i, r in enumerate(rows) if i != 1)
    (d / "kill.flag").unlink()
    (d / "calls.log").unlink()
    resumed = run_batch(manifest, out, defaults=defaults, audit_fn=fake_audit, jobs=2, resume=True)
    assert calls(d) == ["killme"] and resumed.n_ok == 5 and resumed.n_resumed == 4
    # killme.npy holds m1's table: same numbers.
    final = pq.read_table(out).to_pylist()
    assert final[1]["spearman"] == final[2]["spearman"]


def _finished(out: Path) -> pa.Table:
    """The rows a batch has saved: its results file with the rows of its journal."""
    rows = {r["row"]: r for r in pq.read_table(out).to_pylist() + read_journal(journal_path(out))}
    return pa.Table.from_pylist([{"row": r, "status": rec["status"]} for r, rec in sorted(rows.items())])


def test_killed_run_leaves_a_valid_file_and_resumes(workspace: dict[str, Any]) -> None:
    d = workspace["dir"]
    for i in range(6):
        np.save(d / f"slow{i}.npy", np.load(d / f"m{i % 4}.npy"))
    manifest = write_manifest(d / "m.csv", {"model": [f"slow{i}.npy" for i in range(6)]})
    out = d / "r.parquet"
    script = (
        "import sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]);"
        "from test_batch_core import fake_audit; from auditor.batch import run_batch;"
        "run_batch(Path(sys.argv[2]), Path(sys.argv[3]),"
        " defaults={'interactions': Path(sys.argv[4]), 'ks': (10,)}, audit_fn=fake_audit)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(Path(__file__).parent), str(manifest), str(out), str(d / "log_a.parquet")]
    )
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            # Always readable while the batch runs; kill once two rows are in (the file or its journal).
            if out.exists() and _finished(out).num_rows >= 2:
                break
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the batch finished before it could be killed"
    pq.read_table(out)  # a valid Parquet file after a kill
    kept = _finished(out)  # with the rows its journal holds beyond it
    assert 2 <= kept.num_rows < 6 and set(kept.column("status").to_pylist()) == {"ok"}
    done = sorted(kept.column("row").to_pylist())
    (d / "calls.log").unlink()
    outcome = run_batch(manifest, out, defaults={"interactions": d / "log_a.parquet", "ks": (10,)}, audit_fn=fake_audit, resume=True)
    assert outcome.n_resumed == len(done) and outcome.n_ok == 6
    assert sorted(calls(d)) == sorted(f"slow{i}" for i in range(6) if i not in done)
