"""Batch audits: one manifest row -> one ``run_audit`` -> one row of a results Parquet file.

The library behind ``popaudit batch MANIFEST`` (CLI.md).

Manifest
--------
A Parquet or CSV file (``.csv``/``.tsv``; anything else is read as Parquet) with a
``model`` column and, optionally, one column per ``check`` setting. Column names are
:class:`~auditor.config.AuditConfig` field names (``item_key``, ``max_queries``, ``ks``)
or the command-line spellings (``item-key``, ``--max-queries``, ``k``); the training
declarations of C1/C4/C5 are ``optimizer``, ``momentum``, ``weight_decay``, ``lr`` and
``loss`` (``declared_`` prefix optional). ``k`` holds one cut-off or several (``"10,100"``).
An optional ``label`` column (free text, e.g. a checkpoint date) is carried into the
results. A value in a row overrides the command-line default for that row; an empty
cell keeps the default. Relative paths in the manifest are resolved against the
manifest's folder. A missing ``model`` column or an unknown column is a
:class:`~auditor.errors.ManifestError` (it lists the valid names); a bad value in one
row only fails that row.

The results file (its columns, crash safety) and the summary of a results table are
:mod:`auditor.batch_results`; their names are importable from here too.

Parallelism
-----------
``jobs=1`` runs audits in this process. ``jobs=N`` runs them in N worker processes
(``concurrent.futures.ProcessPoolExecutor``, forkserver start method where available,
else spawn). Rows are dispatched grouped by interaction log and each worker keeps one
:class:`~auditor.audit.InputCache`, so a log shared by many models is read once per
worker. At most N rows are in flight; a worker that dies (killed, out of memory, a
native crash) fails only its row: the other rows in flight are re-run one at a time in
a fresh pool, so the row that kills its worker is identified and recorded as an error.

Dask
----
``scheduler="tcp://HOST:8786"`` submits every row to an existing ``dask.distributed``
cluster instead (``pip install 'popaudit[dask]'``); results are identical to the local
run. Start a cluster on the machines that can read the models and logs (shared paths):

.. code-block:: console

    $ dask scheduler                      # prints tcp://HOST:8786; dashboard on :8787
    $ dask worker tcp://HOST:8786 --nworkers 4 --nthreads 1   # on each machine
    $ popaudit batch manifest.parquet -o results.parquet --scheduler tcp://HOST:8786

Use one thread per worker process (audits use native threads of their own) and give
each worker enough memory for one audit (``--memory-limit``). Paths are sent to the
workers as absolute paths, so they must be valid on every worker. A worker lost
mid-audit is retried by Dask on another worker; a row that keeps killing workers ends
as an error row (``KilledWorker``).
"""

from __future__ import annotations

import functools
import json
import math
import multiprocessing
import os
import re
import time
import typing
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import UnionType
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from auditor.batch_results import (
    _FIXED_NAMES,
    CONDITION_IDS,
    RESULT_SCHEMA,
    RESULTS_VERSION,
    STATUS_ERROR,
    STATUS_OK,
    BatchSummary,
    ResultsWriter,
    SummaryRow,
    Trend,
    read_results,
    result_schema,
    summarise,
    summary_figure,
    summary_html,
)
from auditor.config import QUERY_SOURCES, AuditConfig, DeclaredTraining, parse_memory_size
from auditor.errors import AuditError, InputError, ManifestError
from auditor.progress import SILENT, Progress

__all__ = [
    "CONDITION_IDS",
    "RESULTS_VERSION",
    "RESULT_SCHEMA",
    "STATUS_ERROR",
    "STATUS_OK",
    "WORKER_DIED",
    "AuditFn",
    "BatchJob",
    "BatchOutcome",
    "BatchSummary",
    "Manifest",
    "ManifestRow",
    "ResultsWriter",
    "SummaryRow",
    "Trend",
    "audit_job",
    "build_jobs",
    "convert_setting",
    "error_record",
    "manifest_columns",
    "parse_memory_size",
    "read_manifest",
    "read_results",
    "result_record",
    "result_schema",
    "run_batch",
    "summarise",
    "summary_figure",
    "summary_html",
]

AuditFn = Callable[..., Any]
"""``run_audit``'s signature: ``(config, *, pm, progress, cache) -> AuditResult``."""

WORKER_DIED = (
    "the worker process died while auditing this row (killed, out of memory, or a crash "
    "in native code)"
)

# Settings that are batch-wide, never per row: plugins change the worker's hook registry.
_NOT_PER_ROW = {"model", "plugins", "declared"}
_ALIASES = {"k": "ks"}
# The command's --no-X flags, accepted as columns too (true turns X off).
_NEGATED = {"no_retrieval": "retrieval", "no_probes": "probes"}
_DECLARED = tuple(f.name for f in fields(DeclaredTraining))
_PATH_FIELDS = ("interactions", "item_ids")


# ---------------------------------------------------------------------------- manifest


@dataclass(frozen=True)
class ManifestRow:
    """One manifest row: its model, label, converted settings and any problem found."""

    index: int
    model: str | None
    label: str | None
    settings: dict[str, Any]
    """AuditConfig field -> value (paths resolved; ``declared`` fields under their names)."""
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class Manifest:
    """A parsed manifest: its file, the setting each column maps to, and its rows."""

    path: Path
    columns: dict[str, str]
    """Column as written -> AuditConfig field (or ``model``/``label``/a declared field)."""
    rows: list[ManifestRow]


def manifest_columns() -> list[str]:
    """Every column name a manifest may have (canonical spellings)."""
    names = ["model", "label"]
    names += [f.name for f in fields(AuditConfig) if f.name not in _NOT_PER_ROW]
    names += ["k", *_NEGATED, *_DECLARED]
    return names


def _canonical(column: str) -> str | None:
    """The setting a column name maps to, or None when it is unknown."""
    name = column.strip().lstrip("-").lower().replace("-", "_")
    name = _ALIASES.get(name, name)
    if name.startswith("declared_") and name[len("declared_") :] in _DECLARED:
        name = name[len("declared_") :]
    valid = set(manifest_columns()) - {"k"}
    return name if name in valid else None


def read_manifest(path: Path) -> Manifest:
    """Read and validate a manifest (Parquet or CSV); raises ManifestError when unusable."""
    path = Path(path)
    if not path.is_file():
        raise ManifestError(f"manifest not found: {path}")
    table = _read_manifest_table(path)
    repeated = sorted({n for n in table.column_names if table.column_names.count(n) > 1})
    if repeated:
        raise ManifestError(f"manifest {path}: column(s) {', '.join(map(repr, repeated))} appear more than once")
    for field in table.schema:
        if pa.types.is_binary(field.type) or pa.types.is_large_binary(field.type):  # CSV bytes not UTF-8
            raise ManifestError(f"manifest {path}: column {field.name!r} is not valid UTF-8 text; re-save it as UTF-8")
    columns: dict[str, str] = {}
    unknown: list[str] = []
    for name in table.column_names:
        canonical = _canonical(name)
        if canonical is None:
            unknown.append(name)
        else:
            columns[name] = canonical
    found = ", ".join(table.column_names) or "(none)"
    if "model" not in columns.values():
        raise ManifestError(f"manifest {path} has no 'model' column; columns found: {found}")
    if unknown:
        raise ManifestError(
            f"manifest {path}: unknown column(s) {', '.join(map(repr, unknown))}; valid "
            f"columns: {', '.join(manifest_columns())} (command-line spellings such as "
            "item-key also work)"
        )
    seen: dict[str, str] = {}
    for name, canonical in columns.items():
        target = _NEGATED.get(canonical, canonical)
        if target in seen:
            raise ManifestError(
                f"manifest {path}: columns {seen[target]!r} and {name!r} both set {target!r}"
            )
        seen[target] = name
    if table.num_rows == 0:
        raise ManifestError(f"manifest {path} has no rows")
    base = path.resolve().parent
    data = {name: table.column(name).to_pylist() for name in columns}
    rows = [
        _manifest_row(i, {columns[n]: data[n][i] for n in columns}, base)
        for i in range(table.num_rows)
    ]
    return Manifest(path=path, columns=columns, rows=rows)


def _read_manifest_table(path: Path) -> pa.Table:
    suffix = path.suffix.lower()
    try:
        if suffix in (".csv", ".tsv", ".txt"):
            return pacsv.read_csv(
                path,
                parse_options=pacsv.ParseOptions(delimiter="\t" if suffix == ".tsv" else ","),
                # Empty cells are nulls (keep the default); cells are converted per setting
                # later, so inferred column types (e.g. k read as int64) do not matter.
                convert_options=pacsv.ConvertOptions(strings_can_be_null=True),
            )
        return pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as exc:
        kind = "CSV" if suffix in (".csv", ".tsv", ".txt") else "Parquet"
        raise ManifestError(f"cannot read manifest {path} as {kind}: {exc}") from exc


@functools.cache
def _setting_kinds() -> dict[str, str]:
    """AuditConfig field -> value kind (path, bool, int, size, float, ints, str, query)."""
    hints = typing.get_type_hints(AuditConfig)
    hints.update(typing.get_type_hints(DeclaredTraining))
    hints.update({name: bool for name in _NEGATED})
    kinds: dict[str, str] = {}
    for name, hint in hints.items():
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        base = args[0] if isinstance(hint, UnionType) or typing.get_origin(hint) is typing.Union else hint
        if name == "queries":
            kinds[name] = "query"
        elif name == "max_memory":
            kinds[name] = "size"
        elif base is Path:
            kinds[name] = "path"
        elif base is bool:
            kinds[name] = "bool"
        elif base is int:
            kinds[name] = "int"
        elif base is float:
            kinds[name] = "float"
        elif typing.get_origin(base) is tuple:
            kinds[name] = "ints"
        else:
            kinds[name] = "str"
    return kinds


def _manifest_row(index: int, cells: Mapping[str, Any], base: Path) -> ManifestRow:
    kinds = _setting_kinds()
    settings: dict[str, Any] = {}
    problems: list[str] = []
    model = _text(cells.get("model"))
    label = _text(cells.get("label"))
    if model is None:
        problems.append("the model cell is empty")
    for name, value in cells.items():
        if name in ("model", "label") or _missing(value):
            continue
        try:
            converted = convert_setting(kinds[name], value, base)
            if name in _NEGATED:
                name, converted = _NEGATED[name], not converted
            settings[name] = converted
        except (ValueError, TypeError) as exc:
            problems.append(f"column {name!r}: {exc}")
    return ManifestRow(index, model, label, settings, tuple(problems))


def _missing(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    return isinstance(value, str) and not value.strip()


def _text(value: Any) -> str | None:
    return None if _missing(value) else str(value).strip()


def _resolve(value: str | Path, base: Path) -> Path:
    path = Path(value).expanduser()
    return path if path.is_absolute() else base / path


_BOOLS = {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False, "0": False}


def _int(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"expected an integer, got {value!r}")
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, float):
        if value.is_integer():
            return int(value)
        raise ValueError(f"expected an integer, got {value!r}")
    try:
        return int(str(value).strip())
    except ValueError:
        raise ValueError(f"expected an integer, got {value!r}") from None


def convert_setting(kind: str, value: Any, base: Path) -> Any:
    """One manifest cell as an AuditConfig value of ``kind`` (see ``_setting_kinds``;
    relative paths resolved against ``base``)."""
    if kind == "path":
        return _resolve(str(value).strip(), base)
    if kind == "query":
        text = str(value).strip()
        return text if text in QUERY_SOURCES else str(_resolve(text, base))
    if kind == "bool":
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        text = str(value).strip().lower()
        if text.endswith(".0"):  # CSV/float columns holding 1.0 / 0.0
            text = text[:-2]
        if text not in _BOOLS:
            raise ValueError(f"expected true or false, got {value!r}")
        return _BOOLS[text]
    if kind == "int":
        return _int(value)
    if kind == "size":
        return parse_memory_size(value)
    if kind == "float":
        return float(value)
    if kind == "ints":
        if isinstance(value, (list, tuple, np.ndarray)):
            parts: list[Any] = list(value)
        elif isinstance(value, str):
            parts = [p for p in re.split(r"[\s,;\[\]]+", value) if p]
        else:
            parts = [value]
        if not parts:
            raise ValueError(f"expected cut-offs such as '10,100', got {value!r}")
        return tuple(_int(p) for p in parts)
    text = str(value).strip()
    if isinstance(value, float) and value.is_integer():  # e.g. an item_key '0' read as 0.0
        text = str(int(value))
    return text


# ---------------------------------------------------------------------------- jobs


@dataclass(frozen=True)
class BatchJob:
    """One audit to run: a manifest row and its full config (None when the row is bad)."""

    row: int
    model: str
    label: str | None
    config: AuditConfig | None
    error: str | None = None


def build_jobs(manifest: Manifest, defaults: Mapping[str, Any] | None = None) -> list[BatchJob]:
    """A job per manifest row: command-line ``defaults`` overridden by the row's cells.

    ``defaults`` maps AuditConfig field names (not ``model``) to values; invalid defaults
    raise InputError, an invalid row becomes a job carrying its error.
    """
    template = _template(defaults or {})
    base = manifest.path.resolve().parent
    jobs = []
    for row in manifest.rows:
        model = row.model or ""
        if row.problems:
            jobs.append(BatchJob(row.index, model, row.label, None, "InputError: " + "; ".join(row.problems)))
            continue
        try:
            config = _row_config(template, _resolve(model, base), row.settings)
        except AuditError as exc:
            jobs.append(BatchJob(row.index, model, row.label, None, f"{type(exc).__name__}: {exc}"))
            continue
        jobs.append(BatchJob(row.index, model, row.label, config))
    return jobs


def _template(defaults: Mapping[str, Any]) -> AuditConfig:
    values = dict(defaults)
    if "model" in values:
        raise InputError("batch defaults cannot set 'model': it comes from the manifest")
    cwd = Path.cwd()
    # Absolute paths, so that pool and Dask workers (other cwd) read the same files.
    for name in _PATH_FIELDS:
        if values.get(name) is not None:
            values[name] = _resolve(values[name], cwd).resolve()
    if values.get("queries") not in (None, *QUERY_SOURCES):
        values["queries"] = str(_resolve(values["queries"], cwd).resolve())
    if values.get("plugins"):
        values["plugins"] = tuple(_resolve(p, cwd).resolve() for p in values["plugins"])
    try:
        return AuditConfig(model=Path("."), **values)
    except TypeError as exc:
        raise InputError(f"invalid batch defaults: {exc}") from exc


def _row_config(template: AuditConfig, model: Path, settings: Mapping[str, Any]) -> AuditConfig:
    declared = {k: v for k, v in settings.items() if k in _DECLARED}
    overrides = {k: v for k, v in settings.items() if k not in _DECLARED}
    overrides["model"] = model
    if declared:
        overrides["declared"] = replace(template.declared, **declared)
    return template.with_overrides(overrides)


# ---------------------------------------------------------------------------- workers

# Per-process state of a worker (pool process, Dask worker, or this process for jobs=1).
_WORKER: dict[str, Any] = {}


def _worker_cache(interactions: Path | None) -> Any:
    """This process's InputCache; replaced when the log changes so memory holds one log.

    Rows arrive grouped by log, so a worker never returns to a log it has moved past.
    The log is identified by path, size and modification time: a long-lived worker (a
    Dask worker, a notebook running several batches) never reuses counts of a log that
    was rewritten since.
    """
    from auditor.audit import InputCache

    identity: tuple[Any, ...] | None = None
    if interactions is not None:
        try:
            stat = os.stat(interactions)
            identity = (str(interactions), stat.st_size, stat.st_mtime_ns)
        except OSError:  # missing: the audit itself reports it
            identity = (str(interactions),)
    if "cache" not in _WORKER or _WORKER.get("log") != identity:
        _WORKER["cache"] = InputCache()
        _WORKER["log"] = identity
    return _WORKER["cache"]


def _worker_plugins(paths: tuple[Path, ...]) -> Any:
    """One plugin manager per worker and plugin list (entry points are scanned once)."""
    from auditor.plugins import get_plugin_manager

    managers = _WORKER.setdefault("pms", {})
    if paths not in managers:
        managers[paths] = get_plugin_manager(paths)
    return managers[paths]


def audit_job(job: BatchJob, audit_fn: AuditFn | None = None) -> dict[str, Any]:
    """Run one job in this process and return its results record; never raises for a
    failed audit (the record carries the error)."""
    if job.config is None:
        return error_record(job, job.error or "InputError: invalid manifest row")
    if audit_fn is None:
        from auditor.audit import run_audit

        audit_fn = run_audit
    start = time.perf_counter()
    try:
        pm = _worker_plugins(job.config.plugins)
        cache = _worker_cache(job.config.interactions)
        result = audit_fn(job.config, pm=pm, progress=SILENT, cache=cache)
        return result_record(job, result, time.perf_counter() - start)
    except Exception as exc:  # one bad row must never stop the batch
        return error_record(job, f"{type(exc).__name__}: {exc}", time.perf_counter() - start)


def _base_record(job: BatchJob) -> dict[str, Any]:
    interactions = job.config.interactions if job.config is not None else None
    return {
        "row": job.row,
        "model": job.model,
        "label": job.label,
        "interactions": None if interactions is None else str(interactions),
    }


def error_record(job: BatchJob, message: str, seconds: float | None = None) -> dict[str, Any]:
    """The record of a row that failed: status error, the message, no metrics."""
    record = _base_record(job)
    record.update(status=STATUS_ERROR, error=message, seconds=seconds)
    return record


def result_record(job: BatchJob, result: Any, seconds: float) -> dict[str, Any]:
    """The record of a finished audit: verdict, condition statuses, flat metrics, JSON."""
    record = _base_record(job)
    record.update(status=STATUS_OK, error=None, seconds=seconds)
    record["verdict_severity"] = result.verdict.severity
    record["bias_detected"] = bool(result.verdict.bias_detected)
    conditions = result.conditions or {}
    for cid in CONDITION_IDS:
        condition = conditions.get(cid)
        record[f"{cid}_status"] = None if condition is None else condition.status
    record["n_items"] = int(result.inputs.n_items)
    record["dim"] = int(result.inputs.dim)
    n = result.inputs.n_interactions
    record["n_interactions"] = None if n is None else int(n)
    for name, value in result.flat_metrics().items():
        if name not in _FIXED_NAMES:
            record[name] = value
    record["report_json"] = json.dumps(result.to_dict(), default=str)
    return record


# ---------------------------------------------------------------------------- dispatch


def _dispatch_inline(jobs: Sequence[BatchJob], audit_fn: AuditFn | None) -> Iterator[list[dict[str, Any]]]:
    for job in jobs:
        yield [audit_job(job, audit_fn)]


def _start_method() -> str:
    methods = multiprocessing.get_all_start_methods()
    return "forkserver" if "forkserver" in methods else "spawn"


def _dispatch_pool(
    jobs: Sequence[BatchJob], audit_fn: AuditFn | None, workers: int, start_method: str | None
) -> Iterator[list[dict[str, Any]]]:
    """Run jobs in worker processes, at most ``workers`` in flight; survive dead workers."""
    method = start_method or _start_method()
    context = multiprocessing.get_context(method)
    if method == "forkserver":
        # Workers fork from a server that has imported the audit stack (torch, pyarrow)
        # once, instead of each importing it; applies when the server starts.
        context.set_forkserver_preload(["auditor.batch", "auditor.audit", "auditor.plugins"])
    pending: deque[BatchJob] = deque(jobs)
    suspects: deque[BatchJob] = deque()  # in flight when a worker died: re-run alone
    in_flight: dict[Future[dict[str, Any]], BatchJob] = {}
    pool: ProcessPoolExecutor | None = None
    try:
        while pending or suspects or in_flight:
            if pool is None:
                pool = ProcessPoolExecutor(max_workers=workers, mp_context=context)
            # Suspects run alone; otherwise keep every worker busy.
            queue, limit = (suspects, 1) if suspects else (pending, workers)
            broken = False
            while queue and len(in_flight) < limit:
                job = queue.popleft()
                try:
                    in_flight[pool.submit(audit_job, job, audit_fn)] = job
                except BrokenProcessPool:  # a worker died since the last wait
                    queue.appendleft(job)
                    broken = True
                    break
            if not broken:
                done, _ = wait(list(in_flight), return_when=FIRST_COMPLETED)
                broken = any(isinstance(f.exception(), BrokenProcessPool) for f in done)
            if broken:
                # Every unfinished future of this pool fails too; settle them all now.
                pool.shutdown(wait=True, cancel_futures=True)
                pool = None
                done = set(in_flight)
            records: list[dict[str, Any]] = []
            died: list[BatchJob] = []
            for future in done:
                job = in_flight.pop(future)
                exc = future.exception()
                if exc is None:
                    records.append(future.result())
                elif isinstance(exc, BrokenProcessPool):
                    died.append(job)
                else:  # e.g. the job could not be pickled
                    records.append(error_record(job, f"{type(exc).__name__}: {exc}"))
            if len(died) == 1:
                records.append(error_record(died[0], WORKER_DIED))
            else:
                suspects.extend(sorted(died, key=lambda j: j.row))
            if records:
                yield records
    finally:
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


def _dispatch_dask(
    jobs: Sequence[BatchJob], audit_fn: AuditFn | None, address: str
) -> Iterator[list[dict[str, Any]]]:
    """Submit every job to the Dask cluster at ``address``; yield records as they finish."""
    from auditor.shards import dask_client

    with dask_client(address) as client:  # InputError when dask is missing or unreachable
        from distributed import as_completed

        futures: dict[Any, BatchJob] = {}
        try:
            token = f"{os.getpid()}-{time.time_ns()}"
            for job in jobs:  # submission order = priority: rows stay grouped by log
                future = client.submit(audit_job, job, audit_fn, pure=False, key=f"popaudit-row-{job.row}-{token}")
                futures[future] = job
            for batch in as_completed(list(futures), loop=client.loop, with_results=False).batches():
                records = []
                for future in batch:
                    job = futures[future]
                    try:
                        records.append(future.result())
                    except Exception as exc:  # KilledWorker, a lost connection, ...
                        records.append(error_record(job, f"dask: {type(exc).__name__}: {exc}"))
                yield records
        finally:
            for future in futures:
                future.cancel()


# ---------------------------------------------------------------------------- run


@dataclass
class BatchOutcome:
    """What a batch run left behind."""

    output: Path
    table: pa.Table
    """The results table as written (sorted by row)."""
    n_ok: int
    n_error: int
    n_resumed: int
    """Rows kept from an earlier run (``resume``) and not audited again."""
    failures: list[tuple[int, str, str]] = field(default_factory=list)
    """(row, model, error) of every error row."""


def _group_order(jobs: Sequence[BatchJob]) -> list[BatchJob]:
    """Jobs grouped by interaction log (groups in order of first appearance, rows in order)."""

    def log(job: BatchJob) -> str | None:
        return None if job.config is None or job.config.interactions is None else str(job.config.interactions)

    first: dict[str | None, int] = {}
    for job in jobs:
        first.setdefault(log(job), len(first))
    return sorted(jobs, key=lambda j: (first[log(j)], j.row))


def run_batch(
    manifest: Path | Manifest,
    output: Path,
    *,
    defaults: Mapping[str, Any] | None = None,
    jobs: int = 1,
    resume: bool = False,
    scheduler: str | None = None,
    progress: Progress = SILENT,
    audit_fn: AuditFn | None = None,
    start_method: str | None = None,
    flush_interval: float = 0.0,
) -> BatchOutcome:
    """Audit every manifest row and write the results Parquet file (module docstring).

    ``defaults``: AuditConfig settings (field names) every row starts from. ``jobs``:
    worker processes (1: audit in this process). ``scheduler``: a Dask scheduler address
    (overrides ``jobs``). ``audit_fn``: the audit to run, ``run_audit`` by default (must
    be importable by name for worker processes). ``start_method``: multiprocessing start
    method of the pool (default forkserver, else spawn). ``flush_interval``: minimum
    seconds between rewrites of the results file; 0 (default) flushes whenever audits
    finish, so a crash loses only the rows in flight; a larger value bounds the rewrite
    cost of huge manifests of quick audits, at the price of also losing rows finished
    within the last interval.
    """
    if jobs < 1:
        raise InputError(f"--jobs must be at least 1, got {jobs}")
    if flush_interval < 0:
        raise InputError(f"--flush-interval must be >= 0, got {flush_interval}")
    parsed = manifest if isinstance(manifest, Manifest) else read_manifest(Path(manifest))
    if Path(output).resolve() == parsed.path.resolve():
        raise InputError(f"the results file {output} would overwrite the manifest; choose another -o")
    all_jobs = build_jobs(parsed, defaults)
    ks = {k for job in all_jobs if job.config is not None for k in job.config.ks}
    ks |= set(_template(defaults or {}).ks)
    writer = ResultsWriter(output, ks, parsed.path.resolve())

    n_resumed = 0
    if resume and Path(output).exists():
        by_row = {job.row: job for job in all_jobs}
        for record in read_results(Path(output)).to_pylist():
            job = by_row.get(record.get("row"))  # type: ignore[arg-type]
            if job is not None and record.get("status") == STATUS_OK and record.get("model") == job.model:
                writer.add([record])
                n_resumed += 1
    todo = [job for job in all_jobs if job.row not in writer.status]
    bad = [job for job in todo if job.config is None]
    writer.add(error_record(job, job.error or "") for job in bad)
    for number, job in enumerate(bad, 1):
        progress.note(f"row {job.row} ({job.model}) failed [{number} failed so far]: {job.error}")
    runnable = _group_order([job for job in todo if job.config is not None])
    writer.flush()  # the file exists (and is valid) from the start

    if scheduler:
        batches = _dispatch_dask(runnable, audit_fn, scheduler)
    elif jobs == 1:
        batches = _dispatch_inline(runnable, audit_fn)
    else:
        batches = _dispatch_pool(runnable, audit_fn, min(jobs, max(1, len(runnable))), start_method)

    n_failed = list(writer.status.values()).count(STATUS_ERROR)
    with progress.track(f"Auditing {len(runnable)} of {len(all_jobs)} models", total=len(runnable)) as advance:
        try:
            for records in batches:
                writer.add(records)
                if time.monotonic() - writer.last_flush >= flush_interval:
                    writer.flush()
                for record in records:
                    if record["status"] == STATUS_ERROR:
                        n_failed += 1
                        progress.note(
                            f"row {record['row']} ({record['model']}) failed "
                            f"[{n_failed} failed so far]: {record['error']}"
                        )
                advance(len(records))
        finally:
            batches.close()
            writer.flush()  # rows finished within the last flush_interval
    table = writer.table()
    status = table.column("status").to_pylist()
    failures = [
        (int(r["row"]), str(r["model"]), str(r["error"]))
        for r in table.select(["row", "model", "error", "status"]).to_pylist()
        if r["status"] == STATUS_ERROR
    ]
    return BatchOutcome(
        output=Path(output),
        table=table,
        n_ok=status.count(STATUS_OK),
        n_error=status.count(STATUS_ERROR),
        n_resumed=n_resumed,
        failures=failures,
    )
