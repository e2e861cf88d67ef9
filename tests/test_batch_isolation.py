"""Rows run isolated from the main process, workers die with it, Ctrl-C says what to do.

The end-to-end tests run the real command (``python -m auditor batch``) in a subprocess
whose audits a small ``--plugin`` file makes slow (its model loader sleeps while a flag
file exists), then kill or interrupt it. Processes of a run are found by a marker in
their environment, which every descendant inherits.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from test_batch_cli import runner  # noqa: F401
from test_batch_core import calls, calls_by_pid, fake_audit, make_log, make_table, workspace, write_manifest  # noqa: F401

from auditor.batch import WORKER_DIED, run_batch
from auditor.cli import cli
from auditor.config import AuditConfig

MARKER = "POPAUDIT_TEST_RUN"

SLOW_PLUGIN = '''
"""Test plugin: models named slow* load slowly while slow.flag exists; every load is logged."""
import os
import time
from pathlib import Path

from auditor.hookspecs import hookimpl


@hookimpl
def popaudit_load_model(path, options):
    path = Path(path)
    with open(path.parent / "started.log", "a", encoding="utf-8") as fh:
        fh.write(f"{os.getpid()} {path.stem}\\n")
    if path.name.startswith("slow") and (path.parent / "slow.flag").exists():
        time.sleep(120)
    return None
'''


def snapshot(folder: Path, skip: tuple[str, ...] = ()) -> dict[str, str]:
    return {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name not in skip
    }


def exiting_audit(config: AuditConfig, *, pm: Any = None, progress: Any = None, cache: Any = None) -> Any:
    """fake_audit, except that a model named exit* ends its process with os._exit(1)."""
    if Path(config.model).stem.startswith("exit"):
        os._exit(1)
    return fake_audit(config, pm=pm, progress=progress, cache=cache)


# ---------------------------------------------------------------- process helpers


def _state(pid: int) -> str | None:
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return data[data.rindex(b")") + 2 :].split()[0].decode()


def marked_processes(token: str) -> dict[int, str]:
    """Live (not zombie) processes whose environment holds MARKER=token: pid -> command."""
    found = {}
    needle = f"{MARKER}={token}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
            command = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if needle in environ.split(b"\0") and _state(int(entry)) not in (None, "Z", "X"):
            found[int(entry)] = command
    return found


def descendants(pid: int) -> set[int]:
    """The process tree under ``pid``, read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                data = Path(f"/proc/{entry}/stat").read_bytes()
            except OSError:
                continue
            ppid = int(data[data.rindex(b")") + 2 :].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def wait_for(condition: Callable[[], bool], timeout: float, proc: subprocess.Popen[bytes] | None = None) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        if proc is not None and proc.poll() is not None:
            return condition()
        time.sleep(0.05)
    return condition()


def saved_rows(results: Path) -> int:
    """Rows in the results file as it is now (-1: none yet). Read through one open file:
    the batch replaces the file while it runs, and ``pq.read_table(path)`` opens the path
    twice (footer, then pages), so it can pair one version's footer with the next's pages."""
    try:
        with open(results, "rb") as fh:
            return pq.ParquetFile(fh).metadata.num_rows
    except FileNotFoundError:
        return -1


def started(folder: Path) -> list[str]:
    log = folder / "started.log"
    return [line.split()[1] for line in log.read_text().splitlines()] if log.exists() else []


def cleanup(token: str) -> None:
    """Kill what a failed test left behind (only this run's processes, by pid)."""
    for pid in marked_processes(token):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


@pytest.fixture()
def slow_run(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A folder with spaces in its name: a log, fast models m0, m1, slow models, the plugin."""
    d = tmp_path / "nightly runs"
    d.mkdir()
    freqs = make_log(d / "log.parquet", 120, seed=1)
    for i, name in enumerate(("m0", "m1", "slow2", "slow3")):
        make_table(d / f"{name}.npy", freqs, 0.5 * i, seed=i)
    (d / "plugin.py").write_text(SLOW_PLUGIN)
    (d / "slow.flag").write_text("")
    token = uuid.uuid4().hex
    env = {**os.environ, MARKER: token, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH")]))}
    yield {"dir": d, "token": token, "env": env}
    cleanup(token)


def popaudit_argv() -> list[str]:
    return [sys.executable, "-m", "auditor"]


COMMON = ["-k", "10", "--bootstrap", "0", "--max-queries", "20", "--no-probes", "-q"]


# ---------------------------------------------------------------- 4. workers die with their parent


@pytest.mark.slow
def test_workers_and_forkserver_exit_when_the_parent_is_killed(slow_run: dict[str, Any]) -> None:
    d, token = slow_run["dir"], slow_run["token"]
    manifest = write_manifest(d / "m.csv", {"model": ["slow2.npy", "slow3.npy", "m0.npy", "m1.npy"]})
    before = snapshot(d)
    with open(d / "stderr.txt", "wb") as err:
        proc = subprocess.Popen(
            [*popaudit_argv(), "batch", str(manifest), "-o", str(d / "r.parquet"), "-j", "2", "--plugin", str(d / "plugin.py"),
             "--interactions", str(d / "log.parquet"), *COMMON],
            env=slow_run["env"], cwd=d, stdout=subprocess.DEVNULL, stderr=err,
        )
        try:
            # Both workers are inside a slow audit.
            assert wait_for(lambda: sorted(started(d)) == ["slow2", "slow3"], 60, proc), (d / "stderr.txt").read_text()
            tree = descendants(proc.pid)
            running = marked_processes(token)
            workers = {pid for pid, cmd in running.items() if "forkserver" in cmd} - {proc.pid}
            # The main process, the forkserver and its two workers (and the resource tracker).
            assert proc.pid in running and len(workers) >= 3 and workers <= tree, running
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            killed = time.monotonic()
            assert wait_for(lambda: not marked_processes(token), 10), marked_processes(token)
            elapsed = time.monotonic() - killed
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    print(f"\nall {len(running) - 1} descendants gone {elapsed:.2f} s after SIGKILL of the main process")
    assert elapsed < 3.0
    assert not [pid for pid in tree if _state(pid) not in (None, "Z", "X")]
    assert snapshot(d, skip=("r.parquet", "stderr.txt", "started.log")) == before


@pytest.mark.slow
def test_a_killed_batch_leaves_its_pool_folder_for_the_next_run_to_remove(slow_run: dict[str, Any]) -> None:
    """multiprocessing's own ``pymp-*`` folder would stay in $TMPDIR after a kill; popaudit
    names it with the owner's pid, so the next run removes it (issue #23, item 8)."""
    import shutil
    import tempfile

    # Short: the forkserver's socket goes in it, and a socket path may not exceed 107 bytes.
    tmp = Path(tempfile.mkdtemp(prefix="pool-", dir="/tmp" if os.access("/tmp", os.W_OK) else None))
    try:
        _killed_then_cleaned(slow_run, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _killed_then_cleaned(slow_run: dict[str, Any], tmp: Path) -> None:
    d, token = slow_run["dir"], slow_run["token"]
    env = {**slow_run["env"], "TMPDIR": str(tmp)}
    manifest = write_manifest(d / "m.csv", {"model": ["slow2.npy", "m0.npy"]})
    args = ["--interactions", str(d / "log.parquet"), "--plugin", str(d / "plugin.py"), *COMMON]
    proc = subprocess.Popen([*popaudit_argv(), "batch", str(manifest), "-o", str(d / "r.parquet"), *args],
                            env=env, cwd=d, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: started(d) == ["slow2"], 60, proc)
        left = list(tmp.glob(f"pymp-popaudit-{proc.pid}-*"))
        assert len(left) == 1 and left[0].is_dir(), list(tmp.iterdir())
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert wait_for(lambda: not marked_processes(token), 10), marked_processes(token)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert left[0].exists()  # the kill left it behind
    (d / "slow.flag").unlink()
    again = write_manifest(d / "m2.csv", {"model": ["m1.npy"]})
    done = subprocess.run([*popaudit_argv(), "batch", str(again), "-o", str(d / "r2.parquet"), *args], env=env, cwd=d,
                          capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    assert not left[0].exists() and not list(tmp.glob("pymp-*")), list(tmp.iterdir())


@pytest.mark.slow
def test_the_check_child_of_a_plugin_run_dies_with_its_parent(slow_run: dict[str, Any]) -> None:
    """With a third-party plugin, check audits in a forked child; killing the parent kills it."""
    d, token = slow_run["dir"], slow_run["token"]
    proc = subprocess.Popen([*popaudit_argv(), "check", str(d / "slow2.npy"), "--interactions", str(d / "log.parquet"),
                             "--plugin", str(d / "plugin.py"), *COMMON],
                            env=slow_run["env"], cwd=d, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: started(d) == ["slow2"], 60, proc)
        running = marked_processes(token)
        assert len(running) == 2 and proc.pid in running, running  # the parent and its child
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert wait_for(lambda: not marked_processes(token), 5), marked_processes(token)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("mode", ["pidfd", "poll"])
def test_the_watchdog_ends_a_worker_once_its_main_process_is_gone(mode: str) -> None:
    """The watchdog thread alone: a process watching a stand-in for the main process (not
    its parent) exits as soon as the stand-in dies, while the stand-in is still an
    unreaped zombie; ``poll`` is the fallback where pidfd_open is missing."""
    script = (
        "import os, sys, time, threading; sys.path.insert(0, sys.argv[1]);"
        "from auditor.parallel import _exit_when_gone;"
        + ("del os.pidfd_open;" if mode == "poll" else "")
        + "threading.Thread(target=_exit_when_gone, args=(int(sys.argv[2]),), daemon=True).start();"
        "time.sleep(60)"
    )
    stand_in = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    worker = subprocess.Popen([sys.executable, "-c", script, str(Path(__file__).parents[1]), str(stand_in.pid)])
    try:
        time.sleep(1.0)
        assert worker.poll() is None
        os.kill(stand_in.pid, signal.SIGKILL)  # not reaped yet: a zombie, as a killed main process can be
        killed = time.monotonic()
        worker.wait(timeout=10)
        assert time.monotonic() - killed < 2.0
        assert _state(stand_in.pid) == "Z"
    finally:
        for p in (stand_in, worker):
            if p.poll() is None:
                p.kill()
            p.wait()


# ---------------------------------------------------------------- 5. rows isolated at every -j


@pytest.mark.parametrize("how", ["kill", "exit"])
def test_a_row_that_kills_its_worker_at_j1_fails_alone_and_resume_gets_past_it(
    runner: CliRunner, workspace: dict[str, Any], monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    import functools

    import auditor.batch

    d = workspace["dir"]
    if how == "exit":  # os._exit(1) in the audit
        monkeypatch.setattr("auditor.batch.run_batch", functools.partial(auditor.batch.run_batch.func, audit_fn=exiting_audit))
    else:  # SIGKILL of its own process (fake_audit, while kill.flag exists)
        (d / "kill.flag").write_text("")
    np.save(d / f"{how}me.npy", np.load(d / "m1.npy"))
    manifest = write_manifest(d / "m.csv", {"model": ["m0.npy", f"{how}me.npy", "m2.npy"]})
    args = ["batch", str(manifest), "-o", str(d / "r.parquet"), "--interactions", str(d / "log_a.parquet")]
    before = snapshot(d, skip=("calls.log",))
    first = runner.invoke(cli, args)  # -j 1: before, this took the whole batch down
    assert first.exit_code == 0, first.output
    rows = pq.read_table(d / "r.parquet").to_pylist()
    assert [r["status"] for r in rows] == ["ok", "error", "ok"]
    assert rows[1]["error"] == WORKER_DIED
    assert f"row 1 ({how}me.npy) failed: {WORKER_DIED}" in first.stderr
    # --resume gets past the row that keeps killing its worker.
    again = runner.invoke(cli, [*args, "--resume"])
    assert again.exit_code == 0, again.output
    assert "(2 kept from the earlier run)" in again.stdout and "3 rows: 2 ok, 1 failed" in again.stdout
    assert pq.read_table(d / "r.parquet").column("status").to_pylist() == ["ok", "error", "ok"]
    assert snapshot(d, skip=("calls.log", "r.parquet")) == before


def test_j1_audits_in_one_worker_that_keeps_its_caches(workspace: dict[str, Any]) -> None:
    d = workspace["dir"]
    manifest = write_manifest(
        d / "m.csv",
        {"model": ["m0.npy", "m1.npy", "m2.npy", "m3.npy"], "interactions": ["log_a.parquet", "log_b.parquet", "log_a.parquet", "log_b.parquet"]},
    )
    outcome = run_batch(manifest, d / "r.parquet", defaults={"ks": (10,)}, audit_fn=fake_audit)
    assert outcome.n_ok == 4
    audits = calls_by_pid(d)
    pids = {pid for pid, _ in audits}
    assert len(pids) == 1 and os.getpid() not in pids  # one worker, not this process
    # A log shared by rows is counted once by the worker.
    assert calls_by_pid(d, "read") == [(pid, log) for pid in pids for log in ("log_a.parquet", "log_b.parquet")]
    assert calls(d) == ["m0", "m2", "m1", "m3"]


# ---------------------------------------------------------------- 6. Ctrl-C says what to do


@pytest.mark.slow
def test_ctrl_c_saves_the_finished_rows_and_prints_the_command_to_continue(slow_run: dict[str, Any]) -> None:
    d, token = slow_run["dir"], slow_run["token"]
    manifest = write_manifest(d / "m.csv", {"model": ["m0.npy", "m1.npy", "slow2.npy", "slow3.npy"]})
    out = d / "results.parquet"
    before = snapshot(d)
    argv = ["batch", str(manifest), "-o", str(out), "--plugin", str(d / "plugin.py"),
            "--interactions", str(d / "log.parquet"), *COMMON]
    proc = subprocess.Popen(
        [*popaudit_argv(), *argv], env=slow_run["env"], cwd=d,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )
    try:
        # Two rows are saved and the third is being audited: press Ctrl-C (the terminal
        # sends SIGINT to the whole foreground process group).
        assert wait_for(lambda: "slow2" in started(d), 60, proc), proc.communicate(timeout=5)
        # Rows finished in quick succession are saved together a moment later (results.py).
        assert wait_for(lambda: saved_rows(out) == 2, 60), saved_rows(out)
        os.killpg(proc.pid, signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=20)
        gone = wait_for(lambda: not marked_processes(token), 10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    message = stderr.decode()
    assert proc.returncode == 130, message
    assert gone, marked_processes(token)  # the worker stopped with the command
    assert message.startswith(f"Error: interrupted: 2 of 4 rows are saved in {out} (2 ok, 0 failed).")
    assert "Traceback" not in message and "KeyboardInterrupt" not in message, message
    command = message.strip().splitlines()[-1].strip()
    assert shlex.split(command) == ["popaudit", *argv, "--resume"]
    assert shlex.quote(str(out)) in command  # the folder name has a space: quoted
    table = pq.read_table(out)
    assert table.column("row").to_pylist() == [0, 1] and table.column("status").to_pylist() == ["ok", "ok"]
    assert snapshot(d, skip=("results.parquet", "started.log")) == before

    # The printed command continues the run: only rows 2 and 3 are audited.
    (d / "slow.flag").unlink()
    (d / "started.log").unlink()
    resumed = subprocess.run(
        [*popaudit_argv(), *shlex.split(command)[1:]], env=slow_run["env"], cwd=d, capture_output=True, timeout=120,
    )
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert sorted(started(d)) == ["slow2", "slow3"]
    assert pq.read_table(out).column("status").to_pylist() == ["ok"] * 4


@pytest.mark.slow
def test_a_script_without_a_main_guard_gets_a_clear_error(workspace: dict[str, Any]) -> None:
    """Workers import the main module; an unguarded script would re-run the batch in each
    worker, which multiprocessing refuses: the run says so instead of failing every row
    as a dead worker."""
    d = workspace["dir"]
    manifest = write_manifest(d / "m.csv", {"model": ["m0.npy", "m1.npy"]})
    script = d / "unguarded.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from pathlib import Path\n"
        "from test_batch_core import fake_audit\n"
        "from auditor.batch import run_batch\n"
        f"run_batch(Path({str(manifest)!r}), Path({str(d / 'r.parquet')!r}), "
        f"defaults={{'interactions': Path({str(d / 'log_a.parquet')!r})}}, audit_fn=fake_audit)\n"
    )
    result = subprocess.run([sys.executable, str(script)], capture_output=True, timeout=120, cwd=d)
    message = result.stderr.decode()
    assert result.returncode == 1, message
    assert "AuditError: the batch's worker processes died while starting" in message
    assert "if __name__ == \"__main__\":" in message
    assert calls(d) == []
