"""The results table of ``popaudit batch``: its schema, its writer and its reader.

:func:`auditor.batch.run_batch` hands each finished row to :class:`ResultsWriter`;
:mod:`auditor.report.batch_summary` reads a finished table (the ``status`` values are
:mod:`auditor.summaries`' ``STATUS_OK`` and ``STATUS_ERROR``).

Results
-------
One row per manifest row, sorted by ``row``; the columns and their order are
:func:`result_schema` (shown for the cut-offs 10 and 100):

==================  =======  ===========================================================
column              type     meaning
==================  =======  ===========================================================
row                 int64    0-based index of the row in the manifest
model               string   the ``model`` cell as written in the manifest
label               string   the ``label`` cell (null without that column)
interactions        string   the interaction log used (absolute path; null: none)
status              string   ``ok`` or ``error``
error               string   ``ExceptionType: message`` when status is error, else null
verdict_severity    string   ``none`` / ``low`` / ``moderate`` / ``high``
bias_detected       bool     the verdict's ``bias_detected``
C1_status..C5_status string  ``holds`` / ``violated`` / ``unknown`` per condition
n_items, dim        int64    item table shape
n_interactions      int64    interactions read from the log (null: none)
query_source        string   who the model's lists were retrieved for: ``users``,
                             ``history`` or ``file`` (``retrieval.population.source``;
                             null: no retrieval)
seen_items          string   ``excluded`` (the training log's protocol), ``kept``
                             (``keep_seen``) or ``unknown`` (counts for the log, a query
                             file: another protocol; ``retrieval.population.seen_items``).
                             The figures of the model's lists compare only between rows
                             whose two population columns agree (:mod:`auditor.protocol`)
index               string   ``retrieval.index``: ``exact``, or an approximate index
                             (``ivf``, ``hnsw``) whose figures of the model's lists are
                             the index's, missing what it misses (null: no retrieval)
popularity          string   ``retrieval.popularity``: ``interactions`` or ``users``
                             (what an item's popularity counts; null: no retrieval).
                             The batch summary compares two rows' figures where
                             ``popaudit diff`` would (:mod:`auditor.diff.comparability`)
seconds             float64  wall time of the audit (differs between runs; everything
                             else is deterministic for a given manifest and seed)
<flat metrics>      float64  :func:`auditor.flat.metric_names` order: ``spearman``,
                             ``spearman_ci_lo``, ``spearman_ci_hi``, ``spearman_p``,
                             ``pearson_log``, ``kendall``, ``loglog_slope``, then for
                             every requested K (sorted): ``<metric>_<scoring>@K``,
                             ``<metric>_ratio@K``, ``overlap_dot_cosine@K``, ``recall@K``
<plugin metrics>    float64  numeric measures added by plugins, sorted by name
provenance          string   what produced the row: its settings after the defaults and
                             each input file's size, mtime and SHA-256 (JSON)
report_json         string   the full JSON report (docs/report.md, schema_version 1)
==================  =======  ===========================================================

Metrics that were not measured (and every metric of an ``error`` row) are null.

Crash safety
------------
Each finished row is appended at once to the results journal (:mod:`auditor.batch.journal`,
``.<name>.journal`` beside the target, a JSON line per row): saving a row costs the row,
not the table. The whole table is written now and then to a temp file beside the target
and renamed onto it (:func:`auditor.io.atomic_path`), after which the journal is
removed: the file on disk is always a complete, valid Parquet file (the rows finished by
its last rewrite, sorted by row), and the file with the journal holds every row
finished, so a crash or kill loses only the rows in flight. Rewrites are spaced by their
own cost (the next waits at least 49 times as long as the last took, rows finishing
sooner are written together at the next idle moment), so rewriting takes at most about
a fiftieth of the run and a manifest of 100,000 quick rows finishes in time proportional
to its rows; records are converted to Arrow once, in bulk, when the file is rewritten.
:func:`auditor.batch.run_batch`'s ``flush_interval`` spaces the rewrites further (the
journal still holds the rows in between). ``resume=True`` reads the rows of the results
file and of its journal, keeps those already ``ok`` whose provenance
(:mod:`auditor.batch.provenance`) is unchanged and runs the rest.

Provenance
----------
The schema metadata ``popaudit.batch`` (JSON) records ``results_version``, ``ks``, the
manifest the file was written for (``manifest``: its resolved path) and
``manifest_sha256`` (the SHA-256 of the manifest file as read); see
:func:`results_manifest`. ``resume=True`` refuses (ManifestError, the file left as it
is) a results file recorded for another manifest path (the same row and model cell there
may name another file), and a results file without provenance (not written by popaudit,
or by a version before results_version 2): its rows cannot be checked against their
inputs. The same manifest edited in place resumes; each row is kept only when its
settings and input files are what produced it (the ``provenance`` column).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from auditor.batch.journal import Journal, journal_path
from auditor.errors import InputError
from auditor.flat import metric_names
from auditor.io import atomic_path, is_special_file
from auditor.protocol import report_population
from auditor.result import CONDITION_IDS

RESULTS_VERSION = 2
"""2: rows carry their ``provenance`` (what ``--resume`` checks); 1 had none."""


# ---------------------------------------------------------------------------- schema

_FIXED_HEAD: tuple[tuple[str, pa.DataType, str], ...] = (
    ("row", pa.int64(), "0-based index of the row in the manifest"),
    ("model", pa.string(), "the model cell as written in the manifest"),
    ("label", pa.string(), "the manifest's label cell (null without that column)"),
    ("interactions", pa.string(), "interaction log used (absolute path; null: none)"),
    ("status", pa.string(), "ok or error"),
    ("error", pa.string(), "'ExceptionType: message' for error rows, else null"),
    ("verdict_severity", pa.string(), "none, low, moderate or high"),
    ("bias_detected", pa.bool_(), "the verdict's bias_detected"),
    *((f"{c}_status", pa.string(), f"{c}: holds, violated or unknown") for c in CONDITION_IDS),
    ("n_items", pa.int64(), "rows of the item table"),
    ("dim", pa.int64(), "embedding dimension"),
    ("n_interactions", pa.int64(), "interactions read from the log (null: none)"),
    ("query_source", pa.string(), "who the model's lists were retrieved for: users, history or file "
                                  "(retrieval.population.source; null: no retrieval)"),
    ("seen_items", pa.string(), "excluded (the training log's protocol), kept or unknown (another protocol: counts "
                                "for the log, a query file); retrieval.population.seen_items"),
    ("index", pa.string(), "retrieval.index: exact, or an approximate index (ivf, hnsw) whose figures of the model's "
                           "lists are the index's (null: no retrieval)"),
    ("popularity", pa.string(), "retrieval.popularity: what popularity counts, interactions or users (null: no "
                                "retrieval)"),
    ("seconds", pa.float64(), "wall time of the audit in seconds"),
)
_FIXED_TAIL: tuple[tuple[str, pa.DataType, str], ...] = (
    ("provenance", pa.string(), "what produced the row: its settings and each input file's size, mtime and "
                                "SHA-256 (JSON; checked when the batch is resumed)"),
    ("report_json", pa.string(), "the full JSON report (docs/report.md, schema_version 1)"),
)
FIXED_COLUMNS = {name for name, _, _ in _FIXED_HEAD + _FIXED_TAIL}
POPULATION_COLUMNS = {"query_source": "source", "seen_items": "seen_items"}
"""Column -> key of the report's ``retrieval.population`` (:data:`auditor.protocol.POPULATION_KEYS`)."""
RETRIEVAL_COLUMNS = ("index", "popularity")
"""Columns that are the report's ``retrieval`` key of the same name."""
PROTOCOL_COLUMNS = (*POPULATION_COLUMNS, *RETRIEVAL_COLUMNS)
"""What diff's rule reads of how a row's lists were measured, as columns (:func:`population_columns`)."""


def population_columns(report: Any) -> dict[str, Any]:
    """A row's population and retrieval columns (:data:`PROTOCOL_COLUMNS`), read from its
    JSON report (a dict, or its text: a row kept on resume from a file written before the
    columns were)."""
    if isinstance(report, str):
        try:
            report = json.loads(report)
        except ValueError:
            report = None
    population = report_population(report)
    retrieval = report.get("retrieval") if isinstance(report, dict) else None
    retrieval = retrieval if isinstance(retrieval, dict) else {}
    said = {column: value if isinstance(value := retrieval.get(column), str) else None for column in RETRIEVAL_COLUMNS}
    return {**{column: population[key] for column, key in POPULATION_COLUMNS.items()}, **said}


def missing_protocol(record: dict[str, Any]) -> dict[str, Any]:
    """The protocol columns of a row kept on resume from a file written before they were,
    filled from its report ({} when the record has them all)."""
    if all(column in record for column in PROTOCOL_COLUMNS):
        return {}
    return population_columns(record.get("report_json"))


def _field(name: str, dtype: pa.DataType, doc: str) -> pa.Field:
    return pa.field(name, dtype, nullable=True, metadata={"description": doc})


def result_schema(ks: Iterable[int], extra_metrics: Iterable[str] = ()) -> pa.Schema:
    """The results table's schema for cut-offs ``ks`` (and plugin metrics), in column order."""
    cutoffs = sorted({int(k) for k in ks})
    flat = metric_names(cutoffs)
    extras = sorted(set(extra_metrics) - set(flat) - FIXED_COLUMNS)
    columns = [_field(*spec) for spec in _FIXED_HEAD]
    columns += [_field(name, pa.float64(), "flat metric (docs/measures.md)") for name in flat]
    columns += [_field(name, pa.float64(), "plugin measure") for name in extras]
    columns += [_field(*spec) for spec in _FIXED_TAIL]
    return pa.schema(
        columns,
        metadata={"popaudit.batch": json.dumps({"results_version": RESULTS_VERSION, "ks": cutoffs})},
    )


# ---------------------------------------------------------------------------- writer


class ResultsWriter:
    """Finished records: appended to the journal as they come (:meth:`save`), and the
    results file rewritten whole and atomically now and then (:meth:`flush`), the journal
    then removed.

    Records are converted to Arrow once, in bulk, when the file is rewritten: the rows
    already in the file are not converted again.
    """

    def __init__(
        self, output: Path, ks: Iterable[int], manifest: Path | None = None, manifest_sha256: str | None = None
    ) -> None:
        self.output = Path(output)
        self.ks = tuple(sorted(set(ks)))
        self.manifest = manifest
        """The manifest the results are for (resolved path), recorded in the schema metadata."""
        self.manifest_sha256 = manifest_sha256
        """SHA-256 of the manifest file, recorded beside its path."""
        self.status: dict[int, str] = {}
        """Row -> status of every record added."""
        self._table: pa.Table | None = None
        self._pending: list[dict[str, Any]] = []
        """Records added and not yet in the journal."""
        self._held: list[dict[str, Any]] = []
        """Records in the journal and not yet in the table."""
        self._extras: set[str] = set()
        self._schemas: dict[frozenset[str], pa.Schema] = {}
        self.journal = Journal(journal_path(self.output))
        self.last_flush = -math.inf
        """``time.monotonic()`` at the end of the last flush."""
        self.last_cost = 0.0
        """Seconds the last flush took (the caller spaces flushes by it)."""
        self.unsaved = 0
        """Records added since the results file was last rewritten (the journal holds them)."""
        self.written = False
        """Whether this writer has written the results file: until a row is finished it leaves
        a file already there as it was (an interrupted run must not empty an earlier run's results)."""
        self.once = is_special_file(self.output)
        """A stream (``/dev/stdout``, a pipe) gets one table, at the end: rewrites would
        follow one another into it."""

    def add(self, records: Iterable[dict[str, Any]]) -> None:
        for record in records:
            self.status[int(record["row"])] = record["status"]
            self._pending.append(record)
            self.unsaved += 1

    def save(self) -> None:
        """Append the records added since the last save to the journal (a line each)."""
        if self._pending:
            self.journal.append(self._pending)
            self._held += self._pending
            self._pending = []

    def _schema(self) -> pa.Schema:
        key = frozenset(self._extras)
        if key not in self._schemas:
            self._schemas[key] = self._with_manifest(result_schema(self.ks, self._extras))
        return self._schemas[key]

    def _with_manifest(self, schema: pa.Schema) -> pa.Schema:
        if self.manifest is None:
            return schema
        meta = dict(schema.metadata or {})
        info = json.loads(meta[b"popaudit.batch"])
        info["manifest"] = str(self.manifest)
        if self.manifest_sha256 is not None:
            info["manifest_sha256"] = self.manifest_sha256
        meta[b"popaudit.batch"] = json.dumps(info).encode()
        return schema.with_metadata(meta)

    def table(self) -> pa.Table:
        """Every record added so far, sorted by row (the last record of a row wins)."""
        records = self._held + self._pending
        if records or self._table is None:
            self._extras |= {
                key
                for record in records
                for key, value in record.items()
                if key not in FIXED_COLUMNS
                and (value is None or isinstance(value, (int, float)))
                and not isinstance(value, bool)
            }
            schema = self._schema()
            latest = {int(r["row"]): r for r in records}
            new = pa.Table.from_pylist(list(latest.values()), schema=schema)
            if self._table is not None:
                old = _widened(self._table, schema)
                replaced = pa.array(list(latest), pa.int64())
                old = old.filter(pc.invert(pc.is_in(old["row"], value_set=replaced)))
                new = pa.concat_tables([old, new])
            self._table = new.sort_by("row").combine_chunks()
            self._held, self._pending = [], []
        return self._table

    def finish(self) -> pa.Table:
        """The last :meth:`flush` of a run, the one that writes a stream output too."""
        self.once = False
        return self.flush()

    def flush(self) -> pa.Table:
        """Write every finished row to the results file (temp file + atomic rename); the
        journal then holds nothing the file does not, and is removed. A stream output is
        written only by :meth:`finish`; a file already there is not replaced before a
        record was added (:attr:`written`)."""
        began = time.monotonic()
        table = self.table()
        if self.once or (not self.unsaved and not self.written and self.output.exists()):
            return table  # nothing finished yet: a file already there stays as it was
        with atomic_path(self.output) as tmp:
            pq.write_table(table, tmp, compression="zstd")
        self.written = True
        self.journal.remove()
        self.last_flush = time.monotonic()
        # An empty file's cost is the writer's start-up (imports): it does not space the next.
        self.last_cost = self.last_flush - began if table.num_rows else 0.0
        self.unsaved = 0
        return table


def _widened(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` in ``schema``'s columns (a plugin metric that appeared later: nulls before)."""
    if table.schema.names == schema.names:
        return table
    present = set(table.column_names)  # a set: a results table can have a thousand columns
    return pa.table([table[f.name] if f.name in present else pa.nulls(table.num_rows, f.type) for f in schema],
                    schema=schema)


def results_manifest(table: pa.Table) -> tuple[str | None, str | None]:
    """The manifest a results table was written for: (resolved path, SHA-256 of the
    file), from its schema metadata; None for what a file does not record."""
    raw = (table.schema.metadata or {}).get(b"popaudit.batch")
    try:
        info = json.loads(raw) if raw else {}
    except ValueError:
        info = {}
    if not isinstance(info, dict):
        return None, None
    path, digest = info.get("manifest"), info.get("manifest_sha256")
    return (path if isinstance(path, str) else None, digest if isinstance(digest, str) else None)


def has_provenance(table: pa.Table) -> bool:
    """True for a results table popaudit wrote with each row's provenance (version 2 on)."""
    raw = (table.schema.metadata or {}).get(b"popaudit.batch")
    try:
        info = json.loads(raw) if raw else {}
    except ValueError:
        return False
    version = info.get("results_version") if isinstance(info, dict) else None
    return isinstance(version, int) and version >= 2 and "provenance" in table.column_names


def read_results(path: Path) -> pa.Table:
    """Read a results file written by :func:`~auditor.batch.run_batch`; InputError when it is not one."""
    try:
        from auditor.loading.parquet_bounds import read_table as bounded_read_table  # loads torch

        table = bounded_read_table(path, None, InputError)
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(f"{path} is not a readable Parquet results file: {exc}") from exc
    missing = [c for c in ("row", "model", "status") if c not in table.column_names]
    if missing:
        raise InputError(f"{path} is not a popaudit batch results file (no {', '.join(missing)} column)")
    return table
