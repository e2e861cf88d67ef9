"""What a batch's worker processes import before their first row, and starting that early.

Local pools fork their workers from a forkserver (:mod:`auditor.parallel`) that imports
the modules a worker needs once: torch and the audit stack take seconds, which no worker
then pays, and a worker's first row costs about what its later rows cost. A batch whose
rows audit served lists alone (no model) preloads :data:`LIST_WORKER_MODULES`, which
import no torch: its workers start in well under a second instead of after torch's
seconds. :func:`start_workers` starts the server as soon as the manifest says which, so
its imports overlap the rest of the main process's start (hashing the inputs, resuming).

This module imports nothing heavy, and nothing of the batch package but itself.
"""

from __future__ import annotations

import gc
import importlib
from multiprocessing.context import BaseContext

from auditor.parallel import pool_context

LIST_WORKER_MODULES = (
    # What a row of served lists alone imports on first use (tests/test_pool_server.py
    # checks the list, and that it holds no torch): the worker and the audit, the lists'
    # audit, reader and measures, the log's Parquet dataset reader, the built-in plugins.
    "auditor.batch.workers",
    "auditor.audit",
    "auditor.plugins",
    "auditor.verdict",
    "auditor.advice",
    "auditor.metrics.builtin_measures",
    "auditor.lists_audit",
    "auditor.lists_verdict",
    "auditor.loading.served_inputs",
    "auditor.retrieval.served",
    "scipy.sparse",
    "pyarrow.dataset",
    "pyarrow.acero",
    "numpy.random",
    "auditor.loading.builtin",
    "auditor.loading.plugin_formats",
    "auditor.report.builtin",
    "auditor.train.plugin",
)
"""Modules the forkserver of a batch of served lists alone imports before it forks the
first worker (through :data:`LIST_SERVER_PRELOAD`; one missing is skipped: an optional
import fails where it is used, as without preloading)."""

WORKER_MODULES = (
    *LIST_WORKER_MODULES,
    # What a model's row adds (tests/test_pool_server.py checks the list): torch, the
    # conditions and probes, retrieval, the population's sparse rows, and the readers of
    # torch files and of tables (the formats import them on use).
    "auditor.conditions",
    "auditor.retrieval.measure",
    "auditor.loading.shards",
    "auditor.loading.checkpoints",
    "auditor.loading.mf_models",
    "auditor.loading.recbole",
    "auditor.loading.torch_bundle",
    "auditor.loading.npy",
    "auditor.loading.parquet_table",
)
"""Modules the forkserver of a batch with models imports before it forks the first
worker (through :data:`SERVER_PRELOAD`)."""


SERVER_PRELOAD = "auditor.batch.preloaded"
"""What the server of a batch with models is told to import: :data:`WORKER_MODULES`, with
the collector paused and what they built frozen."""
LIST_SERVER_PRELOAD = "auditor.batch.preloaded_lists"
"""The same for a batch of served lists alone: :data:`LIST_WORKER_MODULES`."""


def start_workers(start_method: str | None = None, *, models: bool = True) -> BaseContext:
    """The context of the batch's local pools, its server (with the forkserver start
    method, the default where there is one) started now unless it runs, importing
    :data:`WORKER_MODULES`, or :data:`LIST_WORKER_MODULES` when no row has a model
    (``models=False``). For local pools only: a Dask run needs none."""
    return pool_context(start_method, [SERVER_PRELOAD if models else LIST_SERVER_PRELOAD])


def import_frozen(names: tuple[str, ...]) -> None:
    """Import ``names`` without collections, then freeze what they built (the server's
    preload: :mod:`auditor.batch.preloaded`)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        for name in names:
            try:
                importlib.import_module(name)
            except ImportError:  # skipped, as the forkserver skips a preload it cannot import
                pass
    finally:
        gc.freeze()
        if enabled:
            gc.enable()
