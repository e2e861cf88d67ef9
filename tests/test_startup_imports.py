"""What the command line's cheap paths load: an error before any work, ``popaudit --help``
and ``popaudit check --help`` import neither numpy nor torch nor the plugin machinery, nor
rich or multiprocessing (issue 25: help and error paths in a blink); the commands that
read no torch file (``diff``, ``plugins``, a served-lists audit, ``mitigate`` of a
.npy table, a batch of served lists alone, in any of its processes) import neither torch
nor FAISS (2 s of a 2.4 s run before). Asserted from ``sys.modules`` in a fresh interpreter,
not from timings; an installed plugin still adds its command to the help."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HEAVY = (
    "numpy", "torch", "pyarrow", "scipy", "pluggy", "rich", "multiprocessing", "concurrent.futures",
    "auditor.plugins", "auditor.plugins.manager", "auditor.hookspecs", "auditor.plugin_api", "auditor.parallel",
)
"""Modules the help and the error paths must not import (each a package or a module)."""

MODEL_ONLY = ("torch", "faiss")
"""What only reading a model file or searching its table needs."""
ROOT = Path(__file__).resolve().parents[1]

SCRIPT = (
    "import sys\n"
    "from auditor.cli import main\n"
    "sys.argv = ['popaudit', *sys.argv[1:]]\n"
    "try:\n"
    "    main()\n"
    "except SystemExit as e:\n"
    "    code = e.code\n"
    "heavy = sorted(m for m in WATCHED if m in sys.modules)\n"
    "print('EXIT', code, 'HEAVY', heavy)\n"
)


def _run(
    args: list[str], cwd: Path, pythonpath: Path | None = None, watched: tuple[str, ...] = HEAVY
) -> subprocess.CompletedProcess[str]:
    """``popaudit ARGS`` in a fresh interpreter, printing its exit code and which of
    ``watched`` it imported."""
    env = None
    if pythonpath is not None:
        env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    script = f"WATCHED = {watched!r}\n" + SCRIPT
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120, env=env)


def test_missing_model_error_loads_no_numpy_torch_or_plugins(tmp_path: Path) -> None:
    out = _run(["check", str(tmp_path / "missing.pt")], tmp_path)
    assert "EXIT 1 HEAVY []" in out.stdout, out.stdout + out.stderr[-2000:]
    assert "Error: model file not found" in out.stderr


@pytest.mark.parametrize(
    ("args", "shown"),
    [
        (["--help"], ("check", "batch", "plugins", "mitigate", "diff")),
        (["check", "--help"], ("--interactions", "--fail-on", "--device")),
        (["batch", "--help"], ("MANIFEST",)),
    ],
)
def test_help_loads_no_plugin_machinery(tmp_path: Path, args: list[str], shown: tuple[str, ...]) -> None:
    out = _run(args, tmp_path)
    assert "EXIT 0 HEAVY []" in out.stdout, out.stdout + out.stderr[-2000:]
    for text in shown:
        assert text in out.stdout


def test_usage_error_loads_no_plugin_machinery(tmp_path: Path) -> None:
    out = _run(["check", "--no-such-option"], tmp_path)
    assert "EXIT 2 HEAVY []" in out.stdout, out.stdout + out.stderr[-2000:]
    assert "No such option" in out.stderr


def test_an_installed_plugin_still_adds_its_command_to_the_help(tmp_path: Path) -> None:
    """With an entry point in popaudit's group, the help builds the manager and lists the
    plugin's command: skipping the manager is only for an empty group."""
    dist = tmp_path / "hello_cmd-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: hello-cmd\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[popaudit]\nhello = hello_cmd_plugin\n")
    (tmp_path / "hello_cmd_plugin.py").write_text(
        "import click\n"
        "from auditor.hookspecs import hookimpl\n"
        "@click.command(name='hello-installed', help='Say hello from an installed plugin.')\n"
        "def hello():\n"
        "    click.echo('hello')\n"
        "@hookimpl\n"
        "def popaudit_cli_commands():\n"
        "    return [hello]\n"
    )
    out = _run(["--help"], tmp_path, pythonpath=tmp_path)
    assert "EXIT 0" in out.stdout, out.stdout + out.stderr[-2000:]
    assert "hello-installed" in out.stdout and "Say hello from an installed plugin." in out.stdout
    assert "'auditor.plugins.manager'" in out.stdout  # the manager was built for it


def test_commands_without_a_torch_file_load_no_torch_or_faiss(tmp_path: Path) -> None:
    lists, report = ROOT / "tests/data/served_lists/recs.csv", tmp_path / "lists.json"
    audit = ["check", "--recommendations", str(lists), "--interactions", str(ROOT / "sample_data/interactions.parquet")]
    out = _run([*audit, "--json", str(report)], tmp_path, watched=MODEL_ONLY)
    assert "EXIT 0 HEAVY []" in out.stdout, out.stdout + out.stderr[-2000:]
    assert json.loads(report.read_text())["served"]["n_users"] > 0
    np.save(tmp_path / "table.npy", np.arange(12, dtype=np.float32).reshape(4, 3) + 1)
    rescale = ["mitigate", str(tmp_path / "table.npy"), "--alpha", "0.5", "-o", str(tmp_path / "out.npy")]
    for args in (["diff", str(report), str(report)], ["plugins"], rescale):
        out = _run(args, tmp_path, watched=MODEL_ONLY)
        assert "EXIT 0 HEAVY []" in out.stdout, (args, out.stdout + out.stderr[-2000:])
    rows = np.arange(12, dtype=np.float64).reshape(4, 3) + 1
    want = rows * np.linalg.norm(rows, axis=1, keepdims=True) ** -0.5
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), want, rtol=1e-6)


SITE_HOOK = """
import os, sys
class _TorchWatch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            with open(os.environ["TORCH_IMPORTS"], "a") as fh:
                fh.write(f"{os.getpid()}\\n")
        return None
sys.meta_path.insert(0, _TorchWatch())
"""
"""A sitecustomize that notes every process that imports torch (the forkserver runs it as
it starts, and the workers it forks inherit the hook)."""


def test_a_batch_of_served_lists_imports_torch_in_no_process(tmp_path: Path) -> None:
    """``popaudit batch`` over rows of served lists alone, in a pool of two workers: neither
    the main process, nor the forkserver, nor a worker imports torch (its import was most
    of such a batch's time), and the rows are audited as ``check`` audits them."""
    import pyarrow.parquet as pq

    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(SITE_HOOK)
    lists, log = ROOT / "tests/data/served_lists/recs.csv", ROOT / "sample_data/interactions.parquet"
    (tmp_path / "m.csv").write_text("recommendations,label\n" + "".join(f"{lists},r{i}\n" for i in range(3)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(ROOT)]),
           "TORCH_IMPORTS": str(tmp_path / "torch.txt")}
    batch = ["batch", "m.csv", "-o", "out.parquet", "--interactions", str(log), "-j", "2", "-q", "--bootstrap", "0"]
    done = subprocess.run([sys.executable, "-c", SCRIPT_BATCH, *batch], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert not (tmp_path / "torch.txt").exists(), (tmp_path / "torch.txt").read_text()
    rows = pq.read_table(tmp_path / "out.parquet").to_pylist()
    report = tmp_path / "lists.json"
    check = ["check", "--recommendations", str(lists), "--interactions", str(log), "--json", str(report)]
    assert "EXIT 0" in _run(check, tmp_path, watched=MODEL_ONLY).stdout
    served = json.loads(report.read_text())["served"]
    assert [r["status"] for r in rows] == ["ok"] * 3
    assert served["n_users"] > 0
    for row in rows:
        assert json.loads(row["report_json"])["served"] == served


SCRIPT_BATCH = "import sys\nfrom auditor.cli import main\nsys.argv = ['popaudit', *sys.argv[1:]]\nmain()\n"


@pytest.mark.parametrize("torch_loaded", [False, True])
def test_a_pool_worker_shares_the_cores_without_importing_torch(torch_loaded: bool) -> None:
    """A batch worker's set-up gives it its share of the cores: torch's threads where torch
    is loaded (a batch with models preloads it), else the share is left in OMP_NUM_THREADS,
    which torch reads when it loads; the set-up itself never imports torch."""
    script = (
        "import os, sys\n"
        + ("import torch\n" if torch_loaded else "")
        + "from auditor.batch.workers import share_cores\n"
        "from auditor.parallel import usable_cores\n"
        "share_cores(2)\n"
        "loaded = 'torch' in sys.modules\n"
        "import torch\n"
        "print(loaded, max(1, usable_cores() // 2), torch.get_num_threads(), os.environ.get('OMP_NUM_THREADS'))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded, share, threads, omp = done.stdout.split()
    assert loaded == str(torch_loaded)
    assert threads == share
    assert omp == ("None" if torch_loaded else share)
