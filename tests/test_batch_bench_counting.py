"""benchmarks/bench_counting.py at a tiny size: seeded Zipf log, popaudit counts = DuckDB counts."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import numpy as np
import pyarrow.parquet as pq
import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_counting.py"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_counting", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_log_is_seeded_zipf_in_row_groups(tmp_path: Path) -> None:
    bench = _bench()
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    bench.generate(a, 200_000, 1000, 50, 1.0, 30_000, seed=5)
    bench.generate(b, 200_000, 1000, 50, 1.0, 30_000, seed=5)
    meta = pq.ParquetFile(a).metadata
    assert meta.num_rows == 200_000 and meta.num_row_groups == 7  # 6 x 30,000 + 20,000
    ta, tb = pq.read_table(a), pq.read_table(b)
    assert ta.equals(tb)
    assert str(ta.schema.field("item_id").type) == "int64" and str(ta.schema.field("user_id").type) == "int64"
    counts = np.sort(np.bincount(ta.column("item_id").to_numpy(), minlength=1000))[::-1]
    harmonic = (1.0 / np.arange(1, 1001)).sum()
    # Zipf(1): the r-th most popular item gets 1/(r H_n) of the interactions.
    assert counts[0] / 200_000 == pytest.approx(1 / harmonic, rel=0.05)
    assert counts[9] / 200_000 == pytest.approx(1 / (10 * harmonic), rel=0.15)


def test_benchmark_counts_match_duckdb(tmp_path: Path) -> None:
    pytest.importorskip("duckdb")
    bench = _bench()
    figures_path = tmp_path / "figures.json"
    code = bench.main(
        ["--rows", "60000", "--items", "2000", "--users", "300", "--row-group", "25000",
         "--path", str(tmp_path / "log.parquet"), "--json", str(figures_path), "--with-users"]
    )
    figures = json.loads(figures_path.read_text())
    assert code == 0 and figures["counts_identical"] is True
    assert figures["total_counted"] == 60_000
    for engine in ("duckdb", "popaudit", "duckdb-users", "popaudit-users"):
        assert figures[engine]["seconds"] > 0 and figures[engine]["peak_rss_mib"] > 0
    assert figures["popaudit-users"]["n_users"] == figures["duckdb-users"]["n_users"] <= 300
    assert figures["time_ratio_popaudit_over_duckdb"] == pytest.approx(
        figures["popaudit"]["seconds"] / figures["duckdb"]["seconds"]
    )
