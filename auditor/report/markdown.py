"""The Markdown format (GitHub-flavoured): any report document, with its figures beside it.

For a report written to ``path/report.md`` the figures go to
``path/report_files/<name>.png`` and are linked relatively, so the folder can be moved
or committed as a whole; they are handed back in ``context.attachments``, so they are
written with the report, atomically, or not at all. Rendered to standard output
(``context.destination`` None) or to a file that is not a regular one (``/dev/null``,
``/dev/stdout``, a FIFO) there is nowhere to put images: they are left out and the
report says so.

Reusable pieces: :func:`md_escape`, :func:`md_text`, :func:`md_table`, :func:`bullets`,
:func:`images_folder` and :func:`figure_paths`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from urllib.parse import quote

from auditor.errors import setting
from auditor.io import is_special_file
from auditor.plugin_api import RenderContext
from auditor.report.audit_doc import audit_document
from auditor.report.document import (
    Block,
    Bullets,
    Document,
    Figure,
    Group,
    Heading,
    Headline,
    KeyValues,
    Paragraph,
    Table,
)
from auditor.report.figures import FIGURE_NAMES
from auditor.result import AuditResult

_SPECIAL = re.compile(r"([\\`*_\[\]<>|~#])")
_TEXT_SPECIAL = re.compile(r"[\\`*\[\]<>|~#]|(?<![^\W_])_|_(?![^\W_])")


def md_escape(text: object) -> str:
    """``text`` on one line with Markdown's active characters backslash-escaped.

    Escaping ``<`` and ``>`` keeps raw HTML out; ``|`` keeps table cells intact.
    """
    return _SPECIAL.sub(r"\\\1", " ".join(str(text).split()))


def md_text(text: object) -> str:
    """Running text for a paragraph: :func:`md_escape`, except that an underscore inside a
    word (letters or digits on both sides, which Markdown never reads as emphasis) stays
    as written, so paths and names such as ``alpha_0.5`` read as typed."""
    return _TEXT_SPECIAL.sub(lambda match: "\\" + match.group(0), " ".join(str(text).split()))


def md_table(table: Table) -> str:
    """A :class:`~auditor.report.formatting.Table` as a GFM pipe table (numeric columns right-aligned)."""
    head = "| " + " | ".join(md_escape(h) for h in table.headers) + " |"
    rule = "|" + "|".join("---:" if table.is_numeric(i) else ":---" for i in range(len(table.headers))) + "|"
    rows = ["| " + " | ".join(md_escape(cell) if cell else " " for cell in row) + " |" for row in table.rows]
    caption = f"\n_{md_escape(table.caption)}_\n" if table.caption else ""
    title = f"**{md_escape(table.title)}**\n\n" if table.title else ""
    return title + "\n".join([head, rule, *rows]) + "\n" + caption + "\n"


def bullets(items: Iterable[str]) -> str:
    """A Markdown bullet list of escaped items."""
    return "".join(f"- {md_escape(item)}\n" for item in items) + "\n"


def images_folder(destination: Path) -> Path:
    """Where the figures of a report written to ``destination`` go: ``<stem>_files``."""
    return destination.parent / f"{destination.stem}_files"


def has_figures(destination: Path | None) -> bool:
    """Whether a report written to ``destination`` gets its figures beside it: not on
    standard output (None) nor in a special file (``/dev/null``: no ``/dev/null_files``)."""
    return destination is not None and not is_special_file(destination)


def figure_paths(destination: Path | None) -> list[Path]:
    """Every file the figures of an audit report written to ``destination`` may take
    (none where it gets no figures), for checking that outputs are distinct before the
    audit runs."""
    if destination is None or not has_figures(destination):
        return []
    folder = images_folder(Path(destination))
    return [folder / f"{name}.png" for name in FIGURE_NAMES]


def image_files(figures: Sequence[Figure], destination: Path) -> tuple[dict[Path, bytes], dict[str, str]]:
    """Each figure drawn as a PNG file beside ``destination``, and name -> relative link
    (relative to the report's folder, URL-quoted)."""
    folder = images_folder(destination)
    files: dict[Path, bytes] = {}
    links: dict[str, str] = {}
    for figure in figures:
        files[folder / f"{figure.name}.png"] = figure.png()
        links[figure.name] = quote(f"{folder.name}/{figure.name}.png")
    return files, links


def markdown_text(document: Document, links: Mapping[str, str] | None, *, went_to: str = "standard output") -> str:
    """``document`` as Markdown; ``links`` maps figure names to image paths (None: figures
    omitted, with a note saying the report ``went_to`` where none can go)."""
    out = [f"# {md_escape(document.title)}\n\n", *(block_text(b, links or {}) for b in document.lead)]
    if links is None and document.figures():
        out.append(
            f"_Plots omitted: this report went to {md_escape(went_to)}; write it to a regular file "
            f"(`{setting('markdown')} PATH` or `{setting('output')} PATH`) to get the figures beside it._\n\n"
        )
    for section in document.sections:
        out += [f"## {md_escape(section.title)}\n\n"] if section.title else []
        out += [block_text(block, links or {}) for block in section.blocks]
    if document.footer:
        out.append(f"---\n\n{md_escape(document.footer)}\n")
    return "".join(out)


def block_text(block: Block, links: Mapping[str, str]) -> str:
    """One block as Markdown (a figure only where ``links`` has it)."""
    if isinstance(block, Paragraph):
        text = md_text(block.text)
        return {"note": f"_{text}_", "missing": f"_{text}_", "title": f"**{text}**"}.get(block.role, text) + "\n\n"
    if isinstance(block, Heading):
        return f"### {md_escape(block.text)}\n\n"
    if isinstance(block, Table):
        return md_table(block)
    if isinstance(block, Bullets):
        return bullets(block.items)
    if isinstance(block, KeyValues):
        return (f"**{md_escape(block.title)}**\n\n" if block.title else "") + bullets(f"{k}: {v}" for k, v in block.rows)
    if isinstance(block, Figure):
        link = links.get(block.name)
        return f"![{md_escape(block.alt)}]({link})\n\n_{md_escape(block.title)}_\n\n" if link else ""
    if isinstance(block, Headline):
        return f"> **{md_escape(block.phrase)}**: {md_escape(block.evidence)}.\n\n"
    if isinstance(block, Group):
        return "".join(block_text(child, links) for child in block.blocks)
    raise TypeError(f"the markdown format has no rendering for {type(block).__name__}")


def render_audit_markdown(
    result: AuditResult, plots: Sequence[Figure] = (), links: Mapping[str, str] | None = None,
    *, went_to: str = "standard output",
) -> str:
    """The Markdown report of ``result`` showing ``plots`` (linked by ``links``; None:
    omitted, and said so when there are plots)."""
    return markdown_text(audit_document(result, plots), links, went_to=went_to)


class MarkdownRenderer:
    """``--format markdown``: GitHub-flavoured Markdown, figures as PNGs beside the file."""

    name = "markdown"
    suffix = ".md"
    description = "GitHub-flavoured Markdown; plots written to <name>_files/ beside the report"

    def render(self, result: AuditResult, context: RenderContext) -> str:
        """The audit's report; its figures go to ``context.attachments`` when it is
        written to a regular file (``context.destination``)."""
        return self.render_document(audit_document(result), context)

    def render_document(self, document: Document, context: RenderContext) -> str:
        """``document`` as Markdown, its figures drawn into ``context.attachments`` beside
        a regular ``context.destination`` (elsewhere: named as omitted, not drawn)."""
        destination = context.destination
        if destination is None or not has_figures(destination):
            went_to = "standard output" if destination is None else f"{destination}, not a regular file"
            return markdown_text(document, None, went_to=went_to)
        files, links = image_files(document.figures(), Path(destination))
        context.attachments.update(files)
        return markdown_text(document, links)
