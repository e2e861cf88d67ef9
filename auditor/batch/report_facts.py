"""What the batch summary (:mod:`auditor.batch.summary`) reads from each row's JSON report,
one row at a time in row order (the reports are tens of kilobytes each: never all decoded at
once): the row's recommended scoring, the Ks it quotes and its settings (:class:`_ReportFacts`),
the origin of each followed column, and, per column, why ``popaudit diff`` would not compare a
row's figure with the previous row's (:data:`Apart`, diff's one rule)."""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any, NamedTuple

import pyarrow as pa

from auditor.diff.comparability import comparability_notes, comparability_view
from auditor.diff.compare import figures_apart
from auditor.diff.notes import Note
from auditor.errors import ReportError
from auditor.flat import FlatEntry, gateable_entries
from auditor.report_reader import report_as_read
from auditor.protocol import report_population
from auditor.report.batch_rows import PairNote

class _ReportFacts(NamedTuple):
    """What the summary reads from one row's JSON report."""

    recommended: str | None
    recommended_k: int | None
    """The K the trade-off recommended at (``accuracy.quoted_k``)."""
    quoted_k: int | None
    """The K the verdict quotes (``verdict.quoted_k``)."""
    population: dict[str, Any]
    """The report's ``retrieval.population`` (:func:`auditor.protocol.report_population`)."""
    retrieval_index: str | None = None
    """The report's ``retrieval.index`` (``exact``, ``ivf``, ``hnsw``; None: no retrieval)."""
    recall: dict[str, Any] | None = None
    """The report's ``retrieval.recall`` of an approximate index, by K (``"10"``)."""
    popularity: str | None = None
    """The report's ``retrieval.popularity`` (``interactions`` or ``users``)."""
    saturated: frozenset[int] = frozenset()
    """The Ks the report's ``retrieval.saturated`` marks: the harm is not measured there
    (docs/measures.md, "A K that holds every candidate"), so the summary quotes no ratio there."""
    notes_base: int | None = None
    """The earlier row :attr:`notes` compare this row with (the previous row with a report)."""
    notes: tuple[Note, ...] = ()
    """Diff's notes between that row's report and this one's (another training log, other
    cut-offs, ...: differences that leave the figures comparable)."""


_NO_FACTS = _ReportFacts(None, None, None, {})
SHOWN_SETTINGS = ("inputs.model",)
"""Settings each row of the summary names itself: diff's notes on them are not repeated."""


def stated_notes(notes: tuple[Note, ...], stated: dict[str, FlatEntry | None]) -> tuple[PairNote, ...]:
    """The notes the row-by-row caption repeats for a row pair (QA12 scale N4): those that bear
    on a change the row states (``stated``: each column whose change it states, Spearman's rho
    or the head-share ratio, and its origin), each with those columns; not a setting each row
    names itself (:data:`SHOWN_SETTINGS`). The others (other cut-offs, a section only one
    report measured, accuracy, a setting of a change not stated) touch no change shown."""
    named = tuple(f"{setting} differs" for setting in SHOWN_SETTINGS)
    kept = ((n, tuple(c for c, e in stated.items() if e is not None and n.concerns(e))) for n in notes
            if n.subject not in named)
    return tuple(PairNote(n.subject, n.values, n.effect, changes) for n, changes in kept if changes)


Entries = dict[str, FlatEntry | None]
"""The origin of each followed column (None: no flat name, e.g. ``seconds``)."""
Apart = dict[str, dict[int, tuple[str, ...]]]
"""Column -> row -> why diff would not compare the row's figure with that of the previous
row with a value in the column, each of diff's reasons apart (rows it compares are absent)."""


def _report_facts(table: pa.Table, followed: Collection[str]) -> tuple[dict[int, _ReportFacts], Entries, Apart]:
    """Each row's recommended scoring, the Ks its report quotes and its settings, read from
    its JSON report one row at a time in row order (the reports are tens of kilobytes each:
    never all decoded at once); the origin of each ``followed`` column (:class:`FlatEntry`),
    read from the first report that has a value for it; and, per column, why diff would not
    compare a row's figure with the previous row's that has one (:data:`Apart`: only the
    last such row's :func:`comparability_view` is kept per column); each row's facts carry
    diff's notes against the previous row with a report (:attr:`_ReportFacts.notes`)."""
    if "report_json" not in table.column_names or "row" not in table.column_names:
        return {}, {}, {}
    out: dict[int, _ReportFacts] = {}
    entries: Entries = {}
    apart: Apart = {}
    last: dict[str, dict[str, Any]] = {}
    previous: tuple[int, dict[str, Any]] | None = None  # the last row with a report, and its view
    rows, reports = table.column("row"), table.column("report_json")
    for i in sorted(range(table.num_rows), key=lambda at: rows[at].as_py()):
        row, report = int(rows[i].as_py()), _read_report(reports[i].as_py())
        valued = [m for m in followed if m in table.column_names and table.column(m)[i].is_valid]
        _add_entries(entries, report, [m for m in valued if m not in entries])
        view = _view(report)
        compared: dict[int, Any] = {}  # one comparison per earlier row (most columns share it)
        for metric in valued if view else ():
            entry, before = entries.get(metric), last.get(metric)
            if entry is not None and before is not None:
                apart_from = compared.setdefault(id(before), figures_apart(before, view))
                if why := apart_from(entry):
                    apart.setdefault(metric, {})[row] = why
            last[metric] = view
        out[row] = _row_facts(report)
        if view and previous is not None:
            out[row] = out[row]._replace(notes_base=previous[0], notes=comparability_notes(previous[1], view))
        previous = (row, view) if view else previous
    return out, entries, apart


def _read_report(text: Any) -> dict[str, Any]:
    try:
        report = json.loads(text) if isinstance(text, str) and text else None
    except ValueError:
        report = None
    return report if isinstance(report, dict) else {}


def _view(report: dict[str, Any]) -> dict[str, Any]:
    """The report's :func:`comparability_view` ({} for one that does not read as a report)."""
    try:
        return comparability_view(report_as_read(report)) if report else {}
    except ReportError:
        return {}


def _row_facts(report: dict[str, Any]) -> _ReportFacts:
    accuracy, verdict, retrieval = (part if isinstance(part := report.get(name), dict) else {}
                                    for name in ("accuracy", "verdict", "retrieval"))
    chosen = accuracy.get("recommended")
    index, popularity, recall = retrieval.get("index"), retrieval.get("popularity"), retrieval.get("recall")
    return _ReportFacts(
        chosen if isinstance(chosen, str) else None,
        _int_or_none(accuracy.get("quoted_k")) if isinstance(chosen, str) else None,
        _int_or_none(verdict.get("quoted_k")),
        report_population(report),
        index if isinstance(index, str) else None,
        recall if isinstance(recall, dict) else None,
        popularity if isinstance(popularity, str) else None,
        _saturated_ks(retrieval.get("saturated")),
    )


def _saturated_ks(flags: Any) -> frozenset[int]:
    """The Ks a report's ``retrieval.saturated`` ({"5": true, ...}) marks saturated."""
    items = flags.items() if isinstance(flags, dict) else ()
    return frozenset(int(k) for k, on in items if on is True and isinstance(k, str) and k.isdigit())


def _recall_at(recall: dict[str, Any] | None, k: int | None) -> float | None:
    """An approximate index's recall at ``k`` (None: exact search, or not measured there)."""
    value = (recall or {}).get(str(k)) if k is not None else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _add_entries(entries: dict[str, FlatEntry | None], report: dict[str, Any], missing: list[str]) -> None:
    """The origins of the ``missing`` columns, which this row's report has values for; None
    for a column that is no flat name of it (``seconds``, ``n_items``), which is not looked
    for again (a report that does not read as popaudit writes one tells nothing)."""
    if not missing or not report:
        return
    try:
        found = gateable_entries(report)
    except ReportError:
        return
    entries.update({name: found.get(name) for name in missing})


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
