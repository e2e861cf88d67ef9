"""A small audit from the shell: import time and audit time apart, against baselines
timed in the same run (issue 25's "small audit in a blink").

Every figure is the fastest of ``--repeat`` interleaved subprocess runs, each beside its
baseline in the same round:

* ``popaudit --help``, ``popaudit check --help`` and an error path (a missing model file)
  against ``python -c pass`` (the interpreter's own start) and against the goal of
  :data:`HELP_GOAL` seconds wall;
* ``popaudit check MODEL --interactions LOG --json`` end to end against
  ``python -c "import torch"`` (the floor of any audit of a torch file): as a ratio, as
  the time beyond that import against :data:`OVER_TORCH_GOAL`, and against the absolute
  goal of :data:`CHECK_GOAL` seconds (which ``import torch`` alone exceeds on a slow
  machine); and in CPU seconds beyond ``import torch`` with its objects frozen before
  exit too (:data:`FROZEN_TORCH`), the floor for a command that exits as ``popaudit``
  does (``cli/_startup.py``: no shutdown collections), which plain ``import torch``
  still pays;
* the same ``check`` under ``python -X importtime``: the time its imports took (summed
  over top-level imports, with the largest packages apart), and the modules it must not
  load (torch's compiler stack, sympy, matplotlib without a figure, torch's forward-mode
  decompositions);
* in one process, after the imports: ``run_audit`` and, within it, the numeric probes
  (the cross-Jacobian apart);
* the commands that read no torch file (:data:`NO_TORCH_FILE`: ``diff``, ``plugins``, a
  served-lists audit, ``mitigate`` of a .npy table, a batch of served lists) against
  ``import torch``, which they no longer pay;
* the same ``check`` and ``run_audit`` on a generated model of ``--items`` items
  (default 10,000; 0 skips it): the sample's recipe (``sample_data/make_sample.py``:
  Zipf log, cosine InfoNCE, plain SGD at a high learning rate) scaled to that many items
  at the sample's 37.5 interactions per item, two epochs; generated once and kept in
  the temporary folder.

    python benchmarks/bench_small_audit.py                       # sample_data/biased.pt
    python benchmarks/bench_small_audit.py --model M.pt --log L.parquet --items 0
    python benchmarks/bench_small_audit.py --baseline-python ../main/.venv/bin/python

On a shared machine the wall times swing; read the ratios and the import breakdown.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = ("torch._dynamo", "torch._inductor", "sympy", "matplotlib", "torch._decomp.decompositions_for_jvp")
HELP_GOAL = 0.2
"""Seconds wall that ``--help`` and an error path may take (issue 25, goal 3)."""
CHECK_GOAL = 2.0
"""Seconds wall of a small audit from the shell (issue 25, goal 3)."""
OVER_TORCH_GOAL = 0.6
"""Seconds a small audit may take beyond ``import torch`` where that import alone is
over :data:`CHECK_GOAL` (a slow or shared machine)."""
FROZEN_TORCH = "import torch, gc; gc.freeze()"
"""``import torch`` exiting as ``popaudit`` exits: every object frozen, so the shutdown's
collections skip them."""
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


def wall(cmd: list[str]) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """Seconds wall, CPU seconds (user + system) and outcome of ``cmd``, run outside the
    source tree: ``-m auditor`` and ``-c`` put the working directory first on sys.path,
    which would shadow the package each interpreter has installed. CPU time is reported
    beside wall time because on a shared machine the wall time mostly measures the
    neighbours; CPU time moves far less with them."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | BYTECODE
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=tempfile.gettempdir(), env=env)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return seconds, cpu, done


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


NO_TORCH_FILE = {
    "diff": "diff of two reports",
    "plugins": "popaudit plugins",
    "lists": "served-lists audit",
    "mitigate_npy": "mitigate of a .npy table",
    "lists_batch": "batch of 10 lists rows -j 2",
}
"""Commands that read no torch file, so need no torch (nor FAISS): each is timed against
``import torch``, which they used to pay (``tests/test_startup_imports.py`` asserts it)."""


def no_torch_file(py: str, report: Path) -> dict[str, list[str]]:
    """The :data:`NO_TORCH_FILE` commands: ``report`` is the check's JSON of the same round."""
    folder = Path(tempfile.gettempdir())
    table = folder / "bench_small_audit_table.npy"
    if not table.exists():
        np.save(table, np.random.default_rng(0).normal(size=(800, 32)).astype(np.float32))
    recs, log = ROOT / "tests/data/served_lists/recs.csv", ROOT / "sample_data/interactions.parquet"
    lists = ["--recommendations", str(recs), "--interactions", str(log)]
    manifest = folder / "bench_small_audit_lists_manifest.csv"
    manifest.write_text("recommendations,label\n" + "".join(f"{recs},row{i}\n" for i in range(10)))
    return {
        "diff": [py, "-m", "auditor", "diff", str(report), str(report)],
        "plugins": [py, "-m", "auditor", "plugins"],
        "lists": [py, "-m", "auditor", "check", *lists, "--json", str(folder / "bench_small_audit_lists.json")],
        "mitigate_npy": [py, "-m", "auditor", "mitigate", str(table), "--alpha", "0.5", "-o",
                         str(folder / "bench_small_audit_table.a05.npy")],
        "lists_batch": [py, "-m", "auditor", "batch", str(manifest), "-o", str(folder / "bench_small_audit_lists.parquet"),
                        "--interactions", str(log), "-j", "2", "-q", "--bootstrap", "0"],
    }


def commands(py: str, model: Path, log: Path) -> dict[str, list[str]]:
    out = Path("/tmp") / "bench_small_audit.json"
    check = ["-m", "auditor", "check", str(model), "--interactions", str(log), "--json", str(out)]
    return {
        "python": [py, "-c", "pass"],
        "help": [py, "-m", "auditor", "--help"],
        "check_help": [py, "-m", "auditor", "check", "--help"],
        "error": [py, "-m", "auditor", "check", "/nonexistent/model.pt"],
        "torch": [py, "-c", "import torch"],
        "torch_frozen": [py, "-c", FROZEN_TORCH],
        "check": [py, *check],
        "importtime": [py, "-X", "importtime", *check],
        "audit": [py, "-c", AUDIT_SCRIPT, str(model), str(log)],
        **no_torch_file(py, out),
    }


GENERATE_SCRIPT = """
import sys
from pathlib import Path
import numpy as np, pyarrow as pa, pyarrow.parquet as pq
from auditor.io import atomic_path
from auditor.train.data import synthetic_interactions
from auditor.train.loop import TrainConfig, save_checkpoint, train
n, out = int(sys.argv[1]), Path(sys.argv[2])
data = synthetic_interactions(n_users=max(600, n * 3 // 4), n_items=n, n_interactions=n * 75 // 2, zipf=1.0, seed=0)
log = pa.table({
    "user_id": pa.array(np.asarray(data.user_ids)[data.users], pa.int64()),
    "item_id": pa.array(np.asarray(data.item_ids)[data.items], pa.int64()),
})
with atomic_path(out / "interactions.parquet") as tmp:
    pq.write_table(log, tmp)
result = train(data, TrainConfig(optimizer="sgd", lr=10.0, loss="infonce-cos", dim=32, epochs=2, batch_size=1024, seed=0))
save_checkpoint(result, out / "model.pt")
"""


def generated_case(items: int) -> tuple[Path, Path]:
    """A model of ``items`` items and its log, trained once (about 40 s for 10,000 items)
    and kept in the temporary folder for later runs."""
    folder = Path(tempfile.gettempdir()) / f"popaudit-bench-{items}-items"
    model, log = folder / "model.pt", folder / "interactions.parquet"
    if not model.exists():
        folder.mkdir(exist_ok=True)
        print(f"generating a {items:,}-item model in {folder} ...", flush=True)
        subprocess.run([sys.executable, "-c", GENERATE_SCRIPT, str(items), str(folder)], check=True)
    return model, log


class Figures:
    """The fastest of each measurement over the rounds, for one interpreter."""

    def __init__(self) -> None:
        self.best: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        """CPU seconds of each command (the least over the rounds)."""
        self.imports: tuple[float, dict[str, float], list[str]] | None = None
        self.inner: dict[str, float] = {}

    def round(self, runs: dict[str, list[str]]) -> None:
        """Run each command once, keeping each one's fastest time so far."""
        for name, cmd in runs.items():
            seconds, cpu, done = wall(cmd)
            self.cpu[name] = min(self.cpu.get(name, float("inf")), cpu)
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
        self.report_check(best["check"], best["torch"], self.cpu["check"], self.cpu["torch"])
        print(f"  CPU beyond import torch frozen at exit ({self.cpu['torch_frozen']:.3f} s): "
              f"{self.cpu['check'] - self.cpu['torch_frozen']:+.3f} s")
        print(f"  imports (-X importtime)      {total:6.3f} s  ({total / best['torch']:5.2f}x import torch)")
        for name, seconds in sorted(per.items(), key=lambda kv: -kv[1]):
            if seconds >= 0.005:
                print(f"    {name:<26} {seconds:6.3f} s")
        self.report_audit()
        print("commands that read no torch file (import torch skipped)")
        for key, label in NO_TORCH_FILE.items():
            print(f"  {label:<28} {best[key]:6.3f} s  ({best[key] / best['torch']:4.2f}x import torch, "
                  f"{best[key] / best['python']:5.1f}x python)")
        groups = sorted({next(f for f in FORBIDDEN if m == f or m.startswith(f + ".")) for m in bad})
        counts = [f"{g} ({sum(1 for m in bad if m == g or m.startswith(g + '.'))} modules)" for g in groups]
        print("  forbidden modules loaded     " + (", ".join(counts) if counts else "none"))

    @staticmethod
    def report_check(check: float, torch: float, check_cpu: float, torch_cpu: float) -> None:
        """The check's wall time against ``import torch`` and against the goals, and the
        same in CPU seconds."""
        print(f"check end to end (--json)      {check:6.3f} s  ({check / torch:5.2f}x import torch, "
              f"{check / CHECK_GOAL:4.2f}x the {CHECK_GOAL:g} s goal)")
        over = check - torch
        verdict = "met" if over <= OVER_TORCH_GOAL else "not met"
        print(f"  beyond import torch          {over:6.3f} s  (goal <= {OVER_TORCH_GOAL:g} s: {verdict})")
        print(f"  CPU: check {check_cpu:6.3f} s, import torch {torch_cpu:6.3f} s "
              f"({check_cpu / torch_cpu:4.2f}x, {check_cpu - torch_cpu:+.3f} s)")

    def report_audit(self) -> None:
        """``run_audit`` and the probes within it, after the imports."""
        inner, check = self.inner, self.best["check"]
        print(f"  run_audit after imports      {inner['audit']:6.3f} s  ({inner['audit'] / check:5.1%} of check)")
        print(f"    numeric probes             {inner['probes']:6.3f} s  ({inner['probes'] / inner['audit']:5.1%} of run_audit)")
        print(f"    cross-Jacobian (C3)        {inner['cross_jacobian']:6.3f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=ROOT / "sample_data/biased.pt")
    parser.add_argument("--log", type=Path, default=ROOT / "sample_data/interactions.parquet")
    parser.add_argument("--repeat", type=int, default=3, help="interleaved rounds; the fastest counts")
    parser.add_argument(
        "--baseline-python", type=Path, default=None,
        help="another environment's interpreter (an older popaudit), timed in the same rounds",
    )
    parser.add_argument("--items", type=int, default=10_000,
                        help="also audit a generated model of this many items (0: none)")
    args = parser.parse_args()
    interpreters = {"this popaudit": sys.executable}
    if args.baseline_python is not None:
        interpreters["baseline"] = str(args.baseline_python)
    large = generated_case(args.items) if args.items > 0 else None
    figures = {name: Figures() for name in interpreters}
    scaled = {name: Figures() for name in interpreters}
    for _ in range(args.repeat):
        for name, py in interpreters.items():
            figures[name].round(commands(py, args.model, args.log))
            if large is not None:
                runs = commands(py, *large)
                scaled[name].round({key: runs[key] for key in ("check", "audit")})
    print(f"model {args.model.name}, log {args.log.name}; best of {args.repeat} interleaved rounds")
    for name, fig in figures.items():
        fig.report(name)
        if large is not None:
            print(f"-- {name}: a generated {args.items:,}-item model ({large[0].parent})")
            Figures.report_check(scaled[name].best["check"], fig.best["torch"], scaled[name].cpu["check"],
                                 fig.cpu["torch"])
            print(f"  CPU beyond import torch frozen at exit: {scaled[name].cpu['check'] - fig.cpu['torch_frozen']:+.3f} s")
            scaled[name].report_audit()
    if "baseline" in figures:
        compare(figures["this popaudit"], figures["baseline"])
        if large is not None:
            new, old = scaled["this popaudit"], scaled["baseline"]
            for key in ("check", "audit"):
                got = new.best[key] if key == "check" else new.inner[key]
                was = old.best[key] if key == "check" else old.inner[key]
                print(f"{key + f' ({args.items:,} items)':<30} {got / was:6.2f}")
            print(f"{f'check CPU ({args.items:,} items)':<30} {new.cpu['check'] / old.cpu['check']:6.2f}")


def compare(new: Figures, old: Figures) -> None:
    """This popaudit's figures over the baseline's, from the same rounds."""
    assert new.imports is not None and old.imports is not None
    print("-- this / baseline (same rounds)")
    for key in ("help", "check_help", "error", "check", *NO_TORCH_FILE):
        print(f"{key:<30} {new.best[key] / old.best[key]:6.2f}")
    print(f"{'check (CPU seconds)':<30} {new.cpu['check'] / old.cpu['check']:6.2f}")
    print(f"{'imports':<30} {new.imports[0] / old.imports[0]:6.2f}")
    for key in ("audit", "probes", "cross_jacobian"):
        print(f"{key:<30} {new.inner[key] / old.inner[key]:6.2f}")


if __name__ == "__main__":
    main()
