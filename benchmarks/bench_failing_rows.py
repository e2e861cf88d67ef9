"""Benchmark: ``popaudit batch`` over manifests of failing rows, time against row count.

A manifest written by someone else may list 100,000 rows that all fail. The batch must
finish in time proportional to the rows (issue #23, item 4): no row may cost a worker
round trip when it can fail before one, and the results file may not be rewritten once
per finished row (which is quadratic). Three kinds of failing rows are timed, each at
two sizes in the same run, in a subprocess running ``popaudit batch ... -q``:

* ``missing``: every row names a model file that does not exist (failed before dispatch);
* ``bad-cell``: every row has an out-of-range cell (``bootstrap`` of 10**9);
* ``garbage``: every row names a real file that is no model (each fails in a worker).

It prints seconds, rows per second, and the ratio of the per-row cost at the larger size
to that at the smaller one (1.0 is linear; quadratic work would show as about the size
ratio, here 10).

    python benchmarks/bench_failing_rows.py                  # 10,000 and 100,000 rows (garbage: 200 and 2,000)
    python benchmarks/bench_failing_rows.py --small 1000 --large 10000
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def manifest(folder: Path, kind: str, rows: int) -> Path:
    """A CSV manifest of ``rows`` failing rows of ``kind`` (and the files they name)."""
    path = folder / f"{kind}-{rows}.csv"
    if kind == "missing":
        lines = ["model"] + [f"missing-{i}.npy" for i in range(rows)]
    elif kind == "bad-cell":
        np.save(folder / "table.npy", np.ones((10, 4), np.float32))
        lines = ["model,bootstrap"] + ["table.npy,1000000000"] * rows
    else:
        (folder / "garbage.npy").write_bytes(b"\x93NUMPY not really a table")
        lines = ["model"] + ["garbage.npy"] * rows
    path.write_text("\n".join(lines) + "\n")
    return path


def run(path: Path, jobs: int) -> float:
    """Seconds ``popaudit batch`` takes over the manifest (every row must end as an error)."""
    out = path.with_suffix(".parquet")
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "auditor", "batch", str(path), "-o", str(out), "-q", "-j", str(jobs),
         "--bootstrap", "0", "--no-probes"],
        capture_output=True, text=True,
    )
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"batch failed ({done.returncode}): {done.stderr[-2000:]}")
    import pyarrow.parquet as pq

    statuses = pq.read_table(out, columns=["status"]).column("status").to_pylist()
    assert statuses and set(statuses) == {"error"}, set(statuses)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--large", type=int, default=100_000)
    parser.add_argument("--garbage-small", type=int, default=200)
    parser.add_argument("--garbage-large", type=int, default=2_000)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    sizes = {"missing": (args.small, args.large), "bad-cell": (args.small, args.large),
             "garbage": (args.garbage_small, args.garbage_large)}
    with tempfile.TemporaryDirectory(prefix="popaudit-bench-") as tmp:
        folder = Path(tmp)
        print(f"{'rows':>10} {'kind':>9} {'seconds':>9} {'rows/s':>10} {'per-row cost vs smaller':>24}")
        for kind, (small, large) in sizes.items():
            per_row: list[float] = []
            for rows in (small, large):
                seconds = run(manifest(folder, kind, rows), args.jobs)
                per_row.append(seconds / rows)
                ratio = f"{per_row[-1] / per_row[0]:.2f}x" if len(per_row) == 2 else "-"
                print(f"{rows:>10,} {kind:>9} {seconds:>9.1f} {rows / seconds:>10,.0f} {ratio:>24}", flush=True)


if __name__ == "__main__":
    main()
