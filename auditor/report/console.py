"""The terminal report: a coloured verdict, the numbers, and what to do next.

Rendered by rich into a string (the library never prints); plain text when the output
is not a terminal.
"""

from __future__ import annotations

import io

from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from auditor.plugin_api import RenderContext
from auditor.report import accuracy as accuracy_view
from auditor.report.content import RATIO_HEADER, SEVERITY_POINTER, format_measure, verdict_phrase
from auditor.report.population import population_rows
from auditor.report.formatting import Table as PlainTable
from auditor.report.formatting import fmt_num, fmt_pct, fmt_range, fmt_ratio, fmt_value, ratio, text_or_missing
from auditor.result import AuditResult

SEVERITY_STYLE = {"none": "green", "low": "yellow", "moderate": "dark_orange", "high": "bold red"}
STATUS_STYLE = {"holds": "red", "violated": "green", "unknown": "dim"}


class ConsoleRenderer:
    """``--format console``: rich tables, coloured only when ``context.color`` is set."""

    name = "console"
    suffix = ".txt"
    description = "human-readable report for the terminal (rich tables)"

    def render(self, result: AuditResult, context: RenderContext) -> str:
        """The report as text, ``context.width`` columns wide."""
        buffer = io.StringIO()
        console = Console(
            file=buffer,
            width=context.width,
            force_terminal=context.color,
            color_system="auto" if context.color else None,
            highlight=False,
        )
        for part in _sections(result):
            console.print(part)
        return buffer.getvalue()


def _sections(result: AuditResult) -> list[object]:
    parts: list[object] = [_headline(result), _inputs(result)]
    if result.frequency_norm is not None:
        parts += [_frequency_norm(result), _deciles(result)]
    if result.retrieval is not None:
        parts.append(_retrieval(result))
    if result.accuracy is not None:
        parts.append(_accuracy(result))
    if result.conditions:
        parts.append(_conditions(result))
    if result.probes is not None and result.probes.update is not None:
        parts.append(_probes(result))
    if result.measures:
        parts.append(_measures(result))
    if result.verdict.recommendations:
        parts.append(
            Group(
                Text("What to do", style="bold"),
                *(Text(f"  • {r}") for r in result.verdict.recommendations),
            )
        )
    for section, why in result.not_measured.items():
        parts.append(Text(f"Not measured: {section}: {why}", style="dim"))
    for warning in result.warnings:
        parts.append(Text(f"Warning: {warning}", style="yellow"))
    # What to run next depends on what this run wrote: the CLI says it (auditor/cli/check.py).
    return parts


def _headline(result: AuditResult) -> Panel:
    verdict = result.verdict
    style = SEVERITY_STYLE.get(verdict.severity, "bold")
    title = verdict_phrase(result).split(" (")[0]
    body = Text(text_or_missing(verdict.summary))
    body.append("\n" + SEVERITY_POINTER, style="dim")
    return Panel(
        body,
        title=Text(f"{title} · severity {verdict.severity}", style=style),
        border_style=style,
    )


def _inputs(result: AuditResult) -> Text:
    i = result.inputs
    line = f"Model {i.model} ({text_or_missing(i.format)}): {fmt_num(i.n_items)} items × {fmt_num(i.dim)} dims"
    if i.interactions:
        line += f"; log {i.interactions}: {fmt_num(i.n_interactions)} interactions"
    elif result.settings.get("frequencies") and i.n_interactions is not None:
        line += f"; counts {result.settings['frequencies']}: {fmt_num(i.n_interactions)} interactions"
    elif i.n_interactions is not None:
        line += f"; frequencies recorded in the checkpoint ({fmt_num(i.n_interactions)} interactions)"
    return Text(line, style="dim")


def _frequency_norm(result: AuditResult) -> Group:
    fn = result.frequency_norm
    assert fn is not None
    table = Table(show_header=False)
    table.add_column("measure")
    table.add_column("value", justify="right")
    lo, hi = fn.spearman_ci
    table.add_row("Spearman ρ (95% CI)", f"{fmt_num(fn.spearman)} [{fmt_num(lo)}, {fmt_num(hi)}]")
    # A p-value of exactly 0 is a float underflow, not certainty (as in content.py).
    table.add_row("p-value", "< 1e-300" if fn.spearman_p == 0 else fmt_num(fn.spearman_p))
    table.add_row("Pearson on log(1+freq)", fmt_num(fn.pearson_log))
    table.add_row("Kendall τ", fmt_num(fn.kendall))
    table.add_row("log–log slope (ideal ≈ 0.25)", fmt_num(fn.loglog_slope))
    table.add_row("items / cold items", f"{fmt_num(fn.n_items)} / {fmt_num(fn.n_cold)}")
    return titled("Frequency–norm correlation", table)


def _deciles(result: AuditResult) -> Group:
    fn = result.frequency_norm
    assert fn is not None
    table = Table()
    for name in ("decile", "frequency", "items", "median norm", "mean norm"):
        table.add_column(name, justify="right")
    for row in fn.deciles:
        table.add_row(
            str(row.decile),
            fmt_range(row.freq_min, row.freq_max),
            fmt_num(row.n),
            fmt_num(row.norm_median),
            fmt_num(row.norm_mean),
        )
    return titled("Item norm by popularity decile", table)


def _retrieval(result: AuditResult) -> Group:
    retrieval = result.retrieval
    assert retrieval is not None
    tables: list[RenderableType] = [
        Text(
            f"Retrieval skew: {fmt_num(retrieval.n_queries)} queries ({text_or_missing(retrieval.queries)}), "
            f"index {text_or_missing(retrieval.index)}, popularity by {text_or_missing(retrieval.popularity)}",
            style="bold",
        )
    ]
    tables += [Text(f"{name}: {value}", style="dim") for name, value in population_rows(retrieval)[1:]]
    for k, cut in sorted(retrieval.at.items()):
        # dot, cosine and their ratio first (the headline's numbers), as in every format.
        scorings = {"dot": cut.dot, "cosine": cut.cosine, **cut.norm_aware, "popular": cut.popular}
        table = Table()
        names = list(scorings)
        names.insert(2, RATIO_HEADER)
        for name in ("measure", *names):
            table.add_column(name, justify="right")
        for metric, info in retrieval.list_measures.items():
            cells = [format_measure(listed.get(metric), info.display) for listed in scorings.values()]
            cells.insert(2, fmt_ratio(ratio(cut.dot.get(metric), cut.cosine.get(metric))))
            table.add_row(metric, *cells)
        table.add_row("overlap dot∩cosine", fmt_pct(cut.overlap_dot_cosine), *[""] * len(scorings))
        tables.append(titled(f"Top-{k}", table))
    if retrieval.recall:
        recall = ", ".join(f"@{k}: {fmt_num(v)}" for k, v in sorted(retrieval.recall.items()))
        tables.append(Text(f"Approximate-index recall vs exact search {recall}", style="dim"))
    return Group(*tables)


def _accuracy(result: AuditResult) -> Group:
    accuracy = result.accuracy
    assert accuracy is not None
    parts: list[RenderableType] = [
        Text(
            f"{accuracy_view.TITLE}: {fmt_num(accuracy.n_users_evaluated)} held-out users "
            f"({fmt_num(accuracy.n_dropped)} held-out interactions dropped)",
            style="bold",
        )
    ]
    for k in sorted(accuracy.at):
        parts.append(_rich_table(accuracy_view.tradeoff_table(result, k), f"Top-{k}"))
    if accuracy.changes:
        parts.append(_rich_table(accuracy_view.changes_table(accuracy), f"Against dot at K={accuracy.quoted_k}"))
    if accuracy.recommendation:
        parts.append(Text(accuracy.recommendation))
    return Group(*parts)


def _rich_table(shown: PlainTable, title: str) -> RenderableType:
    table = Table()
    for column, name in enumerate(shown.headers):
        table.add_column(name, justify="right" if shown.is_numeric(column) else "left")
    for row in shown.rows:
        table.add_row(*(Text(cell) for cell in row))
    return titled(title, table)


def _conditions(result: AuditResult) -> Group:
    assert result.conditions is not None
    table = Table()
    table.add_column("id")
    table.add_column("condition")
    table.add_column("status")
    table.add_column("evidence", overflow="fold")
    for key, cond in sorted(result.conditions.items()):
        # Text() everywhere: evidence like "E[i]" must not be read as rich markup.
        table.add_row(
            key, Text(text_or_missing(cond.name)), Text(cond.status, style=STATUS_STYLE.get(cond.status, "")),
            Text(text_or_missing(cond.evidence)),
        )
    return titled("Sufficient conditions (all holding = norms must grow with popularity)", table)


def _probes(result: AuditResult) -> Text:
    assert result.probes is not None and result.probes.update is not None
    angles = result.probes.update.angle_summary
    return Text(
        f"Update angles over {fmt_num(angles.n)} items: median {fmt_num(angles.median, 2)}°, "
        f"{fmt_pct(angles.share_90pm1)} within 90°±1°, "
        f"{fmt_pct(angles.share_90pm10)} within 90°±10°"
    )


def _measures(result: AuditResult) -> Group:
    table = Table(show_header=False)
    table.add_column("measure")
    table.add_column("value", justify="right")
    for name, value in result.measures.items():
        table.add_row(Text(name), Text(fmt_num(value) if isinstance(value, float) else fmt_value(value)))
    return titled("Additional measures (built-in and plugins)", table)


def titled(title: str, table: Table) -> Group:
    """``table`` under its title on a line of its own: a title set on a rich table wraps
    at the table's width, which splits a long title mid-phrase over a narrow table."""
    return Group(Text(title, style="bold"), table)
