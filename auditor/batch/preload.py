"""What a batch's worker processes import before their first row, and starting that early.

Local pools fork their workers from a forkserver (:mod:`auditor.parallel`) that imports
:data:`WORKER_MODULES` once: torch and the audit stack take seconds, which no worker then
pays, and a worker's first row costs about what its later rows cost. :func:`start_workers`
starts that server before anything else of the batch runs, so its imports overlap the
main process's own start (imports, reading the manifest, hashing the inputs).

This module imports nothing heavy (it is the first thing ``popaudit batch`` loads), and
nothing of the batch package but itself.
"""

from __future__ import annotations

from multiprocessing.context import BaseContext

from auditor.parallel import pool_context

WORKER_MODULES = (
    # The audit and the worker's own module: torch, numpy, pyarrow, the plugin system.
    "auditor.batch.workers",
    "auditor.audit",
    "auditor.plugins",
    # What a row imports on first use (tests/test_pool_server.py checks the list): the
    # conditions and probes, retrieval, the verdict and advice, the built-in measures,
    # the population's sparse rows, the log's Parquet dataset
    # reader, the built-in plugins and formats a worker's plugin manager registers, and
    # the readers of torch files and of tables (the formats import them on use).
    "auditor.conditions",
    "auditor.retrieval.measure",
    "auditor.verdict",
    "auditor.advice",
    "auditor.metrics.builtin_measures",
    "auditor.loading.shards",
    "scipy.sparse",
    "pyarrow.dataset",
    "pyarrow.acero",
    "numpy.random",
    "auditor.loading.builtin",
    "auditor.loading.checkpoints",
    "auditor.loading.mf_models",
    "auditor.loading.recbole",
    "auditor.loading.torch_bundle",
    "auditor.loading.npy",
    "auditor.loading.parquet_table",
    "auditor.loading.plugin_formats",
    "auditor.report.builtin",
    "auditor.train.plugin",
)
"""Modules the forkserver imports before it forks the first worker (through
:data:`SERVER_PRELOAD`; one missing is skipped: an optional import fails where it is
used, as without preloading)."""


SERVER_PRELOAD = "auditor.batch.preloaded"
"""What the server is told to import: :data:`WORKER_MODULES`, with the collector paused
and what they built frozen."""


def start_workers(start_method: str | None = None) -> BaseContext:
    """The context of the batch's local pools, its server (with the forkserver start
    method, the default where there is one) started now unless it runs, importing
    :data:`WORKER_MODULES`. For local pools only: a Dask run needs none."""
    return pool_context(start_method, [SERVER_PRELOAD])
