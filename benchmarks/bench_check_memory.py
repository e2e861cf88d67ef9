"""Peak memory of `popaudit check` on a large table and log, with history queries.

Default sizes: a 1M-item × 64-dim table (no user table, so retrieval queries are each
user's mean history vector) and a 100M-row Zipf log over 1M users, in Parquet. Each run
is a subprocess whose peak RSS is read with wait4(); the baseline, measured in the same
run, is the frequency–norm audit alone (`--no-retrieval`). Retrieval with history
queries streams the log twice and keeps only the sampled users' sums, so it should add
little beyond the table's normalised copy.

    python benchmarks/bench_check_memory.py                 # 1M × 64, 100M rows
    python benchmarks/bench_check_memory.py --rows 10000000 # quicker
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def make_inputs(folder: Path, n_items: int, dim: int, rows: int, seed: int = 0) -> tuple[Path, Path]:
    """A float32 table and a Zipf log written row group by row group (bounded memory)."""
    rng = np.random.default_rng(seed)
    table_path, log_path = folder / "items.npy", folder / "log.parquet"
    table = np.lib.format.open_memmap(table_path, mode="w+", dtype=np.float32, shape=(n_items, dim))
    for start in range(0, n_items, 250_000):
        stop = min(n_items, start + 250_000)
        table[start:stop] = rng.normal(0, 0.1, (stop - start, dim))
    table.flush()
    del table
    schema = pa.schema([("user_id", pa.int64()), ("item_id", pa.int64())])
    chunk = 5_000_000
    with pq.ParquetWriter(log_path, schema) as writer:
        for start in range(0, rows, chunk):
            size = min(chunk, rows - start)
            items = (rng.zipf(1.3, size) - 1) % n_items
            users = rng.integers(0, 1_000_000, size)
            writer.write_table(pa.table({"user_id": users, "item_id": items}, schema=schema), row_group_size=1_000_000)
    return table_path, log_path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--rows", type=int, default=100_000_000)
    parser.add_argument("--workdir", type=Path, help="keep the generated files here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.workdir or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        table_path, log_path = make_inputs(folder, args.items, args.dim, args.rows)
        print(f"generated {args.items:,} × {args.dim} table and {args.rows:,}-row log in {time.perf_counter() - t0:.1f} s")
        base = [sys.executable, "-m", "auditor", "check", str(table_path), "--interactions", str(log_path),
                "--no-probes", "--format", "json", "-o", str(folder / "report.json")]
        runs = {
            "frequency-norm only (--no-retrieval)": base + ["--no-retrieval"],
            "with retrieval, history queries (10,000 users)": base + ["--queries", "history", "-k", "10", "-k", "100"],
        }
        peaks = {}
        for name, cmd in runs.items():
            seconds, peak = run_measured(cmd)
            peaks[name] = peak
            print(f"{name}: {seconds:.1f} s, peak RSS {peak / 2**30:.2f} GiB")
        decompressed = args.rows * 16
        table_bytes = args.items * args.dim * 4
        print(f"log decompressed {decompressed / 2**30:.2f} GiB (file {log_path.stat().st_size / 2**30:.2f} GiB); "
              f"table {table_bytes / 2**30:.2f} GiB")
        first, second = peaks.values()
        print(f"peak with history retrieval / peak without retrieval = {second / first:.2f}")
        print(f"peak with history retrieval / decompressed log = {second / decompressed:.3f}")


def run_measured(cmd: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (bytes) of one command (os.wait4 gives this child's own)."""
    t0 = time.perf_counter()
    child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    elapsed = time.perf_counter() - t0
    stderr = child.stderr.read().decode() if child.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"check failed: {stderr}")
    return elapsed, usage.ru_maxrss * 1024


if __name__ == "__main__":
    main()
