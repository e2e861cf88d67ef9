"""Benchmark: popaudit's streaming item counts against DuckDB's GROUP BY on one Parquet log.

Generates (seeded, vectorised, row group by row group) a Parquet interaction log of
``--rows`` interactions with int64 ``user_id`` and ``item_id`` columns, items drawn from
a Zipf law over ``--items`` ids (ids shuffled so popularity is not id order), then times
in the same run, each in its own subprocess:

* popaudit: ``count_item_ids(LogSpec(path), need_users=False, need_n_users=False)``
  (item counts alone: the user column is not read)
* DuckDB:   ``SELECT item_id, count(*) FROM read_parquet(path) GROUP BY item_id``
* with ``--with-users``, also the pass an audit with retrieval makes:
  ``count_item_ids(LogSpec(path), need_users=True)`` against DuckDB's ``count(DISTINCT user_id)``
  per item plus the number of distinct users
* with ``--with-n-users``, also ``count_item_ids(LogSpec(path), need_users=False)`` (item
  counts and the number of distinct users) against the same in DuckDB

and checks both give the same counts. Timings cover the counting call only (imports and
interpreter start excluded). Peak memory is each child's peak resident set size
(``VmHWM`` from /proc, or ``ru_maxrss``); the child resets its high-water mark after
importing its libraries (``/proc/self/clear_refs``), so "counting peak" is the peak
while counting and "import baseline" what the libraries alone hold.

Goals (issue 25): popaudit's item counts within 1.0x of DuckDB's time, with distinct
users per item within 1.2x, and no more peak memory than before (issue 7 asked 1.5x).
The engines run interleaved (DuckDB, popaudit, DuckDB, ...) so that load from other work
on the machine falls on both alike; ``--repeat`` keeps each engine's best run. Without
DuckDB installed only popaudit is timed (and said so).

    python benchmarks/bench_counting.py                       # 20M rows, 1M items (~1 min)
    python benchmarks/bench_counting.py --full --with-users   # the issue's 100M rows
    python benchmarks/bench_counting.py --rows 50_000_000 --repeat 3 --json figures.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np


def generate(path: Path, rows: int, items: int, users: int, exponent: float, row_group: int, seed: int) -> float:
    """Write the log; returns seconds taken. Memory is O(row_group + items)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    start = time.perf_counter()
    rng = np.random.default_rng(seed)
    weights = np.arange(1, items + 1, dtype=np.float64) ** -exponent
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    ids = rng.permutation(items).astype(np.int64)  # rank -> item id
    schema = pa.schema([("user_id", pa.int64()), ("item_id", pa.int64())])
    with pq.ParquetWriter(path, schema, compression="snappy") as writer:
        for offset in range(0, rows, row_group):
            n = min(row_group, rows - offset)
            ranks = np.searchsorted(cdf, rng.random(n), side="right")
            np.minimum(ranks, items - 1, out=ranks)  # guard the float edge u == cdf[-1]
            user = rng.integers(0, users, n, dtype=np.int64)
            writer.write_table(pa.table({"user_id": user, "item_id": ids[ranks]}, schema=schema), row_group_size=n)
    return time.perf_counter() - start


def _rss_kib(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


ENGINES = ("duckdb", "popaudit", "duckdb-users", "popaudit-users", "duckdb-n-users", "popaudit-n-users")
PAIRS = (("popaudit", "duckdb"), ("popaudit-users", "duckdb-users"), ("popaudit-n-users", "duckdb-n-users"))
DEFAULT_ROWS = 20_000_000
FULL_ROWS = 100_000_000
# Issue 25's goals: popaudit's time over DuckDB's, per pair of engines.
GOALS = {"popaudit": 1.0, "popaudit-users": 1.2, "popaudit-n-users": 1.0}
WHAT = {"popaudit": "item counts", "popaudit-users": "with distinct users per item",
        "popaudit-n-users": "item counts + distinct users overall"}
DUCKDB_SQL = {
    "duckdb": "SELECT item_id, count(*) AS n FROM read_parquet($p) GROUP BY item_id",
    # What an audit with retrieval needs: interactions and distinct users per item, and
    # the number of distinct users.
    "duckdb-users": "SELECT item_id, count(*) AS n, count(DISTINCT user_id) AS u, "
    "(SELECT count(DISTINCT user_id) FROM read_parquet($p)) AS n_users "
    "FROM read_parquet($p) GROUP BY item_id",
    # What count_item_ids(need_users=False) returns by default: item counts and distinct users overall.
    "duckdb-n-users": "SELECT item_id, count(*) AS n, "
    "(SELECT count(DISTINCT user_id) FROM read_parquet($p)) AS n_users FROM read_parquet($p) GROUP BY item_id",
}


def worker(engine: str, path: Path, out: Path, threads: int | None) -> dict[str, Any]:
    """Count in this process (called in a child); save sorted (ids, counts) to ``out``."""
    if engine.startswith("popaudit"):
        import pyarrow as pa

        from auditor.loading import count_item_ids
        from auditor.values import LogSpec

        if threads:
            pa.set_cpu_count(threads)
    else:
        import duckdb

        con = duckdb.connect()
        if threads:
            con.execute(f"SET threads = {int(threads)}")
    baseline = _rss_kib("VmRSS")
    reset = _reset_peak()
    users = None
    n_users = None
    start = time.perf_counter()
    if engine.startswith("popaudit"):
        # "popaudit": item counts alone, as DuckDB's GROUP BY (the user column is not read).
        counts = count_item_ids(LogSpec(path), need_users=engine == "popaudit-users", need_n_users=engine != "popaudit")
        ids, n = np.asarray(counts.ids), np.asarray(counts.counts)
        users, n_users = counts.user_counts, counts.n_users
    else:
        columns = con.execute(DUCKDB_SQL[engine], {"p": str(path)}).fetchnumpy()
        ids, n = np.asarray(columns["item_id"]), np.asarray(columns["n"])
        if "u" in columns:
            users = np.asarray(columns["u"])
        if "n_users" in columns:
            n_users = int(columns["n_users"][0])
    seconds = time.perf_counter() - start
    peak = _rss_kib("VmHWM") if reset else None
    if peak is None:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    order = np.argsort(ids, kind="stable")
    saved = {"ids": ids[order].astype(np.int64), "counts": n[order].astype(np.int64)}
    if users is not None and engine.endswith("-users"):
        saved["users"] = np.asarray(users)[order].astype(np.int64)
    np.savez(out, **saved)
    return {
        "engine": engine,
        "seconds": seconds,
        "peak_rss_mib": peak / 1024,
        "import_baseline_mib": (baseline or 0) / 1024,
        "peak_reset": reset,
        "threads": threads or os.cpu_count(),
        "distinct_items": int(ids.shape[0]),
        "n_users": n_users,
    }


def run_child(engine: str, path: Path, out: Path, threads: int | None) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--worker", engine, "--path", str(path), "--out", str(out)]
    if threads:
        cmd += ["--threads", str(threads)]
    wall = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{engine} child failed ({proc.returncode}):\n{proc.stderr}")
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    figures["child_wall_seconds"] = time.perf_counter() - wall
    # Max RSS over the children waited for so far: a cross-check of the child's own figure.
    figures["rusage_children_max_mib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=lambda s: int(s.replace("_", "")), default=DEFAULT_ROWS, help="interactions in the generated log (default 20M)")
    parser.add_argument("--full", action="store_true", help=f"the issue's size: {FULL_ROWS:,} rows (overrides --rows)")
    parser.add_argument("--items", type=lambda s: int(s.replace("_", "")), default=1_000_000, help="distinct item ids (default 1M)")
    parser.add_argument("--users", type=lambda s: int(s.replace("_", "")), default=5_000_000, help="user ids, drawn uniformly (default 5M)")
    parser.add_argument("--zipf", type=float, default=1.0, help="Zipf exponent of item popularity")
    parser.add_argument("--row-group", type=lambda s: int(s.replace("_", "")), default=1_000_000, help="rows per Parquet row group (and per generation step)")
    parser.add_argument("--seed", type=int, default=0, help="generator seed")
    parser.add_argument("--threads", type=int, default=None, help="threads for both engines (default: all cores)")
    parser.add_argument("--repeat", type=int, default=1, help="timed runs per engine (best is reported)")
    parser.add_argument("--path", type=Path, help="log file (generated when missing)")
    parser.add_argument("--keep", action="store_true", help="keep the generated log")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--with-users", action="store_true", help="also time the audit's full pass: distinct users per item (need_users=True) vs DuckDB count(DISTINCT user_id)")
    parser.add_argument("--with-n-users", action="store_true", help="also time count_item_ids' default call (item counts and distinct users overall) vs DuckDB's")
    parser.add_argument("--worker", choices=ENGINES, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker:
        print(json.dumps(worker(args.worker, args.path, args.out, args.threads)))
        return 0

    if args.full:
        args.rows = FULL_ROWS
    have_duckdb = importlib.util.find_spec("duckdb") is not None
    if not have_duckdb:
        print("duckdb is not installed: timing popaudit alone, no ratios (pip install duckdb to compare)")
    with tempfile.TemporaryDirectory(prefix="bench_counting_") as tmp:
        tmpdir = Path(tmp)
        path = args.path or tmpdir / f"log_{args.rows}.parquet"
        generated = None
        if not path.exists():
            generated = generate(path, args.rows, args.items, args.users, args.zipf, args.row_group, args.seed)
            print(f"generated {args.rows:,} rows in {generated:.1f} s -> {path} ({path.stat().st_size / 2**20:,.0f} MiB)")
        chosen = ENGINES[:2] + (ENGINES[2:4] if args.with_users else ()) + (ENGINES[4:] if args.with_n_users else ())
        engines = [e for e in chosen if have_duckdb or e.startswith("popaudit")]
        results = _timed(engines, path, tmpdir, args.threads, args.repeat)
        saved = {engine: np.load(tmpdir / f"{engine}.npz") for engine in engines}
        figures = _figures(args, path, generated, results, saved)
        if args.keep and args.path is None:
            kept = Path.cwd() / path.name
            os.replace(path, kept)
            figures["kept"] = str(kept)
    _print(figures, results)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    complete = generated is None or figures["total_counted"] == args.rows
    return 0 if figures["counts_identical"] is not False and complete else 1


def _timed(engines: list[str], path: Path, tmpdir: Path, threads: int | None, repeat: int) -> dict[str, dict[str, Any]]:
    """Each engine's best of ``repeat`` runs, the engines interleaved round by round."""
    runs: dict[str, list[dict[str, Any]]] = {engine: [] for engine in engines}
    for _ in range(repeat):
        for engine in engines:
            runs[engine].append(run_child(engine, path, tmpdir / f"{engine}.npz", threads))
    results = {}
    for engine, done in runs.items():
        results[engine] = min(done, key=lambda r: r["seconds"])
        results[engine]["all_seconds"] = [r["seconds"] for r in done]
    return results


def _figures(
    args: argparse.Namespace, path: Path, generated: float | None, results: dict[str, dict[str, Any]], saved: dict[str, Any]
) -> dict[str, Any]:
    """Counts checked against DuckDB's (None without DuckDB), ratios and goals."""
    same: bool | None = None
    reference = saved.get("duckdb", saved["popaudit"])
    if "duckdb" in saved:
        same = all(
            np.array_equal(saved[e]["ids"], reference["ids"]) and np.array_equal(saved[e]["counts"], reference["counts"])
            for e in saved
        )
        if "duckdb-users" in saved:
            same = same and np.array_equal(saved["popaudit-users"]["users"], saved["duckdb-users"]["users"])
            same = same and results["popaudit-users"]["n_users"] == results["duckdb-users"]["n_users"]
        if "duckdb-n-users" in saved:
            same = same and results["popaudit-n-users"]["n_users"] == results["duckdb-n-users"]["n_users"]
    ratios = {
        pop: results[pop]["seconds"] / results[duck]["seconds"]
        for pop, duck in PAIRS
        if pop in results and duck in results
    }
    peaks = {
        pop: _added(results[pop]) / max(_added(results[duck]), 1.0)
        for pop, duck in PAIRS
        if pop in results and duck in results
    }
    return {
        "rows": args.rows,
        "items": args.items,
        "file_mib": path.stat().st_size / 2**20,
        "generate_seconds": generated,
        "cpu_count": os.cpu_count(),
        "repeat": args.repeat,
        "counts_identical": same,
        "total_counted": int(reference["counts"].sum()),
        "time_ratio_popaudit_over_duckdb": ratios.get("popaudit"),
        "time_ratios": ratios,
        "peak_rss_ratios": peaks,
        "goals": GOALS,
        "goals_met": {pop: ratios[pop] <= goal for pop, goal in GOALS.items() if pop in ratios},
        **{engine: results[engine] for engine in results},
    }


def _added(result: dict[str, Any]) -> float:
    """MiB the counting added to the child's resident memory (peak over the import baseline)."""
    return float(result["peak_rss_mib"] - result["import_baseline_mib"])


def _print(figures: dict[str, Any], results: dict[str, dict[str, Any]]) -> None:
    for engine in results:
        r = figures[engine]
        print(
            f"{engine:14s} {r['seconds']:8.2f} s (runs {', '.join(f'{s:.2f}' for s in r['all_seconds'])})   "
            f"peak RSS {r['peak_rss_mib']:6.0f} MiB, counting adds {_added(r):5.0f} MiB over the imports' "
            f"{r['import_baseline_mib']:.0f} MiB   threads {r['threads']}"
        )
    for pop, ratio in figures["time_ratios"].items():
        goal = GOALS[pop]
        print(f"ratio popaudit/duckdb, {WHAT[pop]}: {ratio:.2f}x time, {figures['peak_rss_ratios'][pop]:.2f}x memory added "
              f"(goal <= {goal}x time: {'met' if ratio <= goal else 'NOT met'})")
    checked = {True: "identical to DuckDB's", False: "DIFFERENT from DuckDB's", None: "not checked (no DuckDB)"}
    print(f"counts {checked[figures['counts_identical']]} ({figures['total_counted']:,} interactions, "
          f"{figures['popaudit']['distinct_items']:,} items)")


if __name__ == "__main__":
    raise SystemExit(main())
