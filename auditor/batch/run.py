"""``run_batch``: audit every manifest row into one results file, resumable and crash safe.

Outputs never overwrite inputs: before anything runs, the results file (and any other
output the caller names, e.g. an HTML summary) is checked against the manifest, the
default files and every file a row names (:func:`~auditor.batch.jobs.batch_inputs`).
Ctrl-C stops the workers, saves the finished rows and raises :class:`BatchInterrupted`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from auditor.batch.dispatch import dispatch
from auditor.batch.jobs import BatchJob, config_template, batch_inputs, build_jobs
from auditor.batch.manifest import Manifest, read_manifest
from auditor.batch.results import ResultsWriter, read_results, results_manifest
from auditor.batch.workers import AuditFn, error_record
from auditor.errors import InputError, ManifestError, setting
from auditor.io import check_not_inputs
from auditor.progress import SILENT, Progress
from auditor.summaries import STATUS_ERROR, STATUS_OK


class BatchInterrupted(KeyboardInterrupt):
    """Ctrl-C during :func:`run_batch`: the finished rows are saved in ``output``.

    A KeyboardInterrupt, so callers that do not know it still see an interrupt.
    """

    def __init__(self, output: Path, n_rows: int, n_saved: int, n_ok: int) -> None:
        super().__init__(f"interrupted: {n_saved} of {n_rows} rows are saved in {output}")
        self.output = output
        self.n_rows = n_rows
        """Rows in the manifest."""
        self.n_saved = n_saved
        """Rows in the results file (ok or error)."""
        self.n_ok = n_ok


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
    inline: bool = False,
    other_outputs: Mapping[str, Path | None] | None = None,
) -> BatchOutcome:
    """Audit every manifest row and write the results Parquet file.

    Manifests: :mod:`~auditor.batch.manifest`; where audits run (pool, Dask):
    :mod:`~auditor.batch.dispatch`; the results file: :mod:`~auditor.batch.results`.

    ``defaults``: AuditConfig settings (field names) every row starts from. ``jobs``:
    worker processes (1: a pool of one). ``scheduler``: a Dask scheduler address
    (overrides ``jobs``). ``audit_fn``: the audit to run, ``run_audit`` by default (must
    be importable by name for worker processes). ``start_method``: multiprocessing start
    method of the pool (default forkserver, else spawn). ``flush_interval``: minimum
    seconds between rewrites of the results file; 0 (default) flushes whenever audits
    finish, so a crash loses only the rows in flight; a larger value bounds the rewrite
    cost of huge manifests of quick audits, at the price of also losing rows finished
    within the last interval. ``inline``: audit in this process, one row at a time (no
    isolation: a row that crashes the process ends the batch; for tests and debugging).
    ``other_outputs``: files the caller writes after the run (``{"--html": path}``),
    checked with ``output`` against every input before anything runs.

    Worker processes import the main module, so a script that calls this must do so
    under ``if __name__ == "__main__":``. Raises InputError (an output names an input,
    bad defaults), ManifestError, AuditError (no worker process could start), and
    :class:`BatchInterrupted` on Ctrl-C once the finished rows are saved. ``resume`` with a
    results file written for another manifest (another resolved path) is a
    ManifestError, raised before the file is touched.
    """
    if jobs < 1:
        raise InputError(f"{setting('jobs')} must be at least 1, got {jobs}")
    if inline and jobs != 1:
        raise InputError(f"inline audits run one at a time; {setting('jobs')} must be 1, got {jobs}")
    if flush_interval < 0:
        raise InputError(f"{setting('flush_interval')} must be >= 0, got {flush_interval}")
    parsed = manifest if isinstance(manifest, Manifest) else read_manifest(Path(manifest))
    if Path(output).resolve() == parsed.path.resolve():
        raise InputError(f"the results file {output} would overwrite the manifest; choose another {setting('output')}")
    all_jobs = build_jobs(parsed, defaults)
    check_not_inputs({setting("output"): Path(output), **(other_outputs or {})}, batch_inputs(parsed, defaults))
    ks = {k for job in all_jobs if job.config is not None for k in job.config.ks}
    ks |= set(config_template(defaults or {}).ks)
    writer = ResultsWriter(output, ks, parsed.path.resolve(), parsed.sha256)

    n_resumed = _resume(writer, all_jobs, parsed) if resume and Path(output).exists() else 0
    todo = [job for job in all_jobs if job.row not in writer.status]
    bad = [job for job in todo if job.config is None]
    writer.add(error_record(job, job.error or "") for job in bad)
    for number, job in enumerate(bad, 1):
        progress.note(f"row {job.row} ({job.model}) failed [{number} failed so far]: {job.error}")
    runnable = [job for job in todo if job.config is not None]
    writer.flush()  # the file exists (and is valid) from the start

    batches = dispatch(runnable, audit_fn, workers=jobs, scheduler=scheduler, inline=inline, start_method=start_method)

    n_failed = list(writer.status.values()).count(STATUS_ERROR)
    interrupted = False
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
        except KeyboardInterrupt:
            interrupted = True
        finally:
            batches.close()  # stops the workers: audits in flight are dropped
            writer.flush()  # rows finished within the last flush_interval
    if interrupted:
        statuses = list(writer.status.values())
        raise BatchInterrupted(Path(output), len(all_jobs), len(statuses), statuses.count(STATUS_OK))
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


def _resume(writer: ResultsWriter, jobs: list[BatchJob], manifest: Manifest) -> int:
    """Keep the rows of the earlier results file that are ok for the same row and model
    (a changed manifest re-runs what changed); returns how many were kept.

    The file must have been written for this manifest (the resolved path its schema
    metadata records): the same row and model cell in another manifest's results can
    name another file (relative paths resolve against each manifest's folder), so
    keeping them would report one model's audit as another's. ManifestError otherwise,
    before anything is written. Files that record no manifest are taken as they are.
    """
    earlier = read_results(writer.output)
    _check_same_manifest(writer.output, earlier, manifest)
    by_row = {job.row: job for job in jobs}
    kept = 0
    for record in earlier.to_pylist():
        job = by_row.get(record.get("row"))
        if job is not None and record.get("status") == STATUS_OK and record.get("model") == job.model:
            writer.add([record])
            kept += 1
    return kept


def _check_same_manifest(output: Path, earlier: pa.Table, manifest: Manifest) -> None:
    """ManifestError when the results file ``output`` was written for another manifest."""
    recorded, digest = results_manifest(earlier)
    here = manifest.path.resolve()
    if recorded is None or Path(recorded) == here:
        return
    same_bytes = digest is not None and digest == manifest.sha256
    note = " (the files have the same content, but relative paths resolve against each one's folder)" if same_bytes else ""
    raise ManifestError(
        f"cannot resume: the results file {output} was written for manifest {recorded}, not for "
        f"{manifest.path} ({here}){note}; its rows may be audits of other models. Write to "
        f"another {setting('output')}, or run without {setting('resume')} to replace it"
    )
