"""Resuming a batch: which rows of an earlier results file are kept, and why the others
are audited again (each row's provenance: settings after defaults, each input file's size,
mtime and hash, :mod:`auditor.batch.provenance`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa

from auditor.batch.jobs import BatchJob
from auditor.batch.journal import read_journal
from auditor.batch.manifest import Manifest
from auditor.batch.provenance import FileStates, Stamp, change, moved_since, row_provenance, stamps
from auditor.batch.results import ResultsWriter, has_provenance, missing_protocol, read_results, results_manifest
from auditor.errors import ManifestError, setting
from auditor.summaries import STATUS_OK


class Provenances:
    """Each row's provenance, computed when first needed (rows that fail before running
    need none) and then kept: it describes the inputs as the row's audit found them."""

    def __init__(self, jobs: list[BatchJob]) -> None:
        self._jobs = {job.row: job for job in jobs}
        self._states = FileStates()
        self._done: dict[int, dict[str, Any]] = {}
        self._stamps: dict[int, dict[str, Stamp | None]] = {}

    def of(self, row: int) -> dict[str, Any] | None:
        job = self._jobs.get(row)
        if job is None or job.config is None:
            return None
        if row not in self._done:
            self._stamps[row] = stamps(job.config)
            self._done[row] = row_provenance(job.config, self._states)
        return self._done[row]

    def job(self, row: int) -> BatchJob:
        return self._jobs[row]

    def moved(self, row: int) -> str | None:
        """Why the row's figures may not be those of the files its provenance describes
        (an input written since it was taken), or None."""
        job = self._jobs.get(row)
        if job is None or job.config is None or row not in self._stamps:
            return None
        return moved_since(self._stamps[row], job.config)


def resume_rows(
    writer: ResultsWriter, jobs: list[BatchJob], manifest: Manifest, provenance: Provenances
) -> tuple[int, list[tuple[int, str]]]:
    """Keep the rows of the earlier results file that are ok for the same row and model
    and whose provenance (settings after defaults, each input file's size, mtime and
    hash: :mod:`auditor.batch.provenance`) is what the row has now; returns how many were
    kept and (row, why) of each finished row audited again.

    The file must have been written by popaudit with provenance, for this manifest (the
    resolved path its schema metadata records): the same row and model cell in another
    manifest's results can name another file, and a row without provenance cannot be
    checked against its inputs. ManifestError otherwise, before anything is written.
    """
    earlier = read_results(writer.output)
    _check_same_manifest(writer.output, earlier, manifest)
    if not has_provenance(earlier):
        raise ManifestError(
            f"cannot resume from {writer.output}: it records no provenance (it was not written by popaudit, or "
            "by a version before results_version 2), so its rows cannot be checked against the inputs that "
            f"produced them. Run without {setting('resume')} to replace it, or write to another {setting('output')}"
        )
    kept = 0
    recomputed: list[tuple[int, str]] = []
    # The rows a crash left only in the journal: written later, they replace the file's.
    latest = {record.get("row"): record for record in earlier.to_pylist() + read_journal(writer.journal.path)}
    finished = {row: record for row, record in latest.items() if record.get("status") == STATUS_OK}
    vacated = _vacated(finished, jobs)
    for job in jobs:
        record = finished.get(job.row)
        if record is None or record.get("model") != job.model:
            why = _moved_or_replaced(job, record, vacated.get(job.model, []))
            if why is not None:
                recomputed.append((job.row, why))
            continue
        now = provenance.of(job.row)
        why = "the row is invalid now" if now is None else change(record.get("provenance"), now)
        if why is None:
            # The label is no input: the current one. A row from before the population columns gets them.
            writer.add([{**record, **missing_protocol(record), "label": job.label}])
            kept += 1
        else:
            recomputed.append((job.row, why))
    return kept, recomputed


def _vacated(finished: Mapping[Any, dict[str, Any]], jobs: list[BatchJob]) -> dict[str, list[int]]:
    """Model cell -> the rows the earlier run finished it at that now hold another model
    cell (or are gone): where a row that moved came from. Lists-only rows (no model cell)
    are told apart by their files, not a name, and are left out."""
    now = {job.row: job.model for job in jobs}
    vacated: dict[str, list[int]] = {}
    for row, record in sorted(finished.items(), key=lambda item: int(item[0])):
        model = record.get("model")
        if model and now.get(row) != model:
            vacated.setdefault(str(model), []).append(int(row))
    return vacated


def _moved_or_replaced(job: BatchJob, record: dict[str, Any] | None, came_from: list[int]) -> str | None:
    """Why ``job`` is audited again although the earlier run finished its row number (with
    another model cell) or its model cell at a row that now holds another (``came_from``:
    the row moved), said with where it was; finished rows are kept only where row number
    and model cell both match. None: neither, a row new to the manifest or one the earlier run did not finish
    (never audited, so not audited again)."""
    rows = ", ".join(map(str, came_from)) if came_from and job.model else None
    if record is None:
        return None if rows is None else (f"its model cell {job.model!r} was row {rows} in the earlier run (finished "
                                          "rows are kept only at their row number)")
    moved = "" if rows is None else f", which was row {rows}"
    return f"its model cell changed ({record.get('model')!r} in the earlier run, {job.model!r} now{moved})"


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
