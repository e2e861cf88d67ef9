"""Benchmark: ``popaudit batch`` over many small models sharing one training log.

Generates (seeded) an ML-100K-size log (943 users, 1,682 items, 100,000 interactions,
Zipf popularity) as Parquet and ``--models`` item tables of that size (``.npy``, 64
dimensions; norms growing with training frequency by a different amount per model),
then times in the same run, each in a subprocess:

* ``popaudit batch`` over a manifest of ``--small`` rows and one of ``--large`` rows (the
  rows cycle through the models), ``-j --jobs``: seconds, rows per second, and the ratio
  of the per-row cost at the larger size to that at the smaller (1.0: flat, as issue 25
  asks up to a 10,000-row manifest; rewriting the whole results file per finished row
  would grow it with the size);
* the baseline: ``--separate`` rows as separate ``popaudit check`` processes, ``--jobs``
  at a time, with the same audit options: rows per second, and the batch's speed-up.

``--profile N`` also audits N rows in this process as one of ``--jobs`` batch workers
does (one ``InputCache``, one plugin manager, cores / jobs kernel threads) and prints
where a row's time goes: each phase by wall clock (no profiler, whose per-call cost
would inflate Python-heavy phases), the rows per second ``--jobs`` such workers would
reach with the top-K kernel at 15 ms (issue 25's kernel goal), then the functions with
the most cumulative time under cProfile. Every audit runs
with ``--bootstrap B`` (default 0: the confidence interval's resampling is the audit's
own cost, the same in a batch and in ``check``; ``--bootstrap 1000`` is the command's
default) and ``--no-probes`` (an ``.npy`` table has no training set-up to probe).

First, the fixed start-up: a batch of one row per worker, against ``python -c "import
torch"`` in the same run (its floor: workers need torch); last, the rate once started
(the rows the larger manifest adds over the seconds they add).

Goal (issue 25): >= 20 rows/s at ``-j 2``, per-row cost flat up to 10,000 rows.

    python benchmarks/bench_batch.py                              # 50 and 200 rows, -j 2
    python benchmarks/bench_batch.py --small 100 --large 1000 --profile 20
    python benchmarks/bench_batch.py --small 1000 --large 10000 --separate 0
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

N_USERS, N_ITEMS, N_INTERACTIONS, DIM = 943, 1682, 100_000, 64
GOAL_ROWS_PER_S = 20.0
# The phases of one audit the profile times (module, function), by wall clock around every
# reference to the function (no profiler: its per-call cost would inflate Python-heavy phases).
PHASES = {
    "audit + results record (a worker's row: audit_job)": ("auditor.batch.workers", "audit_job"),
    "  load model + log (load_inputs)": ("auditor.loading.inputs", "load_inputs"),
    "    queried users from the log (population; kept per worker)": ("auditor.loading.population", "population_of"),
    "    item counts (count_item_ids; kept per worker)": ("auditor.loading.counting", "count_item_ids"),
    "  frequency-norm statistics": ("auditor.audit", "_frequency_norm"),
    "  retrieval (lists + measures)": ("auditor.retrieval.measure", "measure_retrieval"),
    "    exact top-K kernel": ("auditor.retrieval.scorings", "multi_scoring_topk"),
    "    popular lists (seen items filtered)": ("auditor.retrieval.serving", "popular_lists"),
    "    list measures": ("auditor.retrieval.measure", "_measure_lists"),
    "  results record (report JSON, flat metrics)": ("auditor.batch.workers", "result_record"),
    "results file (journal appends, rewrites; main process)": ("auditor.batch.run", "_save_records"),
}
KERNEL_PHASE = "    exact top-K kernel"
KERNEL_AFTER_FIX = 0.015
"""Seconds a row's kernel is expected to take once the one-pass kernel is fixed (issue 25)."""


class PhaseTimer:
    """Wall seconds spent in each phase: every module attribute bound to a phase's function
    is replaced by a timing wrapper while the timer is active."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self._undo: list[tuple[Any, str, Any]] = []

    def __enter__(self) -> "PhaseTimer":
        import importlib

        for label, (module_name, name) in PHASES.items():
            original = getattr(importlib.import_module(module_name), name)
            wrapper = self._timed(label, original)
            for module in list(sys.modules.values()):
                for attr, value in list(getattr(module, "__dict__", {}).items()):
                    if value is original:
                        self._undo.append((module, attr, value))
                        setattr(module, attr, wrapper)
        return self

    def _timed(self, label: str, function: Any) -> Any:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds[label] += time.perf_counter() - start

        return timed

    def __exit__(self, *exc: object) -> None:
        for module, attr, value in reversed(self._undo):
            setattr(module, attr, value)


def make_inputs(folder: Path, models: int, seed: int) -> list[Path]:
    """The shared log (``folder/log.parquet``) and ``models`` item tables; returns the tables."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    weights = np.arange(1, N_ITEMS + 1, dtype=np.float64) ** -1.0
    ranks = rng.choice(N_ITEMS, N_INTERACTIONS, p=weights / weights.sum())
    items = rng.permutation(N_ITEMS)[ranks]  # popularity is not id order
    users = rng.integers(0, N_USERS, N_INTERACTIONS)
    pq.write_table(pa.table({"user_id": users, "item_id": items}), folder / "log.parquet")
    growth = np.log1p(np.bincount(items, minlength=N_ITEMS)).astype(np.float32)[:, None]
    tables = []
    for m in range(models):
        emb = rng.standard_normal((N_ITEMS, DIM)).astype(np.float32)
        emb /= np.linalg.norm(emb, axis=1, keepdims=True)
        emb *= 1 + (m / max(1, models - 1)) * growth  # from no norm-frequency link to a strong one
        tables.append(folder / f"model{m}.npy")
        np.save(tables[-1], emb)
    return tables


def write_manifest(folder: Path, tables: list[Path], rows: int) -> Path:
    path = folder / f"manifest-{rows}.csv"
    lines = ["model,label"] + [f"{tables[r % len(tables)].name},row{r}" for r in range(rows)]
    path.write_text("\n".join(lines) + "\n")
    return path


def run_batch(manifest: Path, jobs: int, audit_args: list[str]) -> dict[str, Any]:
    """Wall seconds of ``popaudit batch`` over ``manifest`` (every row must be ok) and the
    rows' own audit seconds (the results' ``seconds`` column)."""
    import pyarrow.parquet as pq

    out = manifest.with_suffix(".parquet")
    cmd = [sys.executable, "-m", "auditor", "batch", str(manifest), "-o", str(out), "-q", "-j", str(jobs),
           "--interactions", str(manifest.parent / "log.parquet"), *audit_args]
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"batch failed ({done.returncode}): {done.stderr[-2000:]}")
    table = pq.read_table(out, columns=["status", "error", "seconds"]).to_pydict()
    bad = [e for s, e in zip(table["status"], table["error"]) if s != "ok"]
    if bad:
        raise SystemExit(f"{len(bad)} rows failed, e.g. {bad[0]}")
    return {"wall": wall, "audit_seconds": float(np.sum(table["seconds"])), "rows": len(table["status"])}


def start_up(folder: Path, tables: list[Path], jobs: int, audit_args: list[str]) -> str:
    """The batch's fixed cost: the wall of a batch of one row per worker, against its floor
    timed in the same run, ``python -c "import torch"`` (a worker needs torch; the batch
    starts the server its workers fork from first, so everything else overlaps it)."""
    floor = []
    for _ in range(2):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import torch"], check=True)
        floor.append(time.perf_counter() - start)
    walls = [run_batch(write_manifest(folder, tables, jobs), jobs, audit_args)["wall"] for _ in range(2)]
    return (f"start-up: a batch of {jobs} row(s), one per worker, {min(walls):.2f} s; python + import torch "
            f"{min(floor):.2f} s (best of two each)")


def run_separate(folder: Path, tables: list[Path], rows: int, jobs: int, audit_args: list[str]) -> float:
    """Wall seconds of ``rows`` separate ``popaudit check`` processes, ``jobs`` at a time."""

    def one(r: int) -> None:
        cmd = [sys.executable, "-m", "auditor", "check", str(tables[r % len(tables)]), "-q",
               "--interactions", str(folder / "log.parquet"), *audit_args]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode not in (0, 3):
            raise SystemExit(f"check failed ({done.returncode}): {done.stderr[-2000:]}")

    start = time.perf_counter()
    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(one, range(rows)))
    return time.perf_counter() - start


def profile_rows(folder: Path, tables: list[Path], rows: int, bootstrap: int, jobs: int) -> str:
    """Where a row's time goes when ``rows`` audits run in this process as one batch
    worker runs them (``run_batch(inline=True)``: one InputCache, one plugin manager, the
    results writer), with the threads one of ``jobs`` workers gets (cores / jobs): each
    phase by wall clock, then the functions with the most cumulative time under cProfile."""
    import torch

    from auditor.batch import run_batch

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // jobs))
    manifest = write_manifest(folder, tables, rows)
    defaults = {"interactions": folder / "log.parquet", "bootstrap": bootstrap, "probes": False}
    # One row first: the imports (a worker's start-up, paid once per worker) stay out of the profile.
    start = time.perf_counter()
    run_batch(write_manifest(folder, tables, 1), folder / "warm.parquet", defaults=defaults, inline=True)
    first = time.perf_counter() - start
    with PhaseTimer() as timer:
        start = time.perf_counter()
        run_batch(manifest, folder / "timed.parquet", defaults=defaults, inline=True)
        wall = time.perf_counter() - start
    lines = [f"profile ({torch.get_num_threads()} thread(s), as one of {jobs} workers): a first row inline (imports: "
             f"a worker's start-up) {first:.2f} s; then {rows} rows in {wall:.2f} s ({wall / rows * 1000:.0f} ms a row; "
             "the worker cache of the first row kept, as a pool worker keeps it); per row, by wall clock:"]
    for label, seconds in timer.seconds.items():
        lines.append(f"  {label:62s} {seconds / rows * 1000:7.1f} ms  ({seconds / wall:5.1%})")
    kernel = timer.seconds[KERNEL_PHASE] / rows
    after = wall / rows - kernel + KERNEL_AFTER_FIX
    lines.append(f"  with the kernel at {KERNEL_AFTER_FIX * 1000:.0f} ms instead of {kernel * 1000:.0f} ms: "
                 f"{after * 1000:.0f} ms a row, {jobs / after:.1f} rows/s for {jobs} such workers (no start-up, no contention)")
    profiler = cProfile.Profile()
    profiler.enable()
    run_batch(manifest, folder / "profiled.parquet", defaults=defaults, inline=True)
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(25)
    return "\n".join(lines) + "\n" + text.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", type=int, default=50, help="rows of the smaller manifest (default 50)")
    parser.add_argument("--large", type=int, default=200, help="rows of the larger manifest (default 200)")
    parser.add_argument("--separate", type=int, default=10, help="rows run as separate check processes (0: skip)")
    parser.add_argument("--jobs", type=int, default=2, help="-j of the batch, and separate checks at a time")
    parser.add_argument("--models", type=int, default=8, help="distinct model files the rows cycle through")
    parser.add_argument("--bootstrap", type=int, default=0, help="--bootstrap of every audit (default 0)")
    parser.add_argument("--profile", type=int, default=0, help="also profile this many rows in-process")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    audit_args = ["--bootstrap", str(args.bootstrap), "--no-probes"]
    with tempfile.TemporaryDirectory(prefix="bench_batch_") as tmp:
        folder = Path(tmp)
        tables = make_inputs(folder, args.models, args.seed)
        print(f"{args.models} models of {N_ITEMS:,} x {DIM} sharing a log of {N_INTERACTIONS:,} interactions "
              f"({N_USERS} users); -j {args.jobs}, {' '.join(audit_args)}")
        print(start_up(folder, tables, args.jobs, audit_args), flush=True)
        print(f"{'rows':>7} {'seconds':>8} {'rows/s':>7} {'audit s/row':>12} {'overhead':>9} {'per-row cost vs smaller':>24}")
        per_row: list[float] = []
        rates = []
        for rows in (args.small, args.large):
            done = run_batch(write_manifest(folder, tables, rows), args.jobs, audit_args)
            per_row.append(done["wall"] / rows)
            rates.append(rows / done["wall"])
            # Worker time not spent auditing rows: start-up, dispatch, results (of jobs x wall).
            overhead = 1 - done["audit_seconds"] / (args.jobs * done["wall"])
            ratio = f"{per_row[-1] / per_row[0]:.2f}x" if len(per_row) == 2 else "-"
            print(f"{rows:>7,} {done['wall']:>8.1f} {rates[-1]:>7.1f} {done['audit_seconds'] / rows:>12.3f} "
                  f"{overhead:>9.0%} {ratio:>24}", flush=True)
        if args.separate:
            wall = run_separate(folder, tables, args.separate, args.jobs, audit_args)
            print(f"separate check processes: {args.separate} rows in {wall:.1f} s = {args.separate / wall:.1f} rows/s; "
                  f"batch {rates[-1] / (args.separate / wall):.1f}x faster")
        walls = [rows / rate for rows, rate in zip((args.small, args.large), rates)]
        added = walls[1] - walls[0]
        if added > 0:
            print(f"once started: {(args.large - args.small) / added:.1f} rows/s "
                  f"(the {args.large - args.small:,} rows the larger manifest adds, over the seconds they add)")
        else:  # the start-up's noise exceeded the added rows' cost: no rate to give
            print(f"once started: not measured (the larger manifest took {-added:.1f} s less; "
                  "rerun with more rows or on an idle machine)")
        goal = "met" if rates[-1] >= GOAL_ROWS_PER_S else "NOT met"
        print(f"goal >= {GOAL_ROWS_PER_S:.0f} rows/s at -j {args.jobs}: {goal} ({rates[-1]:.1f} rows/s); "
              f"per-row cost at {args.large:,} rows {per_row[1] / per_row[0]:.2f}x that at {args.small:,}")
        if args.profile:
            print(profile_rows(folder, tables, args.profile, args.bootstrap, args.jobs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
