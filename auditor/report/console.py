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

from auditor.report import RenderContext
from auditor.report import accuracy as accuracy_view
from auditor.report.content import severity_rule, verdict_phrase
from auditor.report.formatting import fmt_num, fmt_pct, fmt_ratio, ratio
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
    body = Text(verdict.summary)
    if verdict.rule:
        body.append("\n" + severity_rule(result), style="dim")
    return Panel(
        body,
        title=Text(f"{title} · severity {verdict.severity}", style=style),
        border_style=style,
    )


def _inputs(result: AuditResult) -> Text:
    i = result.inputs
    line = f"Model {i.model} ({i.format}): {i.n_items:,} items × {i.dim} dims"
    if i.interactions:
        line += f"; log {i.interactions}: {i.n_interactions:,} interactions"
    elif result.settings.get("frequencies") and i.n_interactions is not None:
        line += f"; counts {result.settings['frequencies']}: {i.n_interactions:,} interactions"
    elif i.n_interactions is not None:
        line += f"; frequencies recorded in the checkpoint ({i.n_interactions:,} interactions)"
    return Text(line, style="dim")


def _frequency_norm(result: AuditResult) -> Table:
    fn = result.frequency_norm
    assert fn is not None
    table = Table(title="Frequency–norm correlation", show_header=False, title_justify="left")
    table.add_column("measure")
    table.add_column("value", justify="right")
    lo, hi = fn.spearman_ci
    table.add_row("Spearman ρ (95% CI)", f"{fmt_num(fn.spearman)} [{fmt_num(lo)}, {fmt_num(hi)}]")
    # A p-value of exactly 0 is a float underflow, not certainty (as in content.py).
    table.add_row("p-value", "< 1e-300" if fn.spearman_p == 0 else fmt_num(fn.spearman_p))
    table.add_row("Pearson on log(1+freq)", fmt_num(fn.pearson_log))
    table.add_row("Kendall τ", fmt_num(fn.kendall))
    table.add_row("log–log slope (ideal ≈ 0.25)", fmt_num(fn.loglog_slope))
    table.add_row("items / cold items", f"{fn.n_items:,} / {fn.n_cold:,}")
    return table


def _deciles(result: AuditResult) -> Table:
    fn = result.frequency_norm
    assert fn is not None
    table = Table(title="Item norm by popularity decile", title_justify="left")
    for name in ("decile", "frequency", "items", "median norm", "mean norm"):
        table.add_column(name, justify="right")
    for row in fn.deciles:
        table.add_row(
            str(row.decile),
            f"{row.freq_min:,}" if row.freq_min == row.freq_max else f"{row.freq_min:,}–{row.freq_max:,}",
            f"{row.n:,}",
            fmt_num(row.norm_median),
            fmt_num(row.norm_mean),
        )
    return table


def _retrieval(result: AuditResult) -> Group:
    retrieval = result.retrieval
    assert retrieval is not None
    tables: list[RenderableType] = [
        Text(
            f"Retrieval skew: {retrieval.n_queries:,} queries ({retrieval.queries}), "
            f"index {retrieval.index}, popularity by {retrieval.popularity}",
            style="bold",
        )
    ]
    for k, cut in sorted(retrieval.at.items()):
        scorings = cut.scorings()
        table = Table(title=f"Top-{k}", title_justify="left")
        for name in ("measure", *scorings, "dot/cosine"):
            table.add_column(name, justify="right")
        for metric in retrieval.list_measures:
            values = [listed.get(metric) for listed in scorings.values()]
            table.add_row(metric, *map(fmt_num, values), fmt_ratio(ratio(values[0], values[1])))
        table.add_row("overlap dot∩cosine", fmt_num(cut.overlap_dot_cosine), *[""] * len(scorings))
        tables.append(table)
    if retrieval.recall:
        recall = ", ".join(f"@{k}: {v:.3f}" for k, v in sorted(retrieval.recall.items()))
        tables.append(Text(f"Approximate-index recall vs exact search {recall}", style="dim"))
    return Group(*tables)


def _accuracy(result: AuditResult) -> Group:
    accuracy = result.accuracy
    assert accuracy is not None
    parts: list[RenderableType] = [
        Text(
            f"{accuracy_view.TITLE}: {accuracy.n_users_evaluated:,} held-out users "
            f"({accuracy.n_dropped:,} held-out interactions dropped)",
            style="bold",
        )
    ]
    for k in sorted(accuracy.at):
        shown = accuracy_view.tradeoff_table(result, k)
        table = Table(title=f"Top-{k}", title_justify="left")
        for column, name in enumerate(shown.headers):
            table.add_column(name, justify="right" if shown.is_numeric(column) else "left")
        for row in shown.rows:
            table.add_row(*(Text(cell) for cell in row))
        parts.append(table)
    if accuracy.recommendation:
        parts.append(Text(accuracy.recommendation))
    return Group(*parts)


def _conditions(result: AuditResult) -> Table:
    assert result.conditions is not None
    table = Table(
        title="Sufficient conditions (all holding = norms must grow with popularity)",
        title_justify="left",
    )
    table.add_column("id")
    table.add_column("condition")
    table.add_column("status")
    table.add_column("evidence", overflow="fold")
    for key, cond in sorted(result.conditions.items()):
        # Text() everywhere: evidence like "E[i]" must not be read as rich markup.
        table.add_row(
            key, Text(cond.name), Text(cond.status, style=STATUS_STYLE.get(cond.status, "")), Text(cond.evidence)
        )
    return table


def _probes(result: AuditResult) -> Text:
    assert result.probes is not None and result.probes.update is not None
    angles = result.probes.update.angle_summary
    return Text(
        f"Update angles over {angles.n:,} items: median {fmt_num(angles.median, 2)}°, "
        f"{fmt_pct(angles.share_90pm1)} within 90°±1°, "
        f"{fmt_pct(angles.share_90pm10)} within 90°±10°"
    )


def _measures(result: AuditResult) -> Table:
    table = Table(title="Additional measures (built-in and plugins)", show_header=False, title_justify="left")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for name, value in result.measures.items():
        table.add_row(Text(name), Text(fmt_num(value) if isinstance(value, float) else str(value)))
    return table
