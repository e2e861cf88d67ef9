"""The terminal format: any report document walked into rich tables and coloured text.

A document's ``brief`` (the terminal's short view) is what a terminal shows; a document
without one is shown whole. Rendered by rich into a string (the library never prints);
plain text unless ``context.color``. Every cell and text is a literal ``Text``: nothing
from a result or a manifest is read as rich markup (``[/bold]`` prints as written).
"""

from __future__ import annotations

import io

from rich.console import Console, Group, RenderableType
from rich.measure import Measurement
from rich.panel import Panel
from rich.table import Table as RichTable
from rich.text import Text

from auditor.plugin_api import RenderContext
from auditor.report.audit_doc import audit_terminal_view
from auditor.report.document import (
    Block,
    Bullets,
    Document,
    Figure,
    Group as Blocks,
    Heading,
    Headline,
    KeyValues,
    Paragraph,
    Table,
)
from auditor.report.formatting import text_or_missing
from auditor.report.plain_table import PlainTable
from auditor.result import AuditResult

SEVERITY_STYLE = {"none": "green", "low": "yellow", "moderate": "dark_orange", "high": "bold red"}
STATUS_STYLE = {"holds": "red", "violated": "green", "unknown": "dim"}
ROLE_STYLE = {"body": "", "summary": "", "note": "dim", "missing": "dim", "title": "bold", "warning": "yellow"}
LOG_WIDTH = 80
"""The narrowest a document is laid out when ``context.width`` is 0 (a log file)."""


class ConsoleRenderer:
    """``--format console``: rich tables, coloured only when ``context.color`` is set."""

    name = "console"
    suffix = ".txt"
    description = "human-readable report for the terminal (rich tables)"

    def render(self, result: AuditResult, context: RenderContext) -> str:
        """The audit's report as text, ``context.width`` columns wide: its document's
        brief (:func:`audit_terminal_view`, the document's other parts left unbuilt)."""
        return _printed([renderable(block) for block in audit_terminal_view(result)], context)

    def render_document(self, document: Document, context: RenderContext) -> str:
        """``document`` as text, ``context.width`` columns wide; a width of 0 (a log file)
        keeps each table at its natural width and each paragraph on one line."""
        return _printed(renderables(document), context)


def _printed(parts: list[RenderableType], context: RenderContext) -> str:
    """``parts`` printed one after the other, as :meth:`ConsoleRenderer.render_document` says."""
    natural = context.width <= 0
    buffer = io.StringIO()
    console = Console(
        file=buffer,
        width=_natural_width(parts) if natural else context.width,
        force_terminal=context.color,
        color_system="auto" if context.color else None,
        highlight=False,
    )
    for part in parts:
        console.print(part, soft_wrap=natural and isinstance(part, Text))
    return buffer.getvalue()


def renderables(document: Document) -> list[RenderableType]:
    """``document`` as rich renderables, one per block, for ``Console.print``."""
    blocks = document.brief if document.brief is not None else whole(document)
    return [renderable(block) for block in blocks]


def whole(document: Document) -> list[Block]:
    """Every block of ``document``, each section under its title."""
    blocks = list(document.lead)
    for section in document.sections:
        blocks += [Paragraph(section.title, "title")] if section.title else []
        blocks += section.blocks
    return blocks


def renderable(block: Block) -> RenderableType:
    """One block for the terminal."""
    if isinstance(block, Headline):
        return _panel(block)
    if isinstance(block, Paragraph):
        return Text(block.text, style=ROLE_STYLE.get(block.role, ""))
    if isinstance(block, Heading):
        return Text(block.text, style="bold")
    if isinstance(block, Bullets):
        return Group(*(Text(f"  • {item}") for item in block.items))
    if isinstance(block, KeyValues):
        return _key_values(block)
    if isinstance(block, Table):
        return _table(block)
    if isinstance(block, Figure):
        return Text(f"Figure: {block.title} (drawn in the HTML and Markdown reports)", style="dim")
    if isinstance(block, Blocks):
        return Group(*(renderable(child) for child in block.blocks))
    raise TypeError(f"the console format has no rendering for {type(block).__name__}")


def _panel(headline: Headline) -> Panel:
    style = SEVERITY_STYLE.get(headline.severity, "bold")
    body = Text(text_or_missing(headline.summary))
    if headline.note:
        body.append("\n" + headline.note, style="dim")
    title = Text(f"{headline.verdict} · severity {headline.severity}", style=style)
    return Panel(body, title=title, border_style=style)


def _key_values(block: KeyValues) -> RenderableType:
    table = RichTable(show_header=False)
    table.add_column("name")
    table.add_column("value", justify="right")
    for name, value in block.rows:
        table.add_row(Text(name), Text(value))
    shown = PlainTable(table)
    return titled(block.title, shown) if block.title else shown


def _table(block: Table) -> RenderableType:
    table = RichTable()
    for i, name in enumerate(block.headers):
        table.add_column(
            Text(name), justify="right" if block.is_numeric(i) else "left",
            overflow="fold" if i in block.wrap else "ellipsis", no_wrap=i in block.nowrap,
        )  # fmt: skip
    for row in block.rows:
        table.add_row(*(_cell(block, i, cell) for i, cell in enumerate(row)))
    plain = PlainTable(table)
    shown: RenderableType = titled(block.title, plain) if block.title else plain
    return Group(shown, Text(block.caption, style="dim")) if block.caption else shown


def _cell(block: Table, column: int, cell: str) -> Text:
    style = STATUS_STYLE.get(cell, "") if column == block.badge else ""
    return Text(cell, style=style)


def titled(title: str, table: RenderableType) -> Group:
    """``table`` under its title on a line of its own: a title set on a rich table wraps
    at the table's width, which splits a long title mid-phrase over a narrow table."""
    return Group(Text(title, style="bold"), table)


def _natural_width(parts: list[RenderableType]) -> int:
    """The width that fits every table unwrapped (paragraphs are printed on one line)."""
    measure = Console(width=10_000)
    widths = [Measurement.get(measure, measure.options, part).maximum for part in parts if not isinstance(part, Text)]
    return max([LOG_WIDTH, *widths])
