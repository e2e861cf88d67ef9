"""One report as a format-neutral document: what it says, in reading order, never how.

A builder turns a result into a :class:`Document` (:func:`auditor.report.audit_doc.audit_document`
for an audit, :mod:`~auditor.report.batch_summary`, :mod:`~auditor.report.experiment_summary`
and :mod:`~auditor.report.mitigation_summary` for the summaries); a walker (one module per
format: console, Markdown, HTML, JSON) turns any document into text. A document is a
title, lead blocks (the verdict headline, an introduction), titled sections of blocks, an
optional *brief* (the terminal's short view of the same findings) and, for JSON, its data.

Blocks are plain values: :class:`Paragraph` (with a :data:`Role`), :class:`Heading`,
:class:`Bullets`, :class:`KeyValues`, :class:`~auditor.report.formatting.Table` (cells as
strings, column alignment, caption), :class:`Figure` (drawn only when a walker asks for
its PNG, so matplotlib loads only then), :class:`Headline` and :class:`Group`. Cells and
texts are plain strings: each walker escapes them for its format.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from auditor.plugin_api import RenderContext, Renderer
from auditor.report.formatting import Table

if TYPE_CHECKING:
    from auditor.report.drawing import Plot

Role = Literal["body", "summary", "note", "missing", "title", "warning"]
"""What a paragraph is: running text, the section's conclusion, a muted explanation, a
'not measured' statement, a line set in bold, or a warning."""
Kind = Literal["audit", "batch", "experiment", "mitigation", "diff", "trace"]
"""The document kinds; each has one builder (``diff`` and ``trace`` are reserved for the
comparison of two audits and the training trace)."""


@dataclass(frozen=True)
class Paragraph:
    """A paragraph of plain text."""

    text: str
    role: Role = "body"


@dataclass(frozen=True)
class Heading:
    """A heading inside a section (below the section's own title)."""

    text: str


@dataclass(frozen=True)
class Bullets:
    """A bullet list; ``role`` names lists that formats may style (recommendations, warnings)."""

    items: tuple[str, ...]
    role: Literal["", "recommendations", "warnings"] = ""


@dataclass(frozen=True)
class KeyValues:
    """Rows of (name, value) without a header row, e.g. a terminal's list of statistics."""

    rows: tuple[tuple[str, str], ...]
    title: str = ""


@dataclass(frozen=True)
class Figure:
    """A figure, drawn on demand: ``draw`` returns a matplotlib figure (imported by the
    builder's callable, so building a document never loads matplotlib).

    ``name`` is a file stem (``norm_vs_frequency``), ``section`` the key of the section it
    belongs to, ``alt`` a text alternative saying what the figure shows.
    """

    name: str
    section: str
    title: str
    alt: str
    draw: Callable[[], Any] = field(compare=False, repr=False)

    def png(self, *, dpi: int | None = None) -> bytes:
        """The figure drawn and encoded as PNG."""
        from auditor.report.drawing import DPI, figure_png

        return figure_png(self.draw(), dpi=dpi or DPI)

    def render(self, *, dpi: int | None = None) -> Plot:
        """The figure drawn, as a :class:`~auditor.report.plots.Plot`."""
        from auditor.report.drawing import Plot

        return Plot(self.name, self.section, self.title, self.alt, self.png(dpi=dpi))


@dataclass(frozen=True)
class Headline:
    """The verdict in one line and its evidence, with the verdict's own summary."""

    verdict: str
    """``Popularity bias detected`` (without the severity)."""
    severity: str
    phrase: str
    """The verdict with its severity: ``Popularity bias detected (severity high)``."""
    evidence: str
    """The numbers behind it, one sentence without its full stop."""
    summary: str = ""
    note: str = ""
    """What a reader needs to read the severity (where its rule is)."""


@dataclass(frozen=True)
class Group:
    """Blocks that belong together; ``side_by_side``: they may be laid out in columns."""

    blocks: tuple[Block, ...]
    side_by_side: bool = False


Block = Paragraph | Heading | Bullets | KeyValues | Table | Figure | Headline | Group


@dataclass(frozen=True)
class Section:
    """A titled part of a document; ``key`` is its identifier (an HTML anchor)."""

    key: str
    title: str
    blocks: tuple[Block, ...]


@dataclass(frozen=True)
class Document:
    """One report: what every format says, in one order."""

    kind: Kind
    title: str
    sections: tuple[Section, ...] = ()
    lead: tuple[Block, ...] = ()
    """Before the sections (and before an HTML page's contents list): the headline."""
    brief: tuple[Block, ...] | None = None
    """The terminal's short view of the same findings (None: the whole document)."""
    subtitle: str = ""
    """What the report is about (e.g. the model file), shown under the title."""
    footer: str = ""
    payload: Callable[[], Any] | None = field(default=None, compare=False, repr=False)
    """The document's data for machine-readable formats (JSON), built on demand; None:
    the document has none."""

    def blocks(self) -> Iterator[Block]:
        """Every block of the lead and the sections, in order, groups opened."""
        yield from _opened(self.lead)
        for section in self.sections:
            yield from _opened(section.blocks)

    def figures(self) -> list[Figure]:
        """Every figure of the document, in reading order (the lead's first)."""
        return [block for block in self.blocks() if isinstance(block, Figure)]


def _opened(blocks: tuple[Block, ...]) -> Iterator[Block]:
    for block in blocks:
        if isinstance(block, Group):
            yield from _opened(block.blocks)
        else:
            yield block


class DocumentRenderer(Renderer, Protocol):
    """A renderer that renders any :class:`Document`, summaries included (the built-in
    ones do); a renderer with ``render`` alone renders audits only."""

    def render_document(self, document: Document, context: RenderContext) -> str | bytes:
        """``document`` as text (or bytes), ready to print or write."""
        ...


__all__ = [
    "Block", "Bullets", "Document", "DocumentRenderer", "Figure", "Group", "Heading", "Headline", "KeyValues",
    "Kind", "Paragraph", "Role", "Section", "Table",
]  # fmt: skip
