"""A small audit from the shell: import time and audit time apart, against baselines
timed in the same run (issue 25's "small audit in a blink").

Every figure is the fastest of ``--repeat`` interleaved subprocess runs, each beside its
baseline in the same round:

* ``popaudit --help``, ``popaudit check --help`` and an error path (a missing model file)
  against ``python -c pass`` (the interpreter's own start) and against the goal of
  :data:`HELP_GOAL` seconds wall;
* ``popaudit check MODEL --interactions LOG --json`` end to end against
  ``python -c "import torch"`` (the floor of any audit of a torch file);
* the same ``check`` under ``python -X importtime``: the time its imports took (summed
  over top-level imports, with the largest packages apart), and the modules it must not
  load (torch's compiler stack, sympy, matplotlib without a figure);
* in one process, after the imports: ``run_audit`` and, within it, the numeric probes
  (the cross-Jacobian apart).

    python benchmarks/bench_small_audit.py                       # sample_data/biased.pt
    python benchmarks/bench_small_audit.py --model M.pt --log L.parquet
    python benchmarks/bench_small_audit.py --baseline-python ../main/.venv/bin/python

On a shared machine the wall times swing; read the ratios and the import breakdown.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = ("torch._dynamo", "torch._inductor", "sympy", "matplotlib")
HELP_GOAL = 0.2
"""Seconds wall that ``--help`` and an error path may take (issue 25, goal 3)."""
PACKAGES = ("torch", "scipy", "numpy", "pyarrow", "faiss", "matplotlib", "rich", "click", "pluggy", "auditor")

AUDIT_SCRIPT = """
import json, sys, time
from pathlib import Path
import torch
from auditor.audit import run_audit
from auditor.config import AuditConfig
import auditor.probes.run as probe_run
import auditor.probes.numerics as numerics

spent = {"probes": 0.0, "cross_jacobian": 0.0}
def timed(key, fn):
    def wrapper(*a, **k):
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            spent[key] += time.perf_counter() - t
    return wrapper
probe_run.cross_jacobian = timed("cross_jacobian", numerics.cross_jacobian)
import auditor.conditions as conditions
conditions.run_all_probes = timed("probes", conditions.run_all_probes)
config = AuditConfig(model=Path(sys.argv[1]), interactions=Path(sys.argv[2]))
t = time.perf_counter()
result = run_audit(config)
spent["audit"] = time.perf_counter() - t
print(json.dumps(spent))
"""


BYTECODE = {"PYTHONPYCACHEPREFIX": str(Path(tempfile.gettempdir()) / "popaudit-bench-pyc")}
"""Compiled modules cached outside the source trees, and written even where the
environment sets PYTHONDONTWRITEBYTECODE: an installed popaudit runs from bytecode, and
compiling its sources on every start (about 50 ms of ``--help``) is no cost a user pays.
The first round writes the cache; the fastest round counts."""


def wall(cmd: list[str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    """Seconds and outcome of ``cmd``, run outside the source tree: ``-m auditor`` and
    ``-c`` put the working directory first on sys.path, which would shadow the package
    each interpreter has installed."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | BYTECODE
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=tempfile.gettempdir(), env=env)
    return time.perf_counter() - start, done


def import_profile(stderr: str) -> tuple[float, dict[str, float], list[str]]:
    """(seconds of imports, seconds per top package, forbidden modules loaded) from
    ``-X importtime`` output (cumulative times of the top-level imports add up)."""
    total = 0.0
    per: dict[str, float] = dict.fromkeys(PACKAGES, 0.0)
    loaded: set[str] = set()
    stack: list[str] = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        parts = line.split("|")
        cumulative, name = parts[1], parts[2]
        depth = (len(name) - len(name.lstrip())) // 2
        module = name.strip()
        loaded.add(module)
        del stack[depth:]
        seconds = int(cumulative) / 1e6
        top = module.split(".")[0]
        # A package's time counts once: at its outermost import (nested ones are inside it).
        if top in per and not any(s.split(".")[0] == top for s in stack):
            per[top] += seconds
        if depth == 0:
            total += seconds
        stack.append(module)
    bad = sorted(m for m in loaded if any(m == f or m.startswith(f + ".") for f in FORBIDDEN))
    return total, per, bad


def commands(py: str, model: Path, log: Path) -> dict[str, list[str]]:
    out = Path("/tmp") / "bench_small_audit.json"
    check = ["-m", "auditor", "check", str(model), "--interactions", str(log), "--json", str(out)]
    return {
        "python": [py, "-c", "pass"],
        "help": [py, "-m", "auditor", "--help"],
        "check_help": [py, "-m", "auditor", "check", "--help"],
        "error": [py, "-m", "auditor", "check", "/nonexistent/model.pt"],
        "torch": [py, "-c", "import torch"],
        "check": [py, *check],
        "importtime": [py, "-X", "importtime", *check],
        "audit": [py, "-c", AUDIT_SCRIPT, str(model), str(log)],
    }


class Figures:
    """The fastest of each measurement over the rounds, for one interpreter."""

    def __init__(self) -> None:
        self.best: dict[str, float] = {}
        self.imports: tuple[float, dict[str, float], list[str]] | None = None
        self.inner: dict[str, float] = {}

    def round(self, runs: dict[str, list[str]]) -> None:
        for name, cmd in runs.items():
            seconds, done = wall(cmd)
            if name != "error" and done.returncode != 0:
                sys.exit(f"{name} failed ({done.returncode}): {done.stderr[-2000:]}")
            self.best[name] = min(self.best.get(name, float("inf")), seconds)
            if name == "importtime":
                profile = import_profile(done.stderr)
                self.imports = profile if self.imports is None or profile[0] < self.imports[0] else self.imports
            if name == "audit":
                got = json.loads(done.stdout.strip().splitlines()[-1])
                self.inner = {k: min(v, self.inner.get(k, float("inf"))) for k, v in got.items()}

    def report(self, title: str) -> None:
        best, inner = self.best, self.inner
        assert self.imports is not None
        total, per, bad = self.imports
        print(f"-- {title}")
        print(f"python -c pass                 {best['python']:6.3f} s")
        for key, label in (("help", "popaudit --help"), ("check_help", "popaudit check --help"),
                           ("error", "error path (missing model)")):
            print(f"{label:<30} {best[key]:6.3f} s  ({best[key] / best['python']:5.1f}x python, "
                  f"{best[key] / HELP_GOAL:4.2f}x the {HELP_GOAL:g} s goal)")
        print(f"python -c 'import torch'       {best['torch']:6.3f} s")
        print(f"check end to end (--json)      {best['check']:6.3f} s  ({best['check'] / best['torch']:5.2f}x import torch)")
        print(f"  imports (-X importtime)      {total:6.3f} s  ({total / best['torch']:5.2f}x import torch)")
        for name, seconds in sorted(per.items(), key=lambda kv: -kv[1]):
            if seconds >= 0.005:
                print(f"    {name:<26} {seconds:6.3f} s")
        print(f"  run_audit after imports      {inner['audit']:6.3f} s  ({inner['audit'] / best['check']:5.1%} of check)")
        print(f"    numeric probes             {inner['probes']:6.3f} s  ({inner['probes'] / inner['audit']:5.1%} of run_audit)")
        print(f"    cross-Jacobian (C3)        {inner['cross_jacobian']:6.3f} s")
        groups = sorted({next(f for f in FORBIDDEN if m == f or m.startswith(f + ".")) for m in bad})
        counts = [f"{g} ({sum(1 for m in bad if m == g or m.startswith(g + '.'))} modules)" for g in groups]
        print("  forbidden modules loaded     " + (", ".join(counts) if counts else "none"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=ROOT / "sample_data/biased.pt")
    parser.add_argument("--log", type=Path, default=ROOT / "sample_data/interactions.parquet")
    parser.add_argument("--repeat", type=int, default=3, help="interleaved rounds; the fastest counts")
    parser.add_argument(
        "--baseline-python", type=Path, default=None,
        help="another environment's interpreter (an older popaudit), timed in the same rounds",
    )
    args = parser.parse_args()
    interpreters = {"this popaudit": sys.executable}
    if args.baseline_python is not None:
        interpreters["baseline"] = str(args.baseline_python)
    figures = {name: Figures() for name in interpreters}
    for _ in range(args.repeat):
        for name, py in interpreters.items():
            figures[name].round(commands(py, args.model, args.log))
    print(f"model {args.model.name}, log {args.log.name}; best of {args.repeat} interleaved rounds")
    for name, fig in figures.items():
        fig.report(name)
    if "baseline" in figures:
        new, old = figures["this popaudit"], figures["baseline"]
        assert new.imports is not None and old.imports is not None
        print("-- this / baseline (same rounds)")
        for key in ("help", "check_help", "error", "check"):
            print(f"{key:<30} {new.best[key] / old.best[key]:6.2f}")
        print(f"{'imports':<30} {new.imports[0] / old.imports[0]:6.2f}")
        for key in ("audit", "probes", "cross_jacobian"):
            print(f"{key:<30} {new.inner[key] / old.inner[key]:6.2f}")


if __name__ == "__main__":
    main()
