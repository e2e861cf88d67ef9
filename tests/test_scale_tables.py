"""Item tables larger than the memory ceiling: streamed to disk, audited in row blocks.

A Parquet table several times larger than ``max_memory`` must give exactly the
in-memory audit, keep traced (numpy) allocations near the ceiling, and leave no
temporary file behind.
"""

from __future__ import annotations

import gc
import os
import tempfile
import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import auditor.memory as tables_module
import auditor.retrieval.measure as retrieval_module
from auditor.audit import run_audit
from auditor.cli import cli
from auditor.config import AuditConfig, LoadOptions, format_size
from auditor.errors import InputError
from auditor.loading import load_model
from auditor.loading.npy import read_npy_table
from auditor.memory import SPILL_PREFIX, check_memory_ceiling, min_memory, table_file
from auditor.loading.population import population_of
from auditor.model import ItemStats, ModelBundle
from auditor.loading.shards import MappedRows, ParquetRows
from auditor.retrieval import RetrievalOutcome, measure_retrieval

N_ITEMS, DIM = 40_000, 128  # 20.5 MB of float32
CEILING = 4 << 20  # 4 MiB: the table is ~5x the ceiling

def _measure(bundle: ModelBundle, stats: ItemStats, config: AuditConfig) -> RetrievalOutcome:
    """The retrieval section over the population ``config`` defines (as run_audit does)."""
    return measure_retrieval(bundle, stats, config, population_of(bundle, config))



def write_inputs(folder: Path, n_items: int = N_ITEMS, dim: int = DIM, seed: int = 0) -> dict[str, Path]:
    """A Parquet item table (raw ids 3r+1, norms growing with popularity), a Zipf log of
    those ids and a .npy of query vectors."""
    rng = np.random.default_rng(seed)
    weight = rng.zipf(1.5, n_items).clip(max=10_000).astype(np.float64)
    table = rng.standard_normal((n_items, dim)).astype(np.float32)
    table *= (1 + np.log1p(weight)).astype(np.float32)[:, None] / 4
    table[5] = 0.0  # a zero row: cosine must skip it in every shard
    ids = np.arange(n_items, dtype=np.int64) * 3 + 1
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(table.ravel()), dim)
    paths = {"table": folder / "items.parquet", "log": folder / "log.parquet", "queries": folder / "queries.npy"}
    pq.write_table(pa.table({"item_id": ids, "embedding": vectors}), paths["table"], row_group_size=15_000)
    n_log = 60_000
    items = ids[rng.choice(n_items, size=n_log, p=weight / weight.sum())]
    pq.write_table(pa.table({"user_id": rng.integers(0, 1500, n_log), "item_id": items}), paths["log"])
    np.save(paths["queries"], rng.standard_normal((200, dim)).astype(np.float32))
    np.save(folder / "expected.npy", table)
    return paths


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_inputs(tmp_path_factory.mktemp("scale"))


@pytest.fixture
def spill_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Temporary files of this test go to their own folder, so leftovers are visible."""
    folder = tmp_path / "spill"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def config(paths: dict[str, Path], **kwargs: object) -> AuditConfig:
    settings: dict[str, object] = {
        "interactions": paths["log"],
        "queries": str(paths["queries"]),
        "ks": (10, 50),
        "bootstrap": 100,
        "probes": False,
    }
    settings.update(kwargs)
    return AuditConfig(model=paths["table"], **settings)  # type: ignore[arg-type]


def test_audit_over_ceiling_equals_in_memory(inputs: dict[str, Path], spill_dir: Path) -> None:
    plain = run_audit(config(inputs))
    bounded = run_audit(config(inputs, max_memory=CEILING))
    assert not any("streamed" in w for w in plain.warnings)
    spilled = [w for w in bounded.warnings if f"streamed to a temporary file in {spill_dir} " in w]
    assert len(spilled) == 1 and f"max_memory ({CEILING:,} bytes)" in spilled[0]
    assert "40,000 x 128 float32" in spilled[0]

    # Frequency-norm section: the same numbers, deciles and bootstrap CI.
    assert bounded.frequency_norm is not None and plain.frequency_norm is not None
    assert bounded.frequency_norm == plain.frequency_norm
    assert np.array_equal(bounded.plot_data.norms, plain.plot_data.norms)
    # Retrieval: every measure at every K, and the exposure counts behind them.
    assert bounded.retrieval is not None and plain.retrieval is not None
    assert bounded.retrieval.at == plain.retrieval.at
    for scoring, per_k in plain.plot_data.exposure.items():
        for k, counts in per_k.items():
            assert np.array_equal(bounded.plot_data.exposure[scoring][k], counts)
    # 4 MiB / (2 copies x 4 bytes x 128 dims) = 4096 rows per shard -> 10 shards.
    assert "10 shards merged" in bounded.retrieval.definitions["index"]
    assert "shards" not in plain.retrieval.definitions["index"]
    assert bounded.flat_metrics() == plain.flat_metrics()
    gc.collect()
    assert list(spill_dir.iterdir()) == []  # the temporary table went with the audit


def test_without_a_ceiling_half_the_available_memory_applies(
    inputs: dict[str, Path], spill_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = run_audit(config(inputs))
    monkeypatch.setattr(tables_module, "available_memory", lambda: 2 * CEILING)
    squeezed = run_audit(config(inputs))
    assert any("exceeds half the available memory: streamed" in w for w in squeezed.warnings)
    assert squeezed.retrieval is not None and "10 shards merged" in squeezed.retrieval.definitions["index"]
    assert squeezed.flat_metrics() == plain.flat_metrics()
    gc.collect()
    assert list(spill_dir.iterdir()) == []


def test_spilled_table_is_a_temporary_memmap_removed_with_the_bundle(
    inputs: dict[str, Path], spill_dir: Path
) -> None:
    bundle = load_model(inputs["table"], LoadOptions(max_memory=CEILING))
    backing = table_file(bundle.item_table)
    assert backing is not None
    path, offset = backing
    assert Path(path).parent == spill_dir and Path(path).name.startswith(SPILL_PREFIX)
    assert Path(path) != inputs["table"].with_suffix(".npy")  # never beside the input
    expected = np.load(inputs["table"].parent / "expected.npy")
    assert np.array_equal(bundle.item_table, expected)
    assert np.array_equal(bundle.item_ids, np.arange(N_ITEMS) * 3 + 1)
    # The file is a valid .npy and the offset points at row 0.
    assert np.array_equal(np.load(path, mmap_mode="r")[123], expected[123])
    assert np.array_equal(MappedRows(path, offset, DIM, 100, 105).read(), expected[100:105])
    assert any("streamed" in w for w in bundle.warnings)
    view = bundle.item_table[10:20]
    del bundle
    gc.collect()
    assert Path(path).exists()  # a view still maps it
    del view
    gc.collect()
    assert not Path(path).exists()
    # Under the ceiling the table stays in RAM.
    small = load_model(inputs["table"], LoadOptions(max_memory=64 << 20))
    assert table_file(small.item_table) is None and list(spill_dir.iterdir()) == []


def test_parquet_rows_read_across_row_groups(inputs: dict[str, Path]) -> None:
    expected = np.load(inputs["table"].parent / "expected.npy")
    # Row groups hold 15,000 rows: this range spans the boundary at 15,000.
    rows = ParquetRows(str(inputs["table"]), "embedding", 14_990, 15_020).read()
    assert np.array_equal(rows, expected[14_990:15_020])
    assert np.array_equal(ParquetRows(str(inputs["table"]), "embedding", 39_999, 40_000).read(), expected[-1:])


def test_ceiling_below_one_block_is_a_clear_error(inputs: dict[str, Path], spill_dir: Path) -> None:
    need = 1024 * DIM * 4 * 2  # one block of 1024 rows and its normalised copy
    assert min_memory(DIM) == need == 1 << 20
    with pytest.raises(InputError, match=r"max_memory 1,000 bytes is too small .* need 1,048,576 bytes; pass max_memory 1M or more"):
        run_audit(config(inputs, max_memory=1000))
    # Retrieval applies the same floor to tables from any loader.
    with pytest.raises(InputError, match="need 65,536 bytes"):
        check_memory_ceiling(65_535, 8, "the item table")
    check_memory_ceiling(65_536, 8, "the item table")
    # A table smaller than one block needs only its own rows (10 x 8 x 4 bytes, twice).
    assert min_memory(8, n_rows=10) == 640
    check_memory_ceiling(640, 8, "a small table", n_rows=10)
    with pytest.raises(InputError, match="one block of 10 rows x 8 dimensions .* need 640 bytes"):
        check_memory_ceiling(639, 8, "a small table", n_rows=10)
    assert (format_size(1000), format_size(1 << 20), format_size((1 << 20) + 1), format_size(3 << 30)) == (
        "1000", "1M", "2M", "3G"
    )
    assert list(spill_dir.iterdir()) == []


def test_traced_peak_stays_near_the_ceiling(inputs: dict[str, Path], spill_dir: Path) -> None:
    """numpy allocations are traced by tracemalloc: the bounded audit's peak stays below
    the ceiling plus the per-item vectors every audit holds (norms, frequencies, ranks,
    exposure counts: 20 float64 per item) and 1 MiB for queries and top-K lists, far
    below the 20.5 MB table; the unbounded audit's peak includes the whole table."""
    table_bytes = N_ITEMS * DIM * 4
    overhead = 20 * 8 * N_ITEMS + (1 << 20)
    assert CEILING + overhead < 0.6 * table_bytes  # the bound would catch a loaded table
    peaks = {}
    for ceiling in (CEILING, None):
        gc.collect()
        tracemalloc.start()
        try:
            result = run_audit(config(inputs, max_memory=ceiling, bootstrap=0))
            peaks[ceiling] = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert result.retrieval is not None
        del result
    assert peaks[CEILING] < CEILING + overhead, peaks
    assert peaks[None] > table_bytes, peaks


def test_npy_table_needing_conversion_is_spilled(tmp_path: Path, spill_dir: Path) -> None:
    rng = np.random.default_rng(3)
    table64 = rng.standard_normal((6000, 32))
    path = tmp_path / "items64.npy"
    np.save(path, table64)
    table, warnings = read_npy_table(path, max_memory=300_000)
    assert table_file(table) is not None and any("streamed" in w for w in warnings)
    assert np.array_equal(table, table64.astype(np.float32))
    in_ram, notes = read_npy_table(path)
    assert table_file(in_ram) is None and not notes and np.array_equal(in_ram, table)
    # A float32 .npy over the ceiling is memory-mapped in place: no copy, no temporary file.
    path32 = tmp_path / "items32.npy"
    np.save(path32, table64.astype(np.float32))
    mapped, notes = read_npy_table(path32, max_memory=300_000)
    assert table_file(mapped) == (str(path32), 128) and not notes
    del table
    gc.collect()
    assert list(spill_dir.iterdir()) == []


def _small_model(n_items: int = 6000, dim: int = 16, seed: int = 5) -> tuple[ModelBundle, ItemStats]:
    rng = np.random.default_rng(seed)
    freq = rng.zipf(1.6, n_items).clip(max=3000)
    items = (rng.standard_normal((n_items, dim)) * np.log1p(freq)[:, None]).astype(np.float32)
    users = rng.standard_normal((100, dim)).astype(np.float32)
    bundle = ModelBundle(source=Path("m.npy"), format="npy", item_table=items, user_table=users)
    stats = ItemStats(frequencies=freq.astype(np.int64), n_interactions=int(freq.sum()))
    return bundle, stats


def test_approximate_index_respects_the_ceiling(monkeypatch: pytest.MonkeyPatch) -> None:
    bundle, stats = _small_model()
    table_bytes = 2 * bundle.n_items * bundle.dim * 4  # 768,000 with its normalised copy
    ceiling = 200_000
    assert table_bytes == 768_000
    with pytest.raises(InputError, match=r"index ivf builds an in-memory index .* \(768,000 bytes\), more than max_memory \(200,000 bytes\)"):
        _measure(bundle, stats, AuditConfig(model=Path("m.npy"), ks=(10,), index="ivf", max_memory=ceiling))
    # auto would pick IVF here (limit lowered), but the table exceeds the ceiling: exact.
    monkeypatch.setattr(retrieval_module, "EXACT_FLOP_LIMIT", 0.0)
    auto = _measure(bundle, stats, AuditConfig(model=Path("m.npy"), ks=(10,), max_memory=ceiling))
    exact = _measure(bundle, stats, AuditConfig(model=Path("m.npy"), ks=(10,), index="exact"))
    assert auto.retrieval.index == "exact" and auto.retrieval.recall is None
    assert "auto chose exact: an approximate index would hold the whole table" in auto.retrieval.definitions["index"]
    assert auto.retrieval.at == exact.retrieval.at
    unbounded = _measure(bundle, stats, AuditConfig(model=Path("m.npy"), ks=(10,)))
    assert unbounded.retrieval.index == "ivf"  # without a ceiling the lowered limit applies


def test_cli_accepts_human_sizes(inputs: dict[str, Path], tmp_path: Path, spill_dir: Path) -> None:
    runner = CliRunner()
    base = [
        "check", str(inputs["table"]), "--interactions", str(inputs["log"]), "--queries",
        str(inputs["queries"]), "-k", "10", "--bootstrap", "0", "--no-probes", "-q",
    ]  # fmt: skip
    out = tmp_path / "report.json"
    result = runner.invoke(cli, [*base, "--max-memory", "4M", "--json", str(out)])
    assert result.exit_code == 0, result.output
    report = out.read_text()
    assert "streamed to a temporary file in" in report and f"--max-memory ({CEILING:,} bytes)" in report
    small = runner.invoke(cli, [*base, "--max-memory", "512K"])
    assert small.exit_code != 0
    assert "--max-memory 524,288 bytes is too small" in small.output and "pass --max-memory 1M or more" in small.output
    bad = runner.invoke(cli, [*base, "--max-memory", "lots"])
    assert bad.exit_code == 2 and "not a memory size" in bad.output
    gc.collect()
    assert list(spill_dir.iterdir()) == []


def test_a_killed_runs_spill_file_is_removed_by_the_next_run(inputs: dict[str, Path], spill_dir: Path) -> None:
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)  # that process has exited: its files are stale
    stale = spill_dir / f"{SPILL_PREFIX}{dead_pid}-abc123.npy"
    stale.write_bytes(b"left by a run killed with -9")
    live = spill_dir / f"{SPILL_PREFIX}{os.getpid()}-def456.npy"  # a live run's file (this process)
    live.write_bytes(b"in use")
    other = spill_dir / "unrelated-1.npy"
    other.write_bytes(b"not ours")
    bundle = load_model(inputs["table"], LoadOptions(max_memory=CEILING))  # spills, cleaning up first
    assert not stale.exists() and live.exists() and other.exists()
    backing = table_file(bundle.item_table)
    assert backing is not None and Path(backing[0]).name.startswith(f"{SPILL_PREFIX}{os.getpid()}-")
    live.unlink()
