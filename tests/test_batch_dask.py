"""Batch on a Dask cluster (LocalCluster with worker processes) = the local run."""

from __future__ import annotations

import os
from typing import Any

import pyarrow.parquet as pq
import pytest
from test_batch_core import calls_by_pid, fake_audit, workspace, write_manifest  # noqa: F401

from auditor.batch import run_batch
from auditor.errors import InputError

distributed = pytest.importorskip("distributed")
dask = pytest.importorskip("dask")


def test_dask_equals_local(workspace: dict[str, Any]) -> None:
    d = workspace["dir"]
    manifest = write_manifest(
        d / "m.csv",
        {
            "model": ["m0.npy", "broken.npy", "m1.npy", "m2.npy", "m3.npy"],
            "interactions": ["log_a.parquet", "log_a.parquet", "log_b.parquet", None, "log_b.parquet"],
            "seed": [None, None, 4, None, None],
        },
    )
    defaults = {"interactions": d / "log_a.parquet", "ks": (10, 20)}
    local = run_batch(manifest, d / "local.parquet", defaults=defaults, audit_fn=fake_audit)
    (d / "calls.log").unlink()
    with distributed.LocalCluster(
        n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0"
    ) as cluster:
        with distributed.Client(cluster, set_as_default=False) as client:
            worker_pids = set(client.run(os.getpid).values())
        remote = run_batch(
            manifest,
            d / "dask.parquet",
            defaults=defaults,
            audit_fn=fake_audit,
            scheduler=cluster.scheduler_address,
        )
    assert (remote.n_ok, remote.n_error) == (local.n_ok, local.n_error) == (4, 1)
    drop = ["seconds"]
    assert pq.read_table(d / "dask.parquet").drop(drop).to_pylist() == pq.read_table(d / "local.parquet").drop(drop).to_pylist()
    # The audits ran in the cluster's two worker processes, not here.
    assert len(worker_pids) == 2 and os.getpid() not in worker_pids
    assert {pid for pid, _ in calls_by_pid(d)} <= worker_pids and len(calls_by_pid(d)) == 5


def test_unreachable_scheduler_is_an_input_error(workspace: dict[str, Any]) -> None:
    d = workspace["dir"]
    manifest = write_manifest(d / "m.csv", {"model": ["m0.npy"]})
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        with pytest.raises(InputError, match="cannot connect to the Dask scheduler at tcp://127.0.0.1:9"):
            run_batch(manifest, d / "r.parquet", audit_fn=fake_audit, scheduler="tcp://127.0.0.1:9")
