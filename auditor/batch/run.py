"""``run_batch``: audit every manifest row into one results file, resumable and crash safe.

Outputs never overwrite inputs: before anything runs, the results file (and any other
output the caller names, e.g. an HTML summary) is checked against the manifest, the
default files and every file a row names (:func:`~auditor.batch.jobs.batch_inputs`).
Ctrl-C stops the workers, saves the finished rows and raises :class:`BatchInterrupted`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pyarrow as pa

from auditor.batch.dispatch import Records, dispatch
from auditor.batch.journal import check_journal_place, journal_path
from auditor.batch.jobs import BatchJob, config_template, batch_inputs, build_jobs, row_title
from auditor.batch.manifest import Manifest, read_manifest
from auditor.batch.preload import start_workers
from auditor.batch.provenance import encode
from auditor.batch.results import ResultsWriter
from auditor.batch.resume import Provenances, resume_rows
from auditor.batch.workers import AuditFn, error_record
from auditor.errors import AuditError, InputError, setting
from auditor.io import is_special_file
from auditor.output_guard import parquet_name_problem
from auditor.output_guard import check_not_inputs
from auditor.ranges import check_ranges
from auditor.progress import SILENT, Advance, Progress
from auditor.summaries import STATUS_ERROR, STATUS_OK


class BatchInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM (raised from its Terminated) in :func:`run_batch`: the finished rows are saved in ``output``.

    A KeyboardInterrupt, so callers that do not know it still see an interrupt.
    """

    def __init__(self, output: Path, n_rows: int, n_saved: int, n_ok: int, untouched: bool = False) -> None:
        super().__init__(f"interrupted: {n_saved} of {n_rows} rows are saved in {output}")
        self.output = output
        self.untouched = untouched
        """The results file was there before the run and was left as it was (no row finished)."""
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
    recomputed: list[tuple[int, str]] = field(default_factory=list)
    """(row, why) of every row an earlier run had finished that ``resume`` audited again
    because what produced it changed (a cell, an input file, the model cell at its row
    number, a model that was another row)."""


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
    row_timeout: float = 0.0,
) -> BatchOutcome:
    """Audit every manifest row and write the results Parquet file.

    Manifests: :mod:`~auditor.batch.manifest`; where audits run (pool, Dask):
    :mod:`~auditor.batch.dispatch`; the results file: :mod:`~auditor.batch.results`.

    ``defaults``: AuditConfig settings (field names) every row starts from. ``jobs``:
    worker processes (1: a pool of one). ``scheduler``: a Dask scheduler address
    (overrides ``jobs``). ``audit_fn``: the audit to run, ``run_audit`` by default (must
    be importable by name for worker processes). ``start_method``: multiprocessing start
    method of the pool (default forkserver, else spawn; a forkserver is started first, so
    that its imports run while the manifest is read: :mod:`auditor.batch.preload`).
    ``flush_interval``: minimum
    seconds between rewrites of the results file; every finished row is appended to its
    journal at once (a crash loses the rows in flight only, ``resume`` reads the journal),
    and 0 (default) rewrites the file as audits finish, spaced so that rewriting takes at
    most about a fiftieth of the run; a larger value rewrites it less often (the file
    then lags further behind its journal). ``inline``: audit in this process, one row at a time (no
    isolation: a row that crashes the process ends the batch; for tests and debugging).
    ``other_outputs``: files the caller writes after the run (``{"--html": path}``),
    checked with ``output`` against every input before anything runs. ``row_timeout``:
    seconds a row may run in a local worker process before that process is killed and
    the row recorded as an error (0: no limit; not for inline or Dask runs).

    Worker processes import the main module, so a script that calls this must do so
    under ``if __name__ == "__main__":``. Raises InputError (an output names an input,
    bad defaults, an ``output`` named like text: ``results.csv``), ManifestError,
    AuditError (no worker process could start), and :class:`BatchInterrupted` on Ctrl-C
    once the finished rows are saved. ``resume`` with a
    results file written for another manifest (another resolved path) is a
    ManifestError, raised before the file is touched.
    """
    _check_settings(jobs, inline, flush_interval, row_timeout)
    if resume and is_special_file(output):  # /dev/stdout, /dev/null, a FIFO: nothing to read back
        raise InputError(f"{setting('resume')} continues the results file {setting('output')} names; {output} is "
                         "no file to read them back from")
    parsed = manifest if isinstance(manifest, Manifest) else read_manifest(Path(manifest))
    if not inline and not scheduler:  # the workers' imports run while the inputs are hashed
        start_workers(start_method, models=parsed.has_models)
    all_jobs = _jobs(parsed, output, defaults, other_outputs)
    writer = _writer(parsed, output, all_jobs, defaults)
    provenance = Provenances(all_jobs)
    resumed = resume and Path(output).exists()
    n_resumed, recomputed = resume_rows(writer, all_jobs, parsed, provenance) if resumed else (0, [])
    runnable = _fail_early(writer, all_jobs, provenance, progress)
    batches = dispatch(runnable, audit_fn, workers=jobs, scheduler=scheduler, inline=inline, start_method=start_method,
                       row_timeout=row_timeout)
    with progress.track(f"Auditing {len(runnable)} of {len(all_jobs)} models", total=len(runnable)) as advance:
        stop = _collect(batches, writer, provenance, progress, advance, flush_interval)
        if stop is not None:  # raised in the track: not "done"
            statuses = list(writer.status.values())
            raise BatchInterrupted(Path(output), len(all_jobs), len(statuses), statuses.count(STATUS_OK),
                                   untouched=not writer.written and Path(output).exists()) from stop
    return _outcome(writer.table(), Path(output), n_resumed, recomputed)


def _check_settings(jobs: int, inline: bool, flush_interval: float, row_timeout: float) -> None:
    """InputError for settings out of range or that do not go together."""
    if jobs < 1:
        raise InputError(f"{setting('jobs')} must be at least 1, got {jobs}")
    check_ranges({"jobs": jobs, "row_timeout": row_timeout, "flush_interval": flush_interval})
    if inline and jobs != 1:
        raise InputError(f"inline audits run one at a time; {setting('jobs')} must be 1, got {jobs}")
    if flush_interval < 0:
        raise InputError(f"{setting('flush_interval')} must be >= 0, got {flush_interval}")


def _jobs(
    parsed: Manifest, output: Path, defaults: Mapping[str, Any] | None, other_outputs: Mapping[str, Path | None] | None,
) -> list[BatchJob]:
    """The manifest's jobs, once no output (the results file, ``other_outputs``) names an input."""
    if Path(output).resolve() == parsed.path.resolve():
        raise InputError(f"the results file {output} would overwrite the manifest; choose another {setting('output')}")
    all_jobs = build_jobs(parsed, defaults)
    journal = journal_path(Path(output))
    outputs = {setting("output"): Path(output), **({} if journal is None else {f"{setting('output')} (its journal)": journal})}
    check_not_inputs({**outputs, **(other_outputs or {})}, batch_inputs(parsed, defaults))
    check_journal_place(journal)
    if (misnamed := parquet_name_problem(Path(output), setting("output"), "the batch results")) is not None:
        raise InputError(misnamed)  # after the inputs' guard: "would overwrite the manifest" says more
    return all_jobs


def _writer(parsed: Manifest, output: Path, jobs: list[BatchJob], defaults: Mapping[str, Any] | None) -> ResultsWriter:
    """The results writer, with a column per K any row (or the defaults) asks for."""
    ks = {k for job in jobs if job.config is not None for k in job.config.ks}
    ks |= set(config_template(defaults or {}).ks)
    return ResultsWriter(output, ks, parsed.path.resolve(), parsed.sha256)


def _fail_early(writer: ResultsWriter, jobs: list[BatchJob], provenance: Provenances, progress: Progress) -> list[BatchJob]:
    """Record the rows still to do that fail before any audit (invalid rows, missing
    inputs) and return the others, their provenance taken now: the inputs as the audits
    will find them. The results file exists (and is valid) from here on; one already
    there is replaced only once a row is recorded (``ResultsWriter.written``)."""
    todo = [job for job in jobs if job.row not in writer.status]
    bad = [job for job in todo if job.config is None] + _missing_inputs(todo)
    writer.add(error_record(job, job.error or "") for job in bad)
    for number, job in enumerate(bad, 1):
        progress.note(f"{row_title(job.row, job.model)} failed [{number} failed so far]: {job.error}")
    failed_early = {job.row for job in bad}
    runnable = [job for job in todo if job.row not in failed_early]
    for job in runnable:
        provenance.of(job.row)
    writer.flush()
    return runnable


def _collect(
    batches: Records, writer: ResultsWriter, provenance: Provenances, progress: Progress, advance: Advance,
    flush_interval: float,
) -> KeyboardInterrupt | None:
    """Write the records of ``batches`` as audits finish, each with its provenance (for a
    later resume), and say each failed row; the Ctrl-C or SIGTERM that ended the run, if
    any. Either way the workers are stopped (audits in flight dropped), finished rows saved."""
    n_failed = list(writer.status.values()).count(STATUS_ERROR)
    try:
        for records in batches:
            if not records:  # an idle moment: rows held back are written now
                _save_records([], writer, provenance, flush_interval)
            for record in records:  # a row at a time, also when rows finish together
                _save_records([record], writer, provenance, flush_interval)
                if record["status"] == STATUS_ERROR:
                    n_failed += 1
                    progress.note(
                        f"{row_title(record['row'], record['model'])} failed "
                        f"[{n_failed} failed so far]: {record['error']}"
                    )
                advance(1)
    except KeyboardInterrupt as stop:
        return stop
    finally:
        batches.close()  # stops the workers: audits in flight are dropped
        writer.finish()  # rows finished within the last flush_interval
    return None


def _save_records(
    records: list[dict[str, Any]], writer: ResultsWriter, provenance: Provenances, flush_interval: float
) -> None:
    """Append ``records`` (each with its provenance) to the journal, and rewrite the results
    file when the last rewrite is far enough behind."""
    for at, record in enumerate(records):
        if record["status"] == STATUS_OK and (moved := provenance.moved(record["row"])) is not None:
            job = provenance.job(record["row"])  # the figures may come from other content: never kept
            records[at] = record = error_record(job, f"InputError: {moved}; audit it again", record["seconds"])
        if (found := provenance.of(record["row"])) is not None:
            record["provenance"] = encode(found)
    writer.add(records)
    writer.save()  # appended to the journal: on disk, whatever happens next
    # Rewriting the whole file takes at most about a fiftieth of the run, so a huge
    # manifest of quick rows stays linear in its rows (not quadratic); rows held back
    # are written at the next idle moment the dispatcher gives.
    gap = max(flush_interval, FLUSH_SHARE * writer.last_cost)
    if writer.unsaved and not writer.once and time.monotonic() - writer.last_flush >= gap:
        writer.flush()


def _outcome(table: pa.Table, output: Path, n_resumed: int, recomputed: list[tuple[int, str]]) -> BatchOutcome:
    """What the run left behind, from the results table as written."""
    status = table.column("status").to_pylist()
    failures = [
        (int(r["row"]), str(r["model"]), str(r["error"]))
        for r in table.select(["row", "model", "error", "status"]).to_pylist()
        if r["status"] == STATUS_ERROR
    ]
    return BatchOutcome(
        output=output,
        table=table,
        n_ok=status.count(STATUS_OK),
        n_error=status.count(STATUS_ERROR),
        n_resumed=n_resumed,
        failures=failures,
        recomputed=recomputed,
    )


FLUSH_SHARE = 49.0
"""A rewrite of the results file waits at least this many times as long as the previous
one took (the journal holds the rows finished in between)."""


def _missing_inputs(jobs: list[BatchJob]) -> list[BatchJob]:
    """Rows whose model or another input is missing or a special file, each as a job
    carrying its error: recorded here, without a trip to a worker process (a manifest
    of 100,000 rows naming missing files finishes in time proportional to its rows)."""
    failed: list[BatchJob] = []
    for job in jobs:
        if job.config is None:
            continue
        try:
            job.config.check_inputs()
        except AuditError as exc:
            failed.append(replace(job, config=None, error=f"{type(exc).__name__}: {exc}"))
    return failed
