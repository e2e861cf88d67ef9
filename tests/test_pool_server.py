"""The forkserver pools fork from (auditor/pool_server.py) and a batch's start-up with it
(auditor/batch/preload.py): started early, deaf to Ctrl-C while it imports, killed when
the process that started it exits; its preloaded modules are what a worker's row imports.

Each test runs a small script in a fresh process (a forkserver is per process), marked by
an environment variable so that only this run's processes are looked for and cleaned up.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from test_batch_isolation import MARKER, cleanup, marked_processes, wait_for


ROOT = Path(__file__).parents[1]


@pytest.fixture()
def marked(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A folder with a preload module that takes long to import (it says when it began
    and, if ever, when it finished), and an environment that marks this run's processes."""
    (tmp_path / "slow_preload.py").write_text(textwrap.dedent(f"""
        import pathlib, time
        pathlib.Path({str(tmp_path / 'began')!r}).touch()
        time.sleep(20)
        pathlib.Path({str(tmp_path / 'finished')!r}).touch()
    """))
    token = uuid.uuid4().hex
    path = os.pathsep.join(filter(None, [str(ROOT), str(tmp_path), os.environ.get("PYTHONPATH")]))
    yield {"dir": tmp_path, "token": token, "env": {**os.environ, MARKER: token, "PYTHONPATH": path}}
    cleanup(token)


def _script(body: str, preload: str = "slow_preload") -> list[str]:
    """A python command line that starts a forkserver preloading ``preload`` (the slow
    module: waits until its import began), then runs ``body``."""
    head = textwrap.dedent(f"""
        import pathlib, sys, time
        from auditor.pool_server import start_server
        start_server([{preload!r}])
        began = pathlib.Path(sys.argv[1]) / "began"
        while {preload == "slow_preload"} and not began.exists():
            time.sleep(0.02)
    """)
    return [sys.executable, "-c", head + textwrap.dedent(body)]


def _servers(token: str) -> list[str]:
    return [cmd for cmd in marked_processes(token).values() if "forkserver" in cmd]


def test_a_server_still_importing_is_killed_when_its_starter_exits(marked: dict[str, Any]) -> None:
    d = marked["dir"]
    start = time.monotonic()
    # Output read through pipes: the command is over only when no process holds them.
    done = subprocess.run([*_script("print('started')"), str(d)], capture_output=True, text=True,
                          env=marked["env"], timeout=60)
    took = time.monotonic() - start
    assert done.returncode == 0 and done.stdout == "started\n", done.stderr
    assert took < 15, took  # not the 20 s the server's import would still take
    assert _servers(marked["token"]) == []  # reaped before the starter exited
    assert not (d / "finished").exists()


def test_the_server_outlives_its_starter_while_a_process_it_forked_runs(marked: dict[str, Any]) -> None:
    """A process started through the server reports its exit status through it: exiting,
    the starter still waits for such a (non-daemon) process, as multiprocessing does."""
    d = marked["dir"]
    (d / "late_child.py").write_text("import pathlib, time\ndef run(path):\n    time.sleep(1)\n    pathlib.Path(path).touch()\n")
    body = f"""
        import multiprocessing, late_child
        multiprocessing.get_context("forkserver").Process(target=late_child.run, args=({str(d / 'child_done')!r},)).start()
    """
    with open(d / "stderr.txt", "wb") as err:  # not a pipe: the child would hold it open
        done = subprocess.run([*_script(body, preload="late_child"), str(d)], stdout=subprocess.DEVNULL, stderr=err,
                              env=marked["env"], timeout=60)
    assert done.returncode == 0, (d / "stderr.txt").read_text()
    assert (d / "child_done").exists()  # waited for
    assert wait_for(lambda: not _servers(marked["token"]), 10)  # then the server exits by itself


def test_ctrl_c_while_the_server_imports_is_left_to_the_main_process(marked: dict[str, Any]) -> None:
    d = marked["dir"]
    body = """
        try:
            print("ready", flush=True)
            time.sleep(30)
        except KeyboardInterrupt:
            time.sleep(1)  # a server that took the Ctrl-C too would have printed its traceback by now
            print("interrupted", flush=True)
            sys.exit(130)
    """
    proc = subprocess.Popen([*_script(body), str(d)], env=marked["env"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        assert _servers(marked["token"]), "the server runs, still importing"
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole group
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, (stdout, stderr)
    assert stdout == b"interrupted\n"
    assert stderr == b"", stderr.decode()  # no traceback from the server
    assert _servers(marked["token"]) == [] and not (d / "finished").exists()


def test_a_batch_that_fails_before_any_row_leaves_no_server_behind(marked: dict[str, Any]) -> None:
    """``popaudit batch`` starts its workers' server first; an error in the manifest ends
    the command at once, the server's imports cut short."""
    d = marked["dir"]
    (d / "m.csv").write_text("model,colour\nm.npy,red\n")  # an unknown column
    done = subprocess.run([sys.executable, "-m", "auditor", "batch", str(d / "m.csv"), "-o", str(d / "r.parquet")],
                          capture_output=True, text=True, env=marked["env"], timeout=120)
    assert done.returncode == 1 and done.stderr.startswith("Error: "), done.stderr
    assert "colour" in done.stderr and "Traceback" not in done.stderr
    assert _servers(marked["token"]) == []
    assert not (d / "r.parquet").exists()


@pytest.mark.slow
def _first_row_imports(tmp_path: Path, manifest: str, preloaded: str) -> tuple[str, str | None, list[str], bool]:
    """(status, error, heavy modules imported, whether torch was loaded) of a worker that
    imported ``preloaded`` (as the server does) and then audits the first row of ``manifest``
    (a CSV in ``tmp_path``) against ``tmp_path/log.parquet``."""
    (tmp_path / "m.csv").write_text(manifest)
    script = textwrap.dedent(f"""
        import gc, json, sys
        from pathlib import Path
        import {preloaded}  # what the server imports
        assert gc.get_freeze_count() > 10_000, gc.get_freeze_count()  # what it built is frozen
        from auditor.batch.jobs import build_jobs
        from auditor.batch.manifest import read_manifest
        from auditor.batch.workers import audit_job
        defaults = {{"interactions": Path({str(tmp_path / 'log.parquet')!r}), "ks": (5,), "bootstrap": 0,
                     "probes": False, "max_queries": 20}}
        job = build_jobs(read_manifest(Path({str(tmp_path / 'm.csv')!r})), defaults)[0]
        before = set(sys.modules)
        record = audit_job(job)
        heavy = ("auditor", "torch", "numpy", "pyarrow", "scipy", "sklearn", "faiss", "pluggy", "matplotlib")
        print(json.dumps([record["status"], record["error"], sorted(m for m in set(sys.modules) - before
                                                                  if m.split(".")[0] in heavy),
                          "torch" in sys.modules]))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    status, error, imported, torch_loaded = json.loads(done.stdout.splitlines()[-1])
    return status, error, imported, torch_loaded


def _log(tmp_path: Path) -> np.random.Generator:
    rng = np.random.default_rng(0)
    pq.write_table(pa.table({"user_id": rng.integers(0, 30, 400), "item_id": rng.integers(0, 50, 400)}),
                   tmp_path / "log.parquet")
    return rng


def test_the_preloaded_modules_are_what_a_workers_row_imports(tmp_path: Path) -> None:
    """A worker forked from the server imports nothing heavy for its first row (an
    ``.npy`` table against a Parquet log, as bench_batch.py audits): each such import
    would be paid by every worker, after the server's imports rather than during them.
    What the server imported is frozen out of the collector's walks."""
    rng = _log(tmp_path)
    np.save(tmp_path / "m.npy", rng.standard_normal((50, 8)).astype(np.float32))
    status, error, imported, torch_loaded = _first_row_imports(tmp_path, "model\nm.npy\n", "auditor.batch.preloaded")
    assert (status, error, torch_loaded) == ("ok", None, True)
    assert imported == [], f"add these to auditor/batch/preload.py's WORKER_MODULES: {imported}"


def test_a_batch_of_served_lists_alone_preloads_no_torch(tmp_path: Path) -> None:
    """A manifest whose rows audit served lists alone: its server imports what such a row
    needs and no torch (seconds every such batch paid before its first row), and the row
    then imports nothing heavy either."""
    rng = _log(tmp_path)
    users = np.repeat(np.arange(30), 5)
    items = np.concatenate([rng.choice(50, 5, replace=False) for _ in range(30)])
    pq.write_table(pa.table({"user_id": users, "item_id": items, "rank": np.tile(np.arange(1, 6), 30)}),
                   tmp_path / "recs.parquet")
    manifest = "recommendations\nrecs.parquet\n"
    status, error, imported, torch_loaded = _first_row_imports(tmp_path, manifest, "auditor.batch.preloaded_lists")
    assert (status, error, torch_loaded) == ("ok", None, False)
    assert imported == [], f"add these to auditor/batch/preload.py's LIST_WORKER_MODULES: {imported}"
