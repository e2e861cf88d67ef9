"""Peak memory of `popaudit check` (frequency–norm audit) on a large table and log.

Default sizes are issue #2's: a 1M-item × 64-dim table and 100M interactions in Parquet.
The audit runs in a subprocess; its peak RSS is compared with the size of the log once
decompressed (rows × 16 bytes for two int64 columns) and with the table's size.

    python benchmarks/bench_check_memory.py                 # 1M × 64, 100M rows
    python benchmarks/bench_check_memory.py --rows 10000000 # quicker
"""

from __future__ import annotations

import argparse
import resource
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
        cmd = [sys.executable, "-m", "auditor", "check", str(table_path), "--interactions", str(log_path),
               "--no-retrieval", "--no-probes", "--format", "json", "-o", str(folder / "report.json")]
        t0 = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True)
        elapsed = time.perf_counter() - t0
        if done.returncode != 0:
            sys.exit(f"check failed ({done.returncode}): {done.stderr}")
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
        decompressed = args.rows * 16
        table_bytes = args.items * args.dim * 4
        print(f"check: {elapsed:.1f} s, peak RSS {peak / 2**30:.2f} GiB")
        print(f"log decompressed {decompressed / 2**30:.2f} GiB (file {log_path.stat().st_size / 2**30:.2f} GiB); "
              f"table {table_bytes / 2**30:.2f} GiB")
        print(f"peak / decompressed log = {peak / decompressed:.2f}")


if __name__ == "__main__":
    main()
