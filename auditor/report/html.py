"""The HTML format: any report document as one self-contained page (inline CSS, PNG
data URIs, no scripts).

:func:`document_html` walks a :class:`~auditor.report.document.Document` with these pieces:

* :func:`esc` - escape any value for text or attribute context.
* :class:`Section` and :func:`page` - a complete page with a contents list, the
  report's screen and print styles, and a footer.
* :func:`table_html` - a :class:`~auditor.report.formatting.Table` as ``<table>``.
* :func:`figure_html` - a :class:`~auditor.report.plots.Plot` (or PNG bytes) as an
  inline ``<figure>``.
* :func:`paragraph`, :func:`bullet_list`, :func:`banner` - small blocks.

Every piece of text goes through :func:`esc`; the only markup is built here.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from auditor import __version__
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
from auditor.result import SEVERITIES, AuditResult

if TYPE_CHECKING:
    from auditor.report.drawing import Plot

CSS = """
:root { color-scheme: light; --ink: #1d2329; --muted: #5b6670; --rule: #d7dde2;
  --none: #1e7b34; --low: #8a6d00; --moderate: #b35300; --high: #b3261e; }
* { box-sizing: border-box; }
html { -webkit-text-size-adjust: 100%; }
body { margin: 0 auto; max-width: 62rem; padding: 1.5rem 1.5rem 3rem; color: var(--ink);
  font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
  background: #fff; }
header h1 { font-size: 1.6rem; margin: 0 0 .2rem; overflow-wrap: anywhere; }
header p.meta { color: var(--muted); margin: 0 0 1rem; font-size: .9rem; }
h2 { font-size: 1.25rem; margin: 2.2rem 0 .6rem; padding-bottom: .25rem;
  border-bottom: 2px solid var(--rule); }
h3 { font-size: 1.02rem; margin: 1.4rem 0 .4rem; }
nav.toc { font-size: .9rem; background: #f5f7f8; border: 1px solid var(--rule); border-radius: 6px;
  padding: .5rem .9rem; margin: 1rem 0; }
nav.toc ol { margin: 0; padding-left: 1.2rem; columns: 2; column-gap: 2rem; }
nav.toc a { color: #0b5cad; text-decoration: none; }
.banner { border-left: 6px solid var(--sev); background: color-mix(in srgb, var(--sev) 8%, white);
  padding: .8rem 1rem; border-radius: 4px; margin: .8rem 0 1rem; }
.banner .verdict { color: var(--sev); }
.banner p { margin: 0; font-size: 1.05rem; }
.sev-none { --sev: var(--none); } .sev-low { --sev: var(--low); }
.sev-moderate { --sev: var(--moderate); } .sev-high { --sev: var(--high); }
p.summary { margin: .4rem 0 .8rem; }
p.note { color: var(--muted); font-size: .9rem; margin: .3rem 0 .8rem; }
p.not-measured { background: #f5f7f8; border: 1px dashed #aab4bd; padding: .5rem .8rem;
  border-radius: 4px; }
ul.recs li, ul.warnings li { margin: .25rem 0; }
ul.warnings li::marker { content: "⚠ "; color: var(--moderate); }
.table-wrap { overflow-x: auto; margin: .4rem 0 1rem; }
table { border-collapse: collapse; font-size: .88rem; min-width: 50%; }
caption { caption-side: bottom; text-align: left; color: var(--muted); font-size: .82rem;
  padding-top: .3rem; }
th, td { border-bottom: 1px solid var(--rule); padding: .3rem .7rem; text-align: left;
  vertical-align: top; }
th { background: #f5f7f8; font-weight: 600; border-bottom: 2px solid #b9c2ca; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
td.num { white-space: nowrap; }
th { white-space: normal; overflow-wrap: normal; }
th .word { white-space: nowrap; }
td.wrap { overflow-wrap: anywhere; }
td.nowrap { white-space: nowrap; }
tbody tr:nth-child(even) td { background: #fafbfc; }
.badge { display: inline-block; padding: 0 .5rem; border-radius: 999px; font-size: .8rem;
  font-weight: 600; border: 1px solid currentColor; white-space: nowrap; }
.badge-holds { color: var(--high); } .badge-violated { color: var(--none); }
.badge-unknown { color: var(--muted); }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(26rem, 1fr)); column-gap: 2rem; }
.grid table { width: 100%; }
figure { margin: 1rem 0 1.4rem; }
figure img { display: block; max-width: 100%; height: auto; border: 1px solid var(--rule);
  border-radius: 4px; }
figcaption { color: var(--muted); font-size: .85rem; margin-top: .3rem; }
footer { margin-top: 3rem; color: var(--muted); font-size: .82rem;
  border-top: 1px solid var(--rule); padding-top: .6rem; }
code { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: .85em; }
@media print {
  @page { margin: 1.5cm; }
  body { max-width: none; padding: 0; font-size: 10.5pt; }
  nav.toc { display: none; }
  h2 { break-after: avoid; page-break-after: avoid; }
  h3, p.note { break-after: avoid; page-break-after: avoid; }
  figure, table, .banner { break-inside: avoid; page-break-inside: avoid; }
  figure img { max-height: 9.5cm; width: auto; border: none; }
  .table-wrap { overflow: visible; }
  * { -webkit-print-color-adjust: exact; print-color-adjust: exact; }
}
"""
"""The report's styles (screen and print), inlined in every page."""


def esc(value: Any) -> str:
    """``value`` as escaped text, safe in element content and in quoted attributes."""
    return html.escape(str(value), quote=True)


@dataclass(frozen=True)
class Section:
    """One ``<section>``: an anchor id, a heading and its body (already-escaped HTML)."""

    id: str
    title: str
    body: str


def paragraph(text: str, css_class: str | None = None) -> str:
    """A ``<p>`` of escaped text."""
    attr = f' class="{esc(css_class)}"' if css_class else ""
    return f"<p{attr}>{esc(text)}</p>\n"


def bullet_list(items: Iterable[str], css_class: str | None = None) -> str:
    """A ``<ul>`` of escaped items (empty string for no items)."""
    items = list(items)
    if not items:
        return ""
    attr = f' class="{esc(css_class)}"' if css_class else ""
    return f"<ul{attr}>\n" + "".join(f"<li>{esc(item)}</li>\n" for item in items) + "</ul>\n"


def banner(severity: str, verdict: str, text: str) -> str:
    """A coloured verdict box: ``severity`` picks the colour (none/low/moderate/high);
    ``verdict`` is set in bold before ``text``."""
    sev = severity if severity in SEVERITIES else "moderate"
    return (
        f'<div class="banner sev-{sev}" role="status"><p>'
        f'<strong class="verdict">{esc(verdict)}</strong>'
        f"{': ' if text else ''}{esc(text)}</p></div>\n"
    )


def table_html(
    table: Table,
    *,
    badge_column: int | None = None,
    wrap_columns: Sequence[int] = (),
    nowrap_columns: Sequence[int] = (),
) -> str:
    """A :class:`~auditor.report.content.Table` as an escaped ``<table>`` in a scroll box.

    ``badge_column`` renders that column's cells as status badges (holds / violated /
    unknown, text kept so the status never depends on colour); ``wrap_columns`` may
    break anywhere (long file paths, long values); ``nowrap_columns`` never break.
    """
    def cls(i: int) -> str:
        names = ["num"] if table.is_numeric(i) else []
        names += ["wrap"] if i in wrap_columns else []
        names += ["nowrap"] if i in nowrap_columns else []
        return f' class="{" ".join(names)}"' if names else ""

    head = "".join(f'<th scope="col"{cls(i)}>{_header(h)}</th>' for i, h in enumerate(table.headers))
    body = []
    for row in table.rows:
        cells = []
        for i, cell in enumerate(row):
            if i == badge_column:
                cells.append(f'<td><span class="badge badge-{esc(cell)}">{esc(cell)}</span></td>')
            else:
                cells.append(f"<td{cls(i)}>{esc(cell)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>\n")
    caption = f"<caption>{esc(table.caption)}</caption>" if table.caption else ""
    return (
        f'<div class="table-wrap"><table>{caption}<thead><tr>{head}</tr></thead>\n'
        f"<tbody>\n{''.join(body)}</tbody></table></div>\n"
    )


def _header(text: str) -> str:
    """A column header that may wrap between words, never inside one: narrow columns
    keep a wide table inside the page, and "norm-aware" never breaks at its hyphen."""
    return " ".join(f'<span class="word">{esc(w)}</span>' if "-" in w else esc(w) for w in text.split(" "))


def figure_html(
    plot: Plot | None = None, *, png: bytes | None = None, alt: str = "", caption: str = ""
) -> str:
    """An inline ``<figure>``: a :class:`~auditor.report.plots.Plot`, or ``png`` bytes with alt text."""
    from auditor.report.drawing import png_data_uri

    if plot is not None:
        png, alt, caption = plot.png, plot.alt, caption or plot.alt
    if png is None:
        raise ValueError("figure_html needs a Plot or png bytes")
    cap = f"<figcaption>{esc(caption)}</figcaption>" if caption else ""
    return f'<figure><img src="{png_data_uri(png)}" alt="{esc(alt)}">{cap}</figure>\n'


def page(
    title: str, sections: Sequence[Section], *, lead: str = "", subtitle: str = "", footer: str = ""
) -> str:
    """A complete, self-contained HTML document.

    ``lead`` is HTML placed before the contents list (e.g. a :func:`banner`);
    ``subtitle`` and ``footer`` are plain text (escaped). The footer defaults to the
    tool name and version.
    """
    toc = "".join(f'<li><a href="#{esc(s.id)}">{esc(s.title)}</a></li>' for s in sections)
    nav = f'<nav class="toc" aria-label="Contents"><ol>{toc}</ol></nav>\n' if len(sections) > 1 else ""
    body = "".join(
        f'<section id="{esc(s.id)}">\n<h2>{esc(s.title)}</h2>\n{s.body}</section>\n' for s in sections
    )
    foot = footer or f"Generated by popaudit {__version__}."
    sub = f'<p class="meta">{esc(subtitle)}</p>' if subtitle else ""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f'<meta name="generator" content="popaudit {esc(__version__)}">\n'
        f"<title>{esc(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n"
        f"<header>\n<h1>{esc(title)}</h1>\n{sub}\n</header>\n"
        f"<main>\n{lead}"
        + f"{nav}{body}</main>\n<footer><p>{esc(foot)}</p></footer>\n</body>\n</html>\n"
    )


def block_html(block: Block) -> str:
    """One block as escaped HTML."""
    if isinstance(block, Paragraph):
        if block.role == "title":
            return f"<p><strong>{esc(block.text)}</strong></p>\n"
        return paragraph(block.text, PARAGRAPH_CLASS.get(block.role))
    if isinstance(block, Heading):
        return f"<h3>{esc(block.text)}</h3>\n"
    if isinstance(block, Table):
        title = f"<h3>{esc(block.title)}</h3>\n" if block.title else ""
        return title + table_html(block, badge_column=block.badge, wrap_columns=block.wrap, nowrap_columns=block.nowrap)
    if isinstance(block, Bullets):
        return bullet_list(block.items, BULLETS_CLASS.get(block.role))
    if isinstance(block, KeyValues):
        title = f"<h3>{esc(block.title)}</h3>\n" if block.title else ""
        return title + table_html(Table(("", ""), block.rows, (False, True)), wrap_columns=(1,))
    if isinstance(block, Figure):
        return figure_html(png=block.png(), alt=block.alt, caption=block.alt)
    if isinstance(block, Headline):
        return banner(block.severity, block.phrase, block.evidence + ".")
    if isinstance(block, Group):
        inner = "".join(block_html(child) for child in block.blocks)
        # Side by side: the many small detail tables sit in columns, not in one long one.
        return f'<div class="grid">\n{inner}</div>\n' if block.side_by_side else f"<div>{inner}</div>\n"
    raise TypeError(f"the html format has no rendering for {type(block).__name__}")


PARAGRAPH_CLASS = {"summary": "summary", "note": "note", "missing": "not-measured", "warning": "note"}
"""The CSS class of each paragraph role (none: plain text)."""
BULLETS_CLASS = {"recommendations": "recs", "warnings": "warnings"}


def document_html(document: Document) -> str:
    """``document`` as a complete, self-contained page."""
    sections = [
        Section(s.key, s.title, "".join(block_html(block) for block in s.blocks)) for s in document.sections
    ]
    subtitle = ""
    if document.subtitle:
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        subtitle = f"{document.subtitle} · generated {stamp} · popaudit {__version__}"
    lead = "".join(block_html(block) for block in document.lead)
    return page(document.title, sections, lead=lead, subtitle=subtitle, footer=document.footer)


class HtmlRenderer:
    """``--format html``: a self-contained page with tables and inline plots."""

    name = "html"
    suffix = ".html"
    description = "self-contained HTML page with plots (inline CSS and images, no scripts)"

    def render(self, result: AuditResult, context: RenderContext) -> str:
        """The audit's whole page as a string."""
        return self.render_document(audit_document(result), context)

    def render_document(self, document: Document, context: RenderContext) -> str:
        """``document``'s whole page as a string (``context`` is not needed)."""
        return document_html(document)
