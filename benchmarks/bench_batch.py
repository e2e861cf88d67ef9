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

``--profile N`` also audits N rows in this process as a batch worker does (one
``InputCache``, one plugin manager) under cProfile and prints where a row's time goes:
the audit's phases and the functions with the most cumulative time. Every audit runs
with ``--bootstrap B`` (default 0: the confidence interval's resampling is the audit's
own cost, the same in a batch and in ``check``; ``--bootstrap 1000`` is the command's
default) and ``--no-probes`` (an ``.npy`` table has no training set-up to probe).

Goal (issue 25): >= 20 rows/s at ``-j 2``, per-row cost flat up to 10,000 rows.

    python benchmarks/bench_batch.py                              # 50 and 200 rows, -j 2
    python benchmarks/bench_batch.py --small 100 --large 1000 --profile 20
    python benchmarks/bench_batch.py --small 1000 --large 10000 --separate 0
"""

from __future__ import annotations

import argparse
import cProfile
import io
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
# The phases of one audit that the profile reports (function names as cProfile sees them).
PHASES = {
    "load model + log (load_inputs)": ("inputs.py", "load_inputs"),
    "  queried users from the log (population)": ("population.py", "load_population"),
    "  item counts (count_item_ids; cached per worker)": ("counting.py", "count_item_ids"),
    "frequency-norm statistics": ("audit.py", "_frequency_norm"),
    "retrieval (lists + measures)": ("measure.py", "measure_retrieval"),
    "  exact top-K kernel": ("scorings.py", "multi_scoring_topk"),
    "results record (report JSON, flat metrics)": ("workers.py", "result_record"),
}


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


def profile_rows(folder: Path, tables: list[Path], rows: int, bootstrap: int) -> str:
    """cProfile of ``rows`` audits run in this process as one batch worker runs them
    (``run_batch(inline=True)``: one InputCache, one plugin manager, the results writer)."""
    from auditor.batch import run_batch

    manifest = write_manifest(folder, tables, rows)
    defaults = {"interactions": folder / "log.parquet", "bootstrap": bootstrap, "probes": False}
    # One row first: the imports (a worker's start-up, paid once per worker) stay out of the profile.
    start = time.perf_counter()
    run_batch(write_manifest(folder, tables, 1), folder / "warm.parquet", defaults=defaults, inline=True)
    first = time.perf_counter() - start
    profiler = cProfile.Profile()
    start = time.perf_counter()
    profiler.enable()
    run_batch(manifest, folder / "profiled.parquet", defaults=defaults, inline=True)
    profiler.disable()
    wall = time.perf_counter() - start
    stats = pstats.Stats(profiler)
    lines = [f"profile: a first row inline (imports: a worker's start-up) {first:.2f} s; then {rows} rows in "
             f"{wall:.2f} s ({wall / rows * 1000:.0f} ms a row; the worker cache of the first row kept, as a pool worker keeps it); per row:"]
    entries: dict[tuple[str, int, str], Any] = stats.stats  # type: ignore[attr-defined]
    for label, (file, function) in PHASES.items():
        seconds = sum(v[3] for (f, _, name), v in entries.items() if f.endswith(file) and name == function)
        lines.append(f"  {label:52s} {seconds / rows * 1000:7.1f} ms  ({seconds / wall:5.1%})")
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
        goal = "met" if rates[-1] >= GOAL_ROWS_PER_S else "NOT met"
        print(f"goal >= {GOAL_ROWS_PER_S:.0f} rows/s at -j {args.jobs}: {goal} ({rates[-1]:.1f} rows/s); "
              f"per-row cost at {args.large:,} rows {per_row[1] / per_row[0]:.2f}x that at {args.small:,}")
        if args.profile:
            print(profile_rows(folder, tables, args.profile, args.bootstrap))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
