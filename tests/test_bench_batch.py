"""benchmarks/bench_batch.py's inputs: an ML-100K-size log and item tables, and its manifests."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import numpy as np
import pyarrow.parquet as pq

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_batch.py"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_batch", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_inputs_are_ml100k_sized_and_models_grow_with_frequency(tmp_path: Path) -> None:
    bench = _bench()
    tables = bench.make_inputs(tmp_path, 3, seed=1)
    log = pq.read_table(tmp_path / "log.parquet")
    assert log.num_rows == 100_000
    assert int(np.max(log.column("user_id"))) < 943 and int(np.max(log.column("item_id"))) < 1682
    freq = np.bincount(log.column("item_id").to_numpy(), minlength=1682)
    norms = [np.linalg.norm(np.load(t), axis=1) for t in tables]
    assert all(n.shape == (1682,) for n in norms)
    np.testing.assert_allclose(norms[0], 1.0, rtol=1e-5)  # the first model: no norm-frequency link
    np.testing.assert_allclose(norms[2], 1 + np.log1p(freq), rtol=1e-5)  # the last: norms 1 + log(1 + freq)
    manifest = bench.write_manifest(tmp_path, tables, 5).read_text().splitlines()
    assert manifest == ["model,label", "model0.npy,row0", "model1.npy,row1", "model2.npy,row2", "model0.npy,row3",
                        "model1.npy,row4"]
