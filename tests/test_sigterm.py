"""SIGTERM stops a command as Ctrl-C does, and it exits 143 (README 'Exit codes').

SIGTERM is what ``timeout``, a cancelled CI job, ``docker stop`` and Kubernetes send. Its
default action ended the process at once (exit -15): a streamed table's temporary
``.npy`` (as large as the table), the pool's ``pymp-popaudit-*`` folder and a batch's
summary and resume command were left behind. Now the console-script entry point turns
it into the Ctrl-C path (:mod:`auditor.cli._termination`): workers stopped, finished rows
saved, the resume command printed, ``$TMPDIR`` left empty, exit 143.

The runs are real ``python -m auditor`` processes with their own ``$TMPDIR``; a measure
plugin (or, for a ``check`` without plugins, a patched spill note) makes the streamed
5,000-row table's audit sleep once its file exists. ``timeout`` signals the command, then
its whole process group (so the command hears SIGTERM twice); ``docker stop`` signals the
command alone: both are sent here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from auditor.memory import SPILL_PREFIX

BIG_ROWS = 5000
"""Rows of the streamed table: 5,000 x 4 float32 is 80,000 bytes, over its 40K ceiling."""

PLUGIN = f'''
import os, tempfile, time
from auditor.hookspecs import hookimpl


class Measure:
    name = "term_probe"
    description = "sleeps on the streamed table; marks the small one as audited"

    def compute(self, bundle, stats, result):
        if bundle.n_items == {BIG_ROWS}:
            time.sleep(600)
        open(os.environ["TERM_NOTES"], "a").write("small\\n")
        return 1.0


@hookimpl
def popaudit_measures():
    return [Measure()]
'''

SLOW_SPILL = '''
import sys, time
import auditor.memory as memory

def slow_note(*args, **kwargs):  # called once the table is streamed to its file
    time.sleep(600)

memory.spill_note = slow_note
from auditor.cli import main
sys.argv = ["popaudit", *sys.argv[1:]]
main()
'''


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """items.npy (10 rows), big.npy (float64, converted: streamed under a 40K ceiling), a
    log, the plugin and a manifest of the big table then the small one."""
    rng = np.random.default_rng(0)
    np.save(tmp_path / "items.npy", rng.normal(size=(10, 4)).astype(np.float32))
    np.save(tmp_path / "big.npy", rng.normal(size=(BIG_ROWS, 4)))
    items = np.repeat(np.arange(10), np.arange(1, 11))
    pq.write_table(pa.table({"user_id": items % 5, "item_id": items}), tmp_path / "log.parquet")
    (tmp_path / "probe.py").write_text(PLUGIN, encoding="utf-8")
    (tmp_path / "slow_spill.py").write_text(SLOW_SPILL, encoding="utf-8")
    (tmp_path / "m.csv").write_text("model,max_memory\nbig.npy,40K\nitems.npy,\n", encoding="utf-8")
    return tmp_path


def _timeout(proc: subprocess.Popen[str]) -> None:
    """What ``timeout`` does: SIGTERM to the command, then to its process group."""
    os.kill(proc.pid, signal.SIGTERM)
    os.killpg(proc.pid, signal.SIGTERM)


def _docker_stop(proc: subprocess.Popen[str]) -> None:
    """What ``docker stop`` and Kubernetes do: SIGTERM to the command (PID 1) alone."""
    os.kill(proc.pid, signal.SIGTERM)


def _terminated(command: list[str], folder: Path, send: Callable[[subprocess.Popen[str]], None],
                ready: Callable[[], bool]) -> tuple[int, str, list[str], list[str]]:
    """Run ``command`` with its own $TMPDIR, send SIGTERM with ``send`` once a table file
    exists there and ``ready()``; (exit code, stderr, the table files seen, what is left)."""
    tmpdir = Path(tempfile.mkdtemp(prefix="term-", dir="/tmp" if os.access("/tmp", os.W_OK) else None))
    env = {**os.environ, "TMPDIR": str(tmpdir), "TERM_NOTES": str(folder / "notes.txt")}
    proc = subprocess.Popen(command, cwd=folder, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and proc.poll() is None:
            if any(name.startswith(SPILL_PREFIX) for name in os.listdir(tmpdir)) and ready():
                break
            time.sleep(0.1)
        time.sleep(0.5)  # the table is written and its audit sleeps
        streaming = [name for name in os.listdir(tmpdir) if name.startswith(SPILL_PREFIX)]
        send(proc)
        stderr = proc.communicate(timeout=60)[1]
        left = sorted(os.listdir(tmpdir))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        subprocess.run(["rm", "-rf", str(tmpdir)], check=False)
    return proc.returncode, stderr, streaming, left


@pytest.mark.parametrize("send", [_timeout, _docker_stop])
def test_sigterm_stops_a_batch_as_ctrl_c_does(folder: Path, send: Callable[[subprocess.Popen[str]], None]) -> None:
    """-j 2: the small row finishes while the streamed one sleeps; then SIGTERM."""
    command = [sys.executable, "-m", "auditor", "batch", "m.csv", "-o", "r.parquet", "--interactions", "log.parquet",
               "--bootstrap", "0", "--no-probes", "--plugin", "probe.py", "-j", "2"]
    code, stderr, streaming, left = _terminated(command, folder, send, (folder / "notes.txt").exists)
    assert len(streaming) == 1, (streaming, stderr)
    # before: exit -15, nothing said, the 80,128-byte table file and the pool folder left
    assert code == 143, stderr
    assert "Error: terminated by SIGTERM: 1 of 2 rows are saved in r.parquet (1 ok, 0 failed)" in stderr, stderr
    assert "--resume" in stderr and "Traceback" not in stderr and "leaked" not in stderr, stderr
    assert left == [], left
    rows = pq.read_table(folder / "r.parquet").to_pylist()
    assert [(r["model"], r["status"]) for r in rows] == [("items.npy", "ok")], rows  # no worker died of it first


def test_sigterm_stops_a_plugin_checks_child_and_removes_its_table_file(folder: Path) -> None:
    """``check`` with a plugin audits in a forked child: the parent kills it and removes
    what it streamed."""
    command = [sys.executable, "-m", "auditor", "check", "big.npy", "--interactions", "log.parquet", "--bootstrap", "0",
               "--no-probes", "-q", "--max-memory", "40K", "--plugin", "probe.py"]
    code, stderr, streaming, left = _terminated(command, folder, _timeout, lambda: True)
    assert len(streaming) == 1, (streaming, stderr)
    assert code == 143 and stderr.strip() == "Error: terminated by SIGTERM", stderr
    assert left == [], left


@pytest.mark.parametrize("send", [_timeout, _docker_stop])
def test_sigterm_stops_a_check_in_process_and_removes_its_table_file(
    folder: Path, send: Callable[[subprocess.Popen[str]], None]
) -> None:
    command = [sys.executable, str(folder / "slow_spill.py"), "check", "big.npy", "--interactions", "log.parquet",
               "--bootstrap", "0", "--no-probes", "-q", "--max-memory", "40K"]
    code, stderr, streaming, left = _terminated(command, folder, send, lambda: True)
    assert len(streaming) == 1, (streaming, stderr)
    assert code == 143 and stderr.strip() == "Error: terminated by SIGTERM", stderr
    assert left == [], left  # before: exit -15 and popaudit-table-<pid>-*.npy left


HANDLER = '''
import os, signal, sys, time
from auditor.cli._termination import stopped_by_sigterm
from auditor.errors import Terminated

try:
    with stopped_by_sigterm():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
            print("not raised")
        except Terminated:
            os.kill(os.getpid(), signal.SIGTERM)  # a second one, as timeout sends: ignored
            time.sleep(0.2)
            pid = os.fork()
            if pid == 0:  # a forked process with the handler inherited: ends as by default
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
                os._exit(0)
            print("child killed by", os.WTERMSIG(os.waitpid(pid, 0)[1]))
            sys.exit(1)  # as a command's clean-up might exit, under another code
except SystemExit as exc:
    print("exit", exc.code)
print("after", signal.getsignal(signal.SIGTERM).name)
'''


def test_sigterm_handler_raises_once_in_its_own_process_and_exits_143() -> None:
    done = subprocess.run([sys.executable, "-c", HANDLER], capture_output=True, text=True, timeout=60)
    assert done.stdout.split("\n")[:3] == ["child killed by 15", "exit 143", "after SIG_IGN"], done.stdout + done.stderr


def test_an_ignored_sigterm_stays_ignored() -> None:
    """A caller that ignores SIGTERM (as nohup does SIGHUP) keeps it ignored."""
    done = subprocess.run([sys.executable, "-c", HANDLER], capture_output=True, text=True, timeout=60,
                          preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN))
    assert done.stdout.startswith("not raised\n"), done.stdout + done.stderr



def test_the_words_and_code_follow_the_sigterm_through_batch_and_the_progress_line() -> None:
    """run_batch raises BatchInterrupted from the Terminated it caught: the CLI says
    "terminated by SIGTERM" and exits 143 from it, and a progress track closes so."""
    from auditor.batch.run import BatchInterrupted
    from auditor.cli._progress import PlainLines
    from auditor.errors import Terminated, interruption

    try:
        try:
            raise Terminated()
        except KeyboardInterrupt as stop:
            raise BatchInterrupted(Path("r.parquet"), 4, 2, 2) from stop
    except BatchInterrupted as exc:
        assert interruption(exc) == ("terminated by SIGTERM", 143)
    assert interruption(BatchInterrupted(Path("r.parquet"), 4, 2, 2)) == ("interrupted", 130)
    lines: list[str] = []
    now = [0.0]
    plain = PlainLines(lines.append, interval=10.0, task_seconds=1.0, clock=lambda: now[0])
    with pytest.raises(Terminated):
        with plain.track("Auditing 3 of 3 models", total=3):
            now[0] = 12.0
            raise Terminated()
    assert [line.split("] ", 1)[1] for line in lines] == [
        "Auditing 3 of 3 models: 0/3 (0%), 0:12 elapsed · terminated by SIGTERM"  # before: "· interrupted"
    ]


def test_a_plugin_hook_passes_on_a_sigterm_only_where_the_handler_can_raise_one() -> None:
    """A Terminated met in plugin code is the user's SIGTERM where the CLI's handler is
    installed (re-raised, even with SIGINT ignored: a background job); elsewhere (the
    isolated child, a worker: SIGTERM ignored) the plugin raised it, and it fails as any
    exception does."""
    from auditor.errors import Terminated
    from auditor.plugins.manager import reraise_interrupt

    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, lambda signum, frame: None)
        with pytest.raises(Terminated):
            reraise_interrupt(Terminated())
        reraise_interrupt(KeyboardInterrupt())  # SIGINT ignored: the plugin's own
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        reraise_interrupt(Terminated())
    finally:
        signal.signal(signal.SIGTERM, before[0])
        signal.signal(signal.SIGINT, before[1])
