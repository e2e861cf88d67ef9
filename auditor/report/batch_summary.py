"""Summaries of a ``popaudit batch`` results table, as reports: models ranked by bias, how
the metrics move across the manifest order, and the failed rows.

A :class:`~auditor.report.batch_rows.BatchSummary` (made from a results table by :func:`auditor.batch.summary.summarise`)
becomes a report document with :func:`batch_document`, which every format renders
(:func:`summary_console` and :func:`summary_html` are its terminal view and its HTML
page), with :func:`summary_figure`, the trend plot. Nothing here prints or writes files:
the CLI decides where output goes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from auditor.report.batch_rows import BatchSummary, SummaryRow
from auditor.report.document import Block, Document, Figure, Paragraph, Section, Table
from auditor.errors import setting
from auditor.protocol import UNKNOWN
from auditor.report.formatting import fmt_num, fmt_ratio
from auditor.result import json_safe

if TYPE_CHECKING:
    from rich.console import RenderableType

MAX_ORDER_ROWS = 40
"""The console lists every row in manifest order up to this many (the HTML always does);
past it, it says where the full table is (:func:`_order_cut`)."""
MAX_TICK_LABELS = 30
"""The trend plot names at most this many models on its x-axis (every n-th beyond)."""


@dataclass(frozen=True)
class _Columns:
    """The K-dependent columns' headers, and their cells' K where rows differ."""

    share: str
    ndcg: str
    recall: str
    recommended: str
    k_in_cells: bool
    recommended_k_in_cells: bool

    def figure(self, text: str, row: SummaryRow) -> str:
        """A head-share, NDCG or recall cell, with its K when rows differ."""
        return f"{text} @{row.k}" if self.k_in_cells and row.k is not None and text != "n/a" else text

    def scoring(self, row: SummaryRow) -> str:
        """The recommended scoring's cell, with its K when rows differ."""
        if row.recommended is None:
            return "—"
        at = row.recommended_k is not None and self.recommended_k_in_cells
        return f"{row.recommended} @{row.recommended_k}" if at else row.recommended


def _columns(summary: BatchSummary) -> _Columns:
    """Headers that say which K each column is at: ``head_share_1pct_ratio@K``,
    ``NDCG@K dot``, ``recommended @K`` when every row shares the K; otherwise "(row's K)"
    in the header and the K in each cell."""
    rows = summary.order
    k = None if summary.per_row_k else next((r.k for r in rows if r.k is not None), None)
    at = f"@{k}" if k is not None else ("" if summary.per_row_k else "@K")
    share = summary.head_share_metric or ("head_share_1pct_ratio (row's K)" if summary.per_row_k else f"head_share_1pct_ratio{at}")
    suffix = " (row's K)" if summary.per_row_k else ""
    chosen = {r.recommended_k for r in rows if r.recommended is not None}
    one = next(iter(chosen)) if len(chosen) == 1 else None
    recommended = f"recommended @{one}" if one is not None else "recommended"
    return _Columns(share, f"NDCG{at} dot{suffix}", f"recall{at} dot{suffix}", recommended, summary.per_row_k,
                    len(chosen) > 1)


def model_tick(row: SummaryRow, width: int = 24) -> str:
    """A model's name on the trend plot's x-axis: its label, else its file name (cut to ``width``)."""
    name = row.label or Path(row.model).name or row.model or f"row {row.row}"
    return name if len(name) <= width else name[: width - 1] + "…"


def summary_figure(summary: BatchSummary) -> Any:
    """Spearman and the head-share ratio across manifest rows (matplotlib Agg figure): the
    head-share line is broken between rows the row-by-row table states no change for
    (:mod:`auditor.report.batch_figure`)."""
    from auditor.report.batch_figure import OrderSeries, order_figure

    order = summary.order
    step = max(1, -(-len(order) // MAX_TICK_LABELS))  # every model named while the names fit, else every n-th
    return order_figure(OrderSeries(
        ticks=[model_tick(s) for s in order], tick_step=step, spearman=[s.spearman for s in order],
        share_metric=summary.head_share_metric, share=[s.head_share for s in order],
        apart=[s.head_share_apart is not None for s in order], approximate=[s.approximate for s in order],
        spearman_apart=[s.spearman_apart is not None for s in order],
    ))  # fmt: skip


def batch_document(
    summary: BatchSummary, *, title: str = "popaudit batch summary", n_resumed: int = 0, output: Path | None = None,
    html: Path | None = None,
) -> Document:
    """The summary as a report document: counts, the ranking, the manifest-order figure
    and tables, the failed rows; its brief (the terminal's view) says how many rows were
    kept from an earlier run (``n_resumed``), where the results are (``output``) and, past
    :data:`MAX_ORDER_ROWS` rows, where the full row-by-row table is (``html``: the HTML page)."""
    share = _columns(summary).share
    plotted = f"Spearman rho and {share}" if summary.head_share_metric else "Spearman rho"
    order: list[Block] = []
    if summary.order:
        from auditor.report.batch_figure import figure_caption

        hollow = [str(s.row) for s in summary.order if s.approximate and s.head_share is not None]
        caption = figure_caption(plotted, summary.head_share_metric, _apart_pairs(summary, _share_reason), hollow,
                                 _apart_pairs(summary, _spearman_reason))
        order.append(Figure(
            "batch_trend", "order", "Bias across the manifest order", caption,
            lambda: summary_figure(summary),
        ))  # fmt: skip
    order += [_trends_table(summary, "Kendall τ vs order"), _order_table(summary, share)]
    sections = [
        Section("ranking", "Models ranked by bias", (_ranking_table(summary, share),)),
        Section("order", "Across the manifest order", tuple(order)),
    ]
    if summary.failures:
        failed = Table(("row", "model", "error"), tuple((str(r), m, e) for r, m, e in summary.failures),
                       (True, False, False), wrap=(1, 2))
        sections.append(Section("failures", "Failed rows", (failed,)))
    lead = Paragraph(f"{summary.n_rows} rows: {summary.n_ok} audited, {summary.n_error} failed.")
    return Document(
        kind="batch", title=title, lead=(lead, *_protocol_note(summary)), sections=tuple(sections),
        brief=_brief(summary, share, n_resumed, output, html), payload=lambda: json_safe(asdict(summary)),
    )  # fmt: skip


def _ranked_column(summary: BatchSummary) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """The ``rank_by`` column's header and cells, in ranking order, where the table does
    not show it already (spearman and the head-share ratio have their own columns)."""
    if summary.rank_by in ("spearman", summary.head_share_metric):
        return (), [() for _ in summary.ranking]
    shown = fmt_ratio if "_ratio@" in summary.rank_by else fmt_num
    return (summary.rank_by,), [(shown(s.rank_value),) for s in summary.ranking]


def _index_column(summary: BatchSummary) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """The ranking's ``index`` column, where a ranked row's lists were retrieved by an
    approximate index (its figures of the model's lists are that index's, recall shown);
    none where every row searched exactly."""
    if not any(s.approximate for s in summary.ranking):
        return (), [() for _ in summary.ranking]
    return ("index",), [(_index_cell(s),) for s in summary.ranking]


def _index_cell(row: SummaryRow) -> str:
    if not row.approximate:
        return row.index or ""
    recall = "" if row.index_recall is None else f", recall {fmt_num(row.index_recall)}"
    return f"{row.index} (approximate{recall})"


def _approximate_note(summary: BatchSummary) -> str:
    rows = [str(s.row) for s in summary.order if s.approximate]
    return (f" Approximate index (row{'s' if len(rows) > 1 else ''} {', '.join(rows)}): its figures of the model's "
            "lists are the index's, which misses candidates (its recall), not only the model's.") if rows else ""


def _ranking_table(summary: BatchSummary, share: str) -> Table:
    cols = _columns(summary)
    ranked, values = _ranked_column(summary)
    index, indexes = _index_column(summary)
    rows = tuple(
        (str(i), str(s.row), s.model, s.label or "", *how, s.severity or "n/a", *value, fmt_num(s.spearman),
         cols.figure(_share_cell(s), s), cols.figure(fmt_num(s.ndcg), s), cols.figure(fmt_num(s.recall), s),
         cols.scoring(s))
        for i, (s, value, how) in enumerate(zip(summary.ranking, values, indexes), 1)
    )
    where = ("each row's figures at its own K (the verdict's quoted K; the rows share no K)" if summary.per_row_k
             else "every row's figures at the same K")
    return Table(("rank", "row", "model", "label", *index, "severity", *ranked, "spearman", cols.share, cols.ndcg,
                  cols.recall, cols.recommended), rows,
                 (True, True, False, False, *[False] * len(index), False, *[True] * len(ranked), True, True, True, True,
                  False),
                 f"Ranked by {summary.rank_by}, {summary.rank_order} (ties: by severity, then by {share}, then "
                 f"manifest row); {where}; NDCG and recall of dot serving on the holdout; recommended: the trade-off's "
                 "scoring at the K it quotes ('dot': none clearly better than dot, keep it; '—': no holdout, or "
                 "no scoring found a held-out item, or a popaudit mitigate output, whose audit recommends nothing).", wrap=(2,))  # fmt: skip


SATURATED_CELL = "not measured (K holds every candidate)"
"""A head-share cell at a K the row's report marks saturated (docs/measures.md)."""


def _share_cell(row: SummaryRow) -> str:
    """A row's head-share ratio, or :data:`SATURATED_CELL` where its K is saturated."""
    return SATURATED_CELL if row.head_share_saturated else fmt_ratio(row.head_share)


NOT_COMPARABLE = "not comparable"
"""A change between rows whose figures are not comparable (``diff``'s word)."""


def _protocol_note(summary: BatchSummary) -> tuple[Paragraph, ...]:
    """Which rows' lists were measured under which protocol, where rows differ (none otherwise)."""
    if summary.protocols is None:
        return ()
    unknown = any(s.seen_items == UNKNOWN for s in summary.order)
    return (Paragraph(
        f"The rows' lists were measured under different protocols: {summary.protocols}."
        + (f' "{UNKNOWN}" is not the training log\'s protocol (training items not excluded; see each report\'s '
           "retrieval.population)." if unknown else "")
        + " A figure of the model's lists (the head-share ratio, NDCG, recall, every list measure) compares only "
        f"between rows measured the same way: a change or trend across rows measured differently is {NOT_COMPARABLE},"
        " as in popaudit diff." + _approximate_note(summary)),)  # fmt: skip


def _share_reason(row: SummaryRow) -> str | None:
    return row.head_share_apart


def _spearman_reason(row: SummaryRow) -> str | None:
    return row.spearman_apart


def _apart_caption(said: str | None) -> str:
    """The caption naming why changes are not comparable ("" when every change is)."""
    return f"{NOT_COMPARABLE} (as in popaudit diff): {said}." if said else ""


def _apart_pairs(summary: BatchSummary, why: Callable[[SummaryRow], str | None], reason: str | None = None) -> list[str]:
    """The row pairs with a change not comparable by ``why`` (a row's reason: its head
    share's, its Spearman's, any of its changes'), all of them or those of one ``reason``: a
    row's change is from the ok row before it. Each pair is named in diff's order, BASE (the
    earlier row) vs NEW (``row 0 vs row 1``), as diff's reasons give their values."""
    return [f"row {before.row} vs row {s.row}" for before, s in zip(summary.order, summary.order[1:])
            if (said := why(s)) and reason in (None, said)]


def _pair_reason(row: SummaryRow) -> str | None:
    return row.pair_apart


def _pairs_caption(summary: BatchSummary) -> str:
    """The row-by-row caption: why each change it does not state is not comparable, keyed to
    its row pair (``row 0 vs row 1: retrieval.index differs ("exact" vs "ivf").``; pairs
    with one reason said together); "" when every change is stated."""
    reasons = dict.fromkeys(s.pair_apart for s in summary.order[1:] if s.pair_apart)
    said = " ".join(f"{', '.join(_apart_pairs(summary, _pair_reason, why))}: {why}." for why in reasons)
    return f"{NOT_COMPARABLE} (as in popaudit diff): {said}" if said else ""


def _notes_caption(summary: BatchSummary) -> str:
    """Diff's notes on the row pairs that bear on a change the table states
    (:attr:`SummaryRow.caption_notes`: another training log, another number of queries; the
    change is stated, to be read with them), each note once, in diff's words with the pairs
    it concerns in place of its values (``inputs.interactions differs in row 3 vs row 4 (a vs
    b), row 4 vs row 6 (b vs a): another training log: ...``, pairs in diff's order, BASE vs
    NEW); the notes on a change of ρ (the reference itself: another log, another catalogue)
    before those on the head share's alone (queries, samples), else in order of first
    appearance; "" when none."""
    said: dict[tuple[str, str], list[str]] = {}
    on_rho: set[tuple[str, str]] = set()
    for before, s in zip(summary.order, summary.order[1:]):
        for note in s.caption_notes:
            key = (note.subject, note.effect)
            values = f" ({note.values})" if note.values else ""
            said.setdefault(key, []).append(f"row {before.row} vs row {s.row}{values}")
            on_rho.update([key] if "spearman" in note.changes else [])
    ordered = sorted(said, key=lambda key: key not in on_rho)  # stable
    text = " ".join(f"{subject} in {', '.join(said[subject, effect])}" + (f": {effect}." if effect else ".")
                    for subject, effect in ordered)
    return f"Noted, as in popaudit diff: {text}" if text else ""


def _order_caption(summary: BatchSummary, *lead: str) -> str:
    return " ".join(c for c in (*lead, _pairs_caption(summary), _notes_caption(summary)) if c)


def _trends_table(summary: BatchSummary, tau: str) -> Table:
    def figure(metric: str, value: float | None) -> str:  # a dot/cosine ratio may be +inf: ∞×, never n/a
        return fmt_ratio(value) if "_ratio@" in metric else fmt_num(value)

    rows = tuple(
        (t.metric, figure(t.metric, t.first), figure(t.metric, t.last),
         NOT_COMPARABLE if t.apart else fmt_num(t.change), fmt_num(t.kendall_tau), fmt_num(t.p_value), t.direction)
        for t in summary.trends
    )  # fmt: skip
    return Table(("metric", "first", "last", "change", tau, "p", "trend"), rows,
                 (False, True, True, True, True, True, False), _apart_caption(summary.trends_apart))


def _order_rows(summary: BatchSummary) -> tuple[tuple[str, ...], ...]:
    """The row-by-row cells: each ok row's figures and its changes from the previous one."""
    cols = _columns(summary)
    return tuple(
        (str(s.row), s.model, s.label or "", fmt_num(s.spearman),
         NOT_COMPARABLE if s.spearman_apart else fmt_num(s.delta_spearman),
         cols.figure(_share_cell(s), s), NOT_COMPARABLE if s.head_share_apart else fmt_num(s.delta_head_share))
        for s in summary.order
    )  # fmt: skip


def _order_table(summary: BatchSummary, share: str) -> Table:
    caption = _order_caption(summary, "Changes are from the previous audited row.")
    return Table(("row", "model", "label", "spearman", "Δ spearman", share, "Δ"), _order_rows(summary),
                 (True, False, False, True, True, True, True), caption, wrap=(1,))  # fmt: skip


def _order_cut(n_rows: int, output: Path | None, html: Path | None) -> Paragraph:
    """What the terminal says in place of a row-by-row table past :data:`MAX_ORDER_ROWS` rows:
    where the full table is (the HTML page, or how to write one) and each row's figures."""
    where = f"the HTML summary {html} lists" if html is not None else f"an HTML summary (popaudit batch {setting('html')} FILE) lists"
    figures = f"; each row's figures are in {output}" if output is not None else ""
    return Paragraph(f"Row by row: {n_rows} audited rows, more than the terminal lists ({MAX_ORDER_ROWS}): {where} "
                     f"every row, with its changes from the previous one and why any is not comparable{figures}.")


def _brief(summary: BatchSummary, share: str, n_resumed: int, output: Path | None,
           html: Path | None = None) -> tuple[Block, ...]:
    """The terminal's view: the counts, the ranking and (for 2+ rows) the trends and, up
    to :data:`MAX_ORDER_ROWS` rows, the row-by-row changes (past it, where they are)."""
    cols = _columns(summary)
    resumed = f" ({n_resumed} kept from the earlier run)" if n_resumed else ""
    where = f" Results: {output}" if output is not None else ""
    ranked, values = _ranked_column(summary)
    index, indexes = _index_column(summary)
    blocks: list[Block] = [
        Paragraph(f"{summary.n_rows} rows: {summary.n_ok} ok, {summary.n_error} failed{resumed}.{where}"),
        *_protocol_note(summary),
        Table(
            ("#", "row", "model", "label", *index, "severity", *ranked, "spearman", cols.share, cols.ndcg,
             cols.recommended),
            tuple((str(i), str(s.row), s.model, s.label or "", *how, s.severity or "n/a", *value, fmt_num(s.spearman),
                   cols.figure(_share_cell(s), s), cols.figure(fmt_num(s.ndcg), s), cols.scoring(s))
                  for i, (s, value, how) in enumerate(zip(summary.ranking, values, indexes), 1)),
            (True, True, False, False, *[False] * len(index), False, *[True] * len(ranked), True, True, True, False),
            title=f"Models ranked by {summary.rank_by} ({summary.rank_order})",
        ),
    ]  # fmt: skip
    if len(summary.order) > 1:
        blocks.append(replace(_trends_table(summary, "Kendall τ"), title="Across the manifest order"))
    if 1 < len(summary.order) <= MAX_ORDER_ROWS:
        blocks.append(Table(("row", "model", "label", "spearman", "Δ", share, "Δ "), _order_rows(summary),
                            (True, False, False, True, True, True, True),
                            _order_caption(summary),
                            title="Row by row (changes from the previous audited row)"))  # fmt: skip
    elif len(summary.order) > MAX_ORDER_ROWS:
        blocks.append(_order_cut(len(summary.order), output, html))
    return tuple(blocks)


def summary_html(summary: BatchSummary, *, title: str = "popaudit batch summary") -> str:
    """The summary as a self-contained HTML page (:func:`batch_document`, HTML format)."""
    from auditor.report.html import document_html

    return document_html(batch_document(summary, title=title))


def summary_console(summary: BatchSummary, *, n_resumed: int, output: Path,
                    html: Path | None = None) -> list[RenderableType]:
    """The summary's terminal view (:func:`batch_document`'s brief) as rich renderables,
    for ``Console.print``; every cell is literal text, never markup."""
    from auditor.report.console import renderables

    return renderables(batch_document(summary, n_resumed=n_resumed, output=output, html=html))
