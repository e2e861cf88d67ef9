"""A ``popaudit batch`` results table summarised: models ranked by bias, how the metrics
move across the manifest order (Kendall's τ against the row order), and the failed rows.

A figure changes comparably between two rows exactly where ``popaudit diff`` would compare
it between their reports: diff's one rule (:func:`auditor.diff.compare.figures_apart` on each
row's :func:`~auditor.diff.comparability.comparability_view`), which flags the figures of
the model's lists of rows measured under another population, index (exact vs IVF/HNSW) or
popularity definition, head shares whose top-p% head holds another number of items, and
the verdicts' grades diff does not compare. A change or trend across such rows is not
comparable, with diff's reason, and the summary says which rows differ.

:func:`summarise` reads a results table (the schema of :mod:`auditor.batch.results`) into
the report's :class:`~auditor.report.batch_rows.BatchSummary`, which
:func:`~auditor.report.batch_summary.batch_document` renders. The trend test is
:func:`auditor.metrics.correlations.kendall_tau_test` (scipy's values without importing
scipy.stats, which alone took 2 s of a batch's start).
"""

from __future__ import annotations

import math
import json
import re
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from auditor.batch.rank_by import RankSense, did_you_mean, rank_sense
from auditor.errors import InputError
from auditor.harm import served_ks
from auditor.metrics.correlations import kendall_tau_test
from auditor.batch.report_facts import _NO_FACTS, Apart, Entries, _recall_at, _report_facts, _ReportFacts, stated_notes
from auditor.protocol import POPULATION, POPULATION_KEYS
from auditor.report.batch_rows import BatchSummary, SummaryRow, Trend
from auditor.result import SEVERITIES
from auditor.summaries import STATUS_ERROR, STATUS_OK


_HEAD_RATIO = re.compile(r"head_share_1pct_ratio@(\d+)")


def _head_ratio_ks(table: pa.Table, ok: list[dict[str, Any]]) -> tuple[int | None, dict[int, int]]:
    """The K of the summary's K-dependent columns (head-share ratio, NDCG, recall): the
    largest K at which every ok row that measured a head-share ratio has one and that the
    verdict would quote for each of them (K at most 10% of its catalogue,
    :data:`~auditor.harm.SERVED_SHARE`: a larger K covers much of a small catalogue and shows
    no skew beside a severity graded at a smaller K), else the smallest shared K (None when
    those rows share no K); and each such row's own K by the same rule (used when there is
    no shared K: the verdict's quoted K where the row has a ratio there, else this one)."""
    ks = sorted((int(m.group(1)) for name in table.column_names if (m := _HEAD_RATIO.fullmatch(name))), reverse=True)
    measured = {r["row"]: [k for k in ks if r.get(f"head_share_1pct_ratio@{k}") is not None] for r in ok}
    measured = {row: found for row, found in measured.items() if found}
    served = {r["row"]: _served(measured[r["row"]], r.get("n_items")) for r in ok if r["row"] in measured}
    shared = [k for k in ks if measured and all(k in found for found in measured.values())]
    quoted = [k for k in shared if all(k in found for found in served.values())]
    return (quoted[0] if quoted else shared[-1] if shared else None), {row: found[0] for row, found in served.items()}


def _served(found: list[int], n_items: Any) -> list[int]:
    """The Ks of ``found`` (largest first) the verdict would quote for a catalogue of
    ``n_items``: at most 10% of it, else the smallest (every K when the size is unknown)."""
    return served_ks(found, n_items if isinstance(n_items, int) else None)[::-1]


def summarise(table: pa.Table, *, rank_by: str = "spearman", checked: bool = False) -> BatchSummary:
    """Rank the ok rows of a results table by ``rank_by`` and follow metrics across rows.

    ``checked``: ``rank_by`` is a name of the run (:func:`auditor.batch.rank_by.rank_by_problem`),
    so a column the table lacks is one no row measured (a plugin's measure when every row
    failed): the rows rank without a value. Otherwise a missing column is an InputError."""
    if checked and rank_by not in table.column_names:
        table = table.append_column(pa.field(rank_by, pa.float64()), pa.nulls(table.num_rows, pa.float64()))
    if rank_by not in table.column_names:  # popaudit batch refuses it before auditing (auditor/batch/rank_by.py)
        numeric = [f.name for f in table.schema if pa.types.is_floating(f.type) or pa.types.is_integer(f.type)]
        raise InputError(f"cannot rank by {rank_by!r}: not a results column{did_you_mean(rank_by, numeric)}; the "
                         f"table has {len(numeric)} numeric columns")
    facts, entries, apart_from = _report_facts(table, _followed(table, rank_by))
    # The reports (tens of KB a row) are read above one at a time: leave them in Arrow.
    if "report_json" in table.column_names and rank_by != "report_json":
        table = table.drop_columns(["report_json"])
    records = sorted(table.to_pylist(), key=lambda r: r["row"])
    ok = [r for r in records if r["status"] == STATUS_OK]
    for r in ok:  # a saturated K's ratio measures no harm: no K choice, cell, change or trend uses it
        r.update({f"head_share_1pct_ratio@{k}": None for k in facts.get(r["row"], _NO_FACTS).saturated})
    shared_k, own_k = _head_ratio_ks(table, ok)
    order = _order(ok, rank_by, shared_k, own_k, facts, apart_from, entries)
    sense = rank_sense(rank_by)
    head = None if shared_k is None else f"head_share_1pct_ratio@{shared_k}"
    trends, reasons = [], []
    for metric in dict.fromkeys(m for m in ("spearman", head, rank_by) if m):
        points = [(r["row"], r[metric]) for r in ok if r.get(metric) is not None]
        why = [apart_from.get(metric, {}).get(row, ()) for row, _ in points]
        trends.append(_trend(metric, points, _merged(why)))
        reasons += why
    failures = [(r["row"], r["model"], r["error"] or "") for r in records if r["status"] == STATUS_ERROR]
    return BatchSummary(
        n_rows=len(records),
        n_ok=len(ok),
        n_error=len(failures),
        rank_by=rank_by,
        head_share_metric=head,
        ranking=sorted(order, key=lambda row: ranking_key(row, sense)),
        rank_order=sense.words,
        order=order,
        trends=trends,
        failures=failures,
        per_row_k=shared_k is None and (bool(own_k) or len({r.k for r in order if r.k is not None}) > 1),
        protocols=_protocols(ok, facts),
        trends_apart=_merged(reasons),  # each setting once for the whole table, whichever trends it parts
    )


def _order(ok: list[dict[str, Any]], rank_by: str, shared_k: int | None, own_k: dict[int, int],
           facts: dict[int, _ReportFacts], apart_from: Apart, entries: Entries) -> list[SummaryRow]:
    """The ok rows in manifest order, each with its figures at the summary's K (the shared
    one, else its own), the changes from the previous row (:func:`_change`; the head
    share's at the same K only) and diff's notes on the pair (those on a stated change
    repeated in the caption: :func:`~auditor.batch.report_facts.stated_notes`)."""
    order: list[SummaryRow] = []
    for r in ok:
        fact = facts.get(r["row"], _NO_FACTS)
        k = shared_k if shared_k is not None else _own_k(r, own_k.get(r["row"]), fact.quoted_k)
        if k is None and fact.saturated:  # every K the row measured is saturated: say so at the smallest
            k = min(fact.saturated)
        k = _accuracy_k(r, fact) if k is None else k
        share = r.get(f"head_share_1pct_ratio@{k}") if k is not None else None
        before = order[-1] if order else None
        spearman = _change(apart_from, "spearman", r["row"], r.get("spearman"), before.spearman if before else None)
        head = _change(apart_from, f"head_share_1pct_ratio@{k}", r["row"], share,
                       before.head_share if before is not None and before.k == k else None)
        notes = fact.notes if before is not None and fact.notes_base == before.row else ()
        changes = (("spearman", spearman), (f"head_share_1pct_ratio@{k}", head))
        stated = {name: entries.get(name) for name, change in changes if change.delta is not None}
        order.append(SummaryRow(
            row=r["row"], model=r["model"], label=r.get("label"), severity=r.get("verdict_severity"),
            spearman=r.get("spearman"), head_share=share, rank_value=r.get(rank_by),
            delta_spearman=spearman.delta, spearman_apart=_said(spearman.apart),
            delta_head_share=head.delta, pair_apart=_said(tuple(dict.fromkeys(head.apart + spearman.apart))),
            pair_notes=tuple(n.text for n in notes), caption_notes=stated_notes(notes, stated),
            ndcg=r.get(f"ndcg_dot@{k}") if k is not None else None,
            recall=r.get(f"recall_dot@{k}") if k is not None else None,
            recommended=fact.recommended, k=k, recommended_k=fact.recommended_k,
            seen_items=fact.population.get("seen_items"), query_source=fact.population.get("source"),
            head_share_apart=_said(head.apart), index=fact.retrieval_index, index_recall=_recall_at(fact.recall, k),
            head_share_saturated=k in fact.saturated,
        ))  # fmt: skip
    return order


def _followed(table: pa.Table, rank_by: str) -> list[str]:
    """The columns whose changes the summary states: Spearman's rho, the head-share ratios, ``rank_by``."""
    heads = [name for name in table.column_names if _HEAD_RATIO.fullmatch(name)]
    return list(dict.fromkeys(["spearman", *heads, rank_by]))


_DIFFERS = re.compile(r"(?P<setting>[\w.]+) differs \((?P<base>.+) vs (?P<new>.+)\)")


def _merged(reasons: list[tuple[str, ...]]) -> str | None:
    """Diff's reasons for consecutive rows (each pair's, one item each: never re-split, since
    a quoted definition may hold "; "), said once for the whole run as diff's setting lines
    word them: each setting with every value in order of appearance
    (``retrieval.index differs ("exact" vs "ivf")``, not again "ivf" vs "exact")."""
    values: dict[str, list[str]] = {}
    for reason in (part for pair in reasons for part in pair):
        match = _DIFFERS.fullmatch(reason)
        key, said = (match["setting"], [match["base"], match["new"]]) if match else (reason, [])
        values.setdefault(key, [])
        values[key] += [v for v in said if v not in values[key]]
    return "; ".join(f"{key} differs ({' vs '.join(said)})" if said else key for key, said in values.items()) or None


def _settings(fact: _ReportFacts) -> dict[str, Any]:
    """The settings of a row the summary names where rows differ (diff's setting names)."""
    return {"retrieval.index": fact.retrieval_index, "retrieval.popularity": fact.popularity,
            **{f"{POPULATION}.{key}": fact.population.get(key) for key in POPULATION_KEYS}}


def _protocols(ok: list[dict[str, Any]], facts: dict[int, _ReportFacts]) -> str | None:
    """Which ok rows were measured how, where they differ: e.g. ``retrieval.index "exact":
    rows 0, 2; "ivf": row 1``; None when every row that records a setting agrees."""
    settings = {r["row"]: _settings(facts.get(r["row"], _NO_FACTS)) for r in ok}
    parts = []
    for key in _settings(_NO_FACTS):
        rows: dict[Any, list[int]] = {}
        for row, setting in settings.items():
            if setting.get(key) is not None:
                rows.setdefault(setting[key], []).append(row)
        if len(rows) > 1:
            said = "; ".join(f"{json.dumps(value, default=str)}: row{'s' if len(at) > 1 else ''} "
                             f"{', '.join(map(str, at))}" for value, at in rows.items())
            parts.append(f"{key} {said}")
    return ". ".join(parts) or None


def _own_k(record: dict[str, Any], largest: int | None, quoted: int | None) -> int | None:
    """A row's K where rows share none: the verdict's quoted K when the row has a
    head-share ratio there, else the largest K it has one at."""
    if quoted is not None and record.get(f"head_share_1pct_ratio@{quoted}") is not None:
        return quoted
    return largest


def _accuracy_k(record: dict[str, Any], fact: _ReportFacts) -> int | None:
    """A row's K where no head-share ratio sets one (dot and cosine both 0 at every K): its
    NDCG and recall still show, at the verdict's quoted K, else the trade-off's, else the
    smallest K with a measured ``ndcg_dot@K`` (None: no holdout)."""
    measured = sorted(int(name.rsplit("@", 1)[1]) for name, value in record.items()
                      if name.startswith("ndcg_dot@") and value is not None and name.rsplit("@", 1)[1].isdigit())
    return next((k for k in (fact.quoted_k, fact.recommended_k) if k in measured), measured[0] if measured else None)


def ranking_key(row: SummaryRow, sense: RankSense) -> tuple[bool, float, int, bool, float, int]:
    """The ranking rule (docs/report.md, "Batch summary"): most biased first by the
    ``rank_by`` column, in the direction ``sense`` reads it; ties (equal values, e.g. a
    model and its rescaled copy, whose Spearman's rho rescaling cannot move) by severity,
    most harmful first, then by the head-share ratio, descending; then by manifest row.
    Rows without a value come after every row with one, at each step."""
    severity = SEVERITIES.index(row.severity) if row.severity in SEVERITIES else -1
    value = 0.0 if row.rank_value is None else sense.key(row.rank_value)
    return (row.rank_value is None, value, -severity, row.head_share is None, -(row.head_share or 0.0), row.row)


class _Change(NamedTuple):
    delta: float | None
    apart: tuple[str, ...] = ()
    """Diff's reasons (one item each) where it would not compare the two rows' figures."""


def _change(apart_from: Apart, metric: str, row: int, value: float | None, before: float | None) -> _Change:
    """A figure's change from the previous row's (``before``), for every change the summary
    states: where diff compares the two rows' figures of ``metric`` (:data:`Apart`, the rule
    the trends follow), ``value - before``; else no change and diff's reasons (Spearman's rho
    too: another item id mapping reads the same model another way). None where either is missing."""
    if value is None or before is None:
        return _Change(None)
    why = apart_from.get(metric, {}).get(row, ())
    return _Change(None, why) if why else _Change(_delta(value, before))


def _said(reasons: tuple[str, ...]) -> str | None:
    return "; ".join(reasons) or None


def _delta(value: float | None, before: float | None) -> float | None:
    """``value - before``; None where either is missing or infinite (a ratio's +inf)."""
    if value is None or before is None or not (math.isfinite(value) and math.isfinite(before)):
        return None
    return value - before


def _trend(metric: str, points: list[tuple[int, float]], apart: str | None = None) -> Trend:
    """How ``metric`` moved along the rows; with ``apart`` (why the rows' figures are not
    comparable) its first and last values and extremes, and no change, τ or direction."""
    if not points:
        return Trend(metric, 0, None, None, None, None, None, None, None, "no clear trend")
    rows = np.array([p[0] for p in points], dtype=np.float64)
    values = np.array([p[1] for p in points], dtype=np.float64)
    tau = p = None
    direction = "not comparable" if apart else "no clear trend"
    if not apart and len(points) >= 3 and len(np.unique(values)) > 1:  # not np.ptp: a ratio of +inf minus +inf is NaN
        test = kendall_tau_test(rows, values)
        tau, p = float(test.statistic), float(test.pvalue)
        if p < 0.05:
            direction = "rising" if tau > 0 else "falling"
    return Trend(
        metric=metric,
        n=len(points),
        first=float(values[0]),
        last=float(values[-1]),
        change=float(values[-1] - values[0]) if not apart and np.isfinite(values[[0, -1]]).all() else None,
        min_row=int(rows[int(np.argmin(values))]),
        max_row=int(rows[int(np.argmax(values))]),
        kendall_tau=tau,
        p_value=p,
        direction=direction,
        apart=apart,
    )
