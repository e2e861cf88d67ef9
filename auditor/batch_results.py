"""The results table of ``popaudit batch``: its schema, its writer, and its summary.

:mod:`auditor.batch` runs the audits and hands each finished row to
:class:`ResultsWriter`; :func:`summarise` and :func:`summary_html` read a finished table.

Results
-------
One row per manifest row, sorted by ``row``; the columns and their order are
:func:`result_schema` (``RESULT_SCHEMA`` is the schema for the default cut-offs 10 and
100):

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
seconds             float64  wall time of the audit (differs between runs; everything
                             else is deterministic for a given manifest and seed)
<flat metrics>      float64  :func:`auditor.gate.metric_names` order: ``spearman``,
                             ``spearman_ci_lo``, ``spearman_ci_hi``, ``spearman_p``,
                             ``pearson_log``, ``kendall``, ``loglog_slope``, then for
                             every requested K (sorted): ``<metric>_<scoring>@K``,
                             ``<metric>_ratio@K``, ``overlap_dot_cosine@K``, ``recall@K``
<plugin metrics>    float64  numeric measures added by plugins, sorted by name
report_json         string   the full JSON report (CLI.md schema_version 1)
==================  =======  ===========================================================

Metrics that were not measured (and every metric of an ``error`` row) are null.

Crash safety
------------
Results are flushed every time audits finish: the whole table is written to a temp
file beside the target and renamed onto it (:func:`auditor.io.atomic_path`), so the
file on disk is always a complete, valid Parquet file (holding the rows finished so
far, sorted by row) and a crash or kill loses at most the rows in flight. The cost is
rewriting every finished row at each flush, O(rows²) bytes over a run (records are
converted to Arrow once; only the write repeats). Rows finishing together are flushed
once, and with reports of tens of kilobytes this stays far below the audits' own cost
for manifests of thousands of models. For huge manifests of quick audits,
:func:`auditor.batch.run_batch`'s ``flush_interval`` (``--flush-interval``) spaces the rewrites, at the price of also
losing the rows finished within the last interval. ``resume=True`` keeps the rows
already ``ok`` (same row index and model) and runs the rest.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from auditor.errors import InputError
from auditor.gate import metric_names
from auditor.io import atomic_path

CONDITION_IDS = ("C1", "C2", "C3", "C4", "C5")
STATUS_OK = "ok"
STATUS_ERROR = "error"
RESULTS_VERSION = 1


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
    ("seconds", pa.float64(), "wall time of the audit in seconds"),
)
_FIXED_TAIL: tuple[tuple[str, pa.DataType, str], ...] = (
    ("report_json", pa.string(), "the full JSON report (CLI.md schema_version 1)"),
)
_FIXED_NAMES = {name for name, _, _ in _FIXED_HEAD + _FIXED_TAIL}


def _field(name: str, dtype: pa.DataType, doc: str) -> pa.Field:
    return pa.field(name, dtype, nullable=True, metadata={"description": doc})


def result_schema(ks: Iterable[int], extra_metrics: Iterable[str] = ()) -> pa.Schema:
    """The results table's schema for cut-offs ``ks`` (and plugin metrics), in column order."""
    cutoffs = sorted({int(k) for k in ks})
    flat = metric_names(cutoffs)
    extras = sorted(set(extra_metrics) - set(flat) - _FIXED_NAMES)
    columns = [_field(*spec) for spec in _FIXED_HEAD]
    columns += [_field(name, pa.float64(), "flat metric (CLI.md)") for name in flat]
    columns += [_field(name, pa.float64(), "plugin measure") for name in extras]
    columns += [_field(*spec) for spec in _FIXED_TAIL]
    return pa.schema(
        columns,
        metadata={"popaudit.batch": json.dumps({"results_version": RESULTS_VERSION, "ks": cutoffs})},
    )


RESULT_SCHEMA = result_schema((10, 100))
"""The results schema for the default cut-offs (10, 100); see :func:`result_schema`."""


# ---------------------------------------------------------------------------- writer


class ResultsWriter:
    """Finished records as one Arrow table, rewritten whole and atomically on each flush.

    New records are converted once and appended (no per-flush conversion of old rows);
    each flush still writes every finished row, the price of an always-valid file.
    """

    def __init__(self, output: Path, ks: Iterable[int], manifest: Path | None = None) -> None:
        self.output = Path(output)
        self.ks = tuple(sorted(set(ks)))
        self.manifest = manifest
        self.status: dict[int, str] = {}
        """Row -> status of every record added."""
        self._table: pa.Table | None = None
        self._pending: list[dict[str, Any]] = []
        self._extras: set[str] = set()
        self.last_flush = -math.inf
        """``time.monotonic()`` at the end of the last flush."""

    def add(self, records: Iterable[dict[str, Any]]) -> None:
        for record in records:
            self.status[int(record["row"])] = record["status"]
            self._pending.append(record)

    def _schema(self) -> pa.Schema:
        schema = result_schema(self.ks, self._extras)
        if self.manifest is None:
            return schema
        meta = dict(schema.metadata or {})
        info = json.loads(meta[b"popaudit.batch"])
        info["manifest"] = str(self.manifest)
        meta[b"popaudit.batch"] = json.dumps(info).encode()
        return schema.with_metadata(meta)

    def table(self) -> pa.Table:
        """Every record added so far, sorted by row (the last record of a row wins)."""
        if self._pending or self._table is None:
            self._extras |= {
                key
                for record in self._pending
                for key, value in record.items()
                if key not in _FIXED_NAMES
                and (value is None or isinstance(value, (int, float)))
                and not isinstance(value, bool)
            }
            schema = self._schema()
            latest = {int(r["row"]): r for r in self._pending}
            new = pa.Table.from_pylist(list(latest.values()), schema=schema)
            old = self._table
            if old is not None:
                if old.schema.names != schema.names:  # a plugin metric appeared: widen
                    old = pa.table(
                        [old[f.name] if f.name in old.column_names else pa.nulls(old.num_rows, f.type) for f in schema],
                        schema=schema,
                    )
                replaced = pa.array(list(latest), pa.int64())
                old = old.filter(pc.invert(pc.is_in(old["row"], value_set=replaced)))
                new = pa.concat_tables([old, new])
            self._table = new.sort_by("row").combine_chunks()
            self._pending = []
        return self._table

    def flush(self) -> pa.Table:
        """Write every finished row to the results file (temp file + atomic rename)."""
        table = self.table()
        with atomic_path(self.output) as tmp:
            pq.write_table(table, tmp, compression="zstd")
        self.last_flush = time.monotonic()
        return table


def read_results(path: Path) -> pa.Table:
    """Read a results file written by :func:`run_batch`; InputError when it is not one."""
    try:
        table = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(f"{path} is not a readable Parquet results file: {exc}") from exc
    missing = [c for c in ("row", "model", "status") if c not in table.column_names]
    if missing:
        raise InputError(f"{path} is not a popaudit batch results file (no {', '.join(missing)} column)")
    return table


# ---------------------------------------------------------------------------- summary


@dataclass(frozen=True)
class SummaryRow:
    """One ok row of the summary: where it sits in the manifest and its bias numbers."""

    row: int
    model: str
    label: str | None
    severity: str | None
    spearman: float | None
    head_share: float | None
    """The summary's head-share ratio metric (dot over cosine), see ``head_share_metric``."""
    rank_value: float | None
    delta_spearman: float | None = None
    """Change from the previous ok row in manifest order (None for the first)."""
    delta_head_share: float | None = None


@dataclass(frozen=True)
class Trend:
    """How one metric moved across the manifest order (ok rows only)."""

    metric: str
    n: int
    first: float | None
    last: float | None
    change: float | None
    min_row: int | None
    max_row: int | None
    kendall_tau: float | None
    """Kendall's tau between manifest order and the metric (needs 3+ values)."""
    p_value: float | None
    direction: str
    """``rising``, ``falling`` (tau's p < 0.05) or ``no clear trend``."""


@dataclass(frozen=True)
class BatchSummary:
    """Models ranked by bias, the manifest-order view, trends and the failed rows."""

    n_rows: int
    n_ok: int
    n_error: int
    rank_by: str
    head_share_metric: str | None
    ranking: list[SummaryRow]
    """Most biased first (descending ``rank_by``; rows without a value last)."""
    order: list[SummaryRow]
    """Manifest order, with changes from the previous row."""
    trends: list[Trend]
    failures: list[tuple[int, str, str]]


def _head_share_metric(table: pa.Table) -> str | None:
    """The head-share ratio at the largest K that has values (``head_share_1pct_ratio@K``)."""
    candidates = []
    for name in table.column_names:
        match = re.fullmatch(r"head_share_1pct_ratio@(\d+)", name)
        if match and table.column(name).null_count < table.num_rows:
            candidates.append((int(match.group(1)), name))
    return max(candidates)[1] if candidates else None


def summarise(table: pa.Table, *, rank_by: str = "spearman") -> BatchSummary:
    """Rank the ok rows of a results table by ``rank_by`` and follow metrics across rows."""
    from scipy import stats

    if rank_by not in table.column_names:
        numeric = [f.name for f in table.schema if pa.types.is_floating(f.type)]
        raise InputError(f"cannot rank by {rank_by!r}: not a results column; numeric columns: {', '.join(numeric)}")
    head = _head_share_metric(table)
    # The reports (tens of KB a row) are never read here: leave them in Arrow.
    if "report_json" in table.column_names and rank_by != "report_json":
        table = table.drop_columns(["report_json"])
    records = sorted(table.to_pylist(), key=lambda r: r["row"])
    ok = [r for r in records if r["status"] == STATUS_OK]
    order: list[SummaryRow] = []
    previous: dict[str, Any] | None = None
    for r in ok:
        spearman, share = r.get("spearman"), r.get(head) if head else None
        order.append(
            SummaryRow(
                row=r["row"],
                model=r["model"],
                label=r.get("label"),
                severity=r.get("verdict_severity"),
                spearman=spearman,
                head_share=share,
                rank_value=r.get(rank_by),
                delta_spearman=_delta(spearman, previous.get("spearman") if previous else None),
                delta_head_share=_delta(share, previous.get(head) if previous and head else None),
            )
        )
        previous = r
    ranking = sorted(order, key=lambda s: (s.rank_value is None, -(s.rank_value or 0.0), s.row))
    trends = []
    for metric in dict.fromkeys(m for m in ("spearman", head, rank_by) if m):
        points = [(r["row"], r[metric]) for r in ok if r.get(metric) is not None]
        trends.append(_trend(metric, points, stats))
    failures = [(r["row"], r["model"], r["error"] or "") for r in records if r["status"] == STATUS_ERROR]
    return BatchSummary(
        n_rows=len(records),
        n_ok=len(ok),
        n_error=len(failures),
        rank_by=rank_by,
        head_share_metric=head,
        ranking=ranking,
        order=order,
        trends=trends,
        failures=failures,
    )


def _delta(value: float | None, before: float | None) -> float | None:
    return None if value is None or before is None else value - before


def _trend(metric: str, points: list[tuple[int, float]], stats: Any) -> Trend:
    if not points:
        return Trend(metric, 0, None, None, None, None, None, None, None, "no clear trend")
    rows = np.array([p[0] for p in points], dtype=np.float64)
    values = np.array([p[1] for p in points], dtype=np.float64)
    tau = p = None
    direction = "no clear trend"
    if len(points) >= 3 and np.ptp(values) > 0:
        test = stats.kendalltau(rows, values)
        tau, p = float(test.statistic), float(test.pvalue)
        if p < 0.05:
            direction = "rising" if tau > 0 else "falling"
    return Trend(
        metric=metric,
        n=len(points),
        first=float(values[0]),
        last=float(values[-1]),
        change=float(values[-1] - values[0]),
        min_row=int(rows[int(np.argmin(values))]),
        max_row=int(rows[int(np.argmax(values))]),
        kendall_tau=tau,
        p_value=p,
        direction=direction,
    )


def summary_figure(summary: BatchSummary) -> Any:
    """Spearman and the head-share ratio across manifest rows (matplotlib Agg figure)."""
    from matplotlib.ticker import MaxNLocator

    from auditor.report.plots import new_figure

    fig = new_figure(7.5, 4.4)
    ax = fig.add_subplot(1, 1, 1)
    ax.grid(True, color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    rows = [s.row for s in summary.order]
    spearman = [np.nan if s.spearman is None else s.spearman for s in summary.order]
    ax.plot(rows, spearman, marker="o", color="#D55E00", label="Spearman ρ (norm vs frequency)")
    ax.set_xlabel("manifest row")
    ax.set_ylabel("Spearman ρ")
    ax.axhline(0.0, color="#999999", linewidth=0.8)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if summary.head_share_metric:
        twin = ax.twinx()
        share = [np.nan if s.head_share is None else s.head_share for s in summary.order]
        twin.plot(rows, share, marker="s", linestyle="--", color="#0072B2", label=summary.head_share_metric)
        twin.set_ylabel(f"{summary.head_share_metric} (dot / cosine)")
    # Below the axes, so it never hides a point.
    fig.legend(loc="outside lower center", ncols=2, fontsize="small", frameon=False)
    ax.set_title("Bias across the manifest order")
    return fig


def summary_html(summary: BatchSummary, *, title: str = "popaudit batch summary") -> str:
    """A self-contained HTML summary: counts, ranking, manifest-order plot and table, failures.

    Built from the HTML report's pieces (``auditor.report.html``), so it shares its styles.
    """
    from auditor.report import html as h
    from auditor.report.content import Table, fmt_num, fmt_ratio
    from auditor.report.plots import figure_png

    share = summary.head_share_metric or "head share ratio"
    ranking = Table(
        headers=("rank", "row", "model", "label", "severity", "spearman", share),
        rows=tuple(
            (str(i), str(s.row), s.model, s.label or "", s.severity or "n/a", fmt_num(s.spearman), fmt_ratio(s.head_share))
            for i, s in enumerate(summary.ranking, 1)
        ),
        numeric=(True, True, False, False, False, True, True),
        caption=f"Ranked by {summary.rank_by}, most biased first.",
    )
    trends = Table(
        headers=("metric", "first", "last", "change", "Kendall τ vs order", "p", "trend"),
        rows=tuple(
            (t.metric, fmt_num(t.first), fmt_num(t.last), fmt_num(t.change), fmt_num(t.kendall_tau),
             fmt_num(t.p_value), t.direction)
            for t in summary.trends
        ),
        numeric=(False, True, True, True, True, True, False),
    )
    order = Table(
        headers=("row", "model", "label", "spearman", "Δ spearman", share, "Δ"),
        rows=tuple(
            (str(s.row), s.model, s.label or "", fmt_num(s.spearman), fmt_num(s.delta_spearman),
             fmt_ratio(s.head_share), fmt_num(s.delta_head_share))
            for s in summary.order
        ),
        numeric=(True, False, False, True, True, True, True),
        caption="Changes are from the previous audited row.",
    )
    moves = h.table_html(trends)
    if summary.order:
        figure = h.figure_html(
            png=figure_png(summary_figure(summary)),
            alt=f"Spearman rho and {share} for each manifest row, in manifest order",
        )
        moves = figure + moves
    sections = [
        h.Section("ranking", "Models ranked by bias", h.table_html(ranking, wrap_columns=(2,))),
        h.Section("order", "Across the manifest order", moves + h.table_html(order, wrap_columns=(1,))),
    ]
    if summary.failures:
        failed = Table(
            headers=("row", "model", "error"),
            rows=tuple((str(r), m, e) for r, m, e in summary.failures),
            numeric=(True, False, False),
        )
        sections.append(h.Section("failures", "Failed rows", h.table_html(failed, wrap_columns=(1, 2))))
    lead = h.paragraph(f"{summary.n_rows} rows: {summary.n_ok} audited, {summary.n_error} failed.")
    return h.page(title, sections, lead=lead)
