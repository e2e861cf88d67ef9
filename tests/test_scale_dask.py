"""Retrieval shards searched on a Dask cluster (LocalCluster, worker processes) = local.

Covers the three ways a worker gets a shard: rows of a Parquet file, rows of a
memory-mapped ``.npy`` (input or spilled table), and scattered arrays for a table that
lives only in memory; plus a shard search submitted from inside a Dask task.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from test_scale_tables import write_inputs

from auditor.audit import run_audit
from auditor.cli import cli
from auditor.config import AuditConfig, LoadOptions
from auditor.errors import InputError
from auditor.loading import load_model
from auditor.loading.population import population_of
from auditor.model import ItemStats, ModelBundle
from auditor.parallel import dask_client
from auditor.loading.shards import MappedRows, ParquetRows, shard_sources
from auditor.retrieval import RetrievalOutcome, measure_retrieval

distributed = pytest.importorskip("distributed")
dask = pytest.importorskip("dask")

CEILING = 300_000  # bytes: a few 1,171-row shards of the 32-dim tables below

def _measure(bundle: ModelBundle, stats: ItemStats, config: AuditConfig) -> RetrievalOutcome:
    """The retrieval section over the population ``config`` defines (as run_audit does)."""
    return measure_retrieval(bundle, stats, config, population_of(bundle, config))



@pytest.fixture(scope="module")
def cluster() -> Iterator[distributed.LocalCluster]:
    with distributed.LocalCluster(
        n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0"
    ) as local:
        yield local


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_inputs(tmp_path_factory.mktemp("dask"), n_items=6000, dim=32)


def _stats(n_items: int, seed: int = 1) -> ItemStats:
    freq = np.random.default_rng(seed).zipf(1.6, n_items).clip(max=2000).astype(np.int64)
    return ItemStats(frequencies=freq, n_interactions=int(freq.sum()))


def _config(path: Path, queries: Path, **kwargs: object) -> AuditConfig:
    return AuditConfig(model=path, queries=str(queries), ks=(10, 40), **kwargs)  # type: ignore[arg-type]


@contextmanager
def shard_tasks(cluster: distributed.LocalCluster) -> Iterator[list[dict]]:
    """Records the shard-search tasks the cluster's workers run inside the block."""
    found: list[dict] = []
    with distributed.Client(cluster, set_as_default=False) as watcher:
        with distributed.get_task_stream(client=watcher) as stream:
            yield found
        workers = set(cluster.scheduler_info["workers"])
    found.extend(t for t in stream.data if t["key"].startswith("search_shard"))
    assert {t["worker"] for t in found} <= workers


def _assert_same(remote: object, local: object) -> None:
    assert remote.retrieval.at == local.retrieval.at  # type: ignore[attr-defined]
    for scoring, per_k in local.exposure.items():  # type: ignore[attr-defined]
        for k, counts in per_k.items():
            assert np.array_equal(remote.exposure[scoring][k], counts)  # type: ignore[attr-defined]


def test_shards_on_dask_equal_local_for_every_source(
    cluster: distributed.LocalCluster, inputs: dict[str, Path], tmp_path: Path
) -> None:
    address = cluster.scheduler_address
    table = np.load(inputs["table"].parent / "expected.npy")
    npy = tmp_path / "items.npy"
    np.save(npy, table)
    stats = _stats(table.shape[0])
    bundles = {
        "parquet": load_model(inputs["table"], LoadOptions(max_memory=CEILING)),
        "mapped": ModelBundle(source=npy, format="npy", item_table=np.load(npy, mmap_mode="r")),
        "memory": ModelBundle(source=Path("m.pt"), format="state_dict", item_table=table.copy()),
    }
    kinds = {"parquet": ParquetRows, "mapped": MappedRows}
    unsharded = _measure(bundles["memory"], stats, _config(npy, inputs["queries"]))
    for name, bundle in bundles.items():
        sources = shard_sources(bundle, [0, 2500, 6000])
        if name in kinds:
            assert sources is not None and all(isinstance(s, kinds[name]) for s in sources)
            assert np.array_equal(sources[1].read(), table[2500:6000])
        else:
            assert sources is None
        local = _measure(bundle, stats, _config(npy, inputs["queries"], max_memory=CEILING))
        with shard_tasks(cluster) as tasks:
            remote = _measure(bundle, stats, _config(npy, inputs["queries"], max_memory=CEILING, scheduler=address))
        assert len(tasks) == 6, name  # one task per shard, run by the worker processes
        assert "6 shards merged" in local.retrieval.definitions["index"]
        assert remote.retrieval == local.retrieval  # every measure, note and definition
        _assert_same(remote, local)
        _assert_same(remote, unsharded)


def test_audit_with_scheduler_equals_local_audit(
    cluster: distributed.LocalCluster, inputs: dict[str, Path]
) -> None:
    base = {"interactions": inputs["log"], "bootstrap": 100, "probes": False, "max_memory": CEILING}
    local = run_audit(_config(inputs["table"], inputs["queries"], **base))
    with shard_tasks(cluster) as tasks:
        remote = run_audit(_config(inputs["table"], inputs["queries"], scheduler=cluster.scheduler_address, **base))
    assert len(tasks) == 6
    assert remote.to_dict() == local.to_dict()  # the whole JSON report


def test_cli_scheduler_option(cluster: distributed.LocalCluster, inputs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    args = [
        "check", str(inputs["table"]), "--interactions", str(inputs["log"]), "--queries", str(inputs["queries"]),
        "-k", "10", "--bootstrap", "0", "--no-probes", "-q", "--max-memory", "300K",
        "--scheduler", cluster.scheduler_address, "--json", str(out),
    ]  # fmt: skip
    with shard_tasks(cluster) as tasks:
        result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert len(tasks) == 5 and "5 shards merged" in out.read_text()  # 300K = 307,200 bytes: 1,200 rows a shard


def test_shard_search_from_inside_a_dask_task(cluster: distributed.LocalCluster, inputs: dict[str, Path]) -> None:
    """``popaudit batch --scheduler`` runs audits as tasks: their shards go to the same
    cluster through worker_client, without deadlocking the task's own worker slot."""
    table = np.load(inputs["table"].parent / "expected.npy")
    bundle = ModelBundle(source=Path("m.pt"), format="state_dict", item_table=table)
    stats = _stats(table.shape[0])
    config = _config(Path("m.pt"), inputs["queries"], max_memory=CEILING, scheduler="unused-inside-a-task")
    population = population_of(bundle, config)
    local = _measure(bundle, stats, _config(Path("m.pt"), inputs["queries"], max_memory=CEILING))
    with shard_tasks(cluster) as tasks, distributed.Client(cluster, set_as_default=False) as client:
        nested = client.submit(measure_retrieval, bundle, stats, config, population, pure=False).result()
    assert len(tasks) == 6
    _assert_same(nested, local)


def test_worker_that_cannot_read_the_file_is_an_input_error(
    cluster: distributed.LocalCluster, tmp_path: Path
) -> None:
    table = np.random.default_rng(2).standard_normal((3000, 32)).astype(np.float32)
    path = tmp_path / "gone.npy"
    np.save(path, table)
    bundle = ModelBundle(source=path, format="npy", item_table=np.load(path, mmap_mode="r"))
    os.unlink(path)  # still mapped here, but workers cannot open it
    np.save(tmp_path / "q.npy", table[:5])
    config = _config(path, tmp_path / "q.npy", max_memory=CEILING, scheduler=cluster.scheduler_address)
    with pytest.raises(InputError, match=r"a Dask worker could not read rows \d+-\d+ of the item table: .*set TMPDIR"):
        _measure(bundle, _stats(3000), config)


def test_missing_dask_and_unreachable_scheduler(monkeypatch: pytest.MonkeyPatch) -> None:
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        with pytest.raises(InputError, match="cannot connect to the Dask scheduler at tcp://127.0.0.1:9"):
            with dask_client("tcp://127.0.0.1:9"):
                pass
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    with pytest.raises(InputError, match=r"pip install 'popaudit\[dask\]'"):
        with dask_client("tcp://127.0.0.1:9"):
            pass

