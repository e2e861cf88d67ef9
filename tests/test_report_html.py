"""The HTML report: structure, inline images, no external URLs, content vs the result."""

from __future__ import annotations

import base64
import io
import re
from html.parser import HTMLParser
from pathlib import Path

import pluggy
import pytest
from PIL import Image

from auditor import __version__, hookspecs
from auditor.errors import InputError, PluginError
from auditor.plugins.renderers import RenderContext, render_to, renderers
from auditor.report import content as c
from auditor.report import formatting as f
from auditor.report.html import HtmlRenderer, Section, esc, page, table_html
from auditor.report.markdown import MarkdownRenderer
from report_samples import bare_result, full_result

VOID = {"meta", "img", "br", "hr", "link", "input", "col", "wbr", "source"}


class Doc(HTMLParser):
    """Parses a page, failing on bad nesting; collects tags, text by element and tables."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.tables: list[list[list[str]]] = []
        self._cell: list[str] | None = None
        self.errors: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag in VOID:
            return
        self.stack.append(tag)
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1] if self.stack else 'nothing'}")
            return
        self.stack.pop()
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)


def parse(document: str) -> Doc:
    doc = Doc()
    doc.feed(document)
    doc.close()
    assert doc.errors == [], doc.errors
    assert doc.stack == [], f"unclosed tags: {doc.stack}"
    return doc


@pytest.fixture(scope="module")
def full_html() -> str:
    return HtmlRenderer().render(full_result(), RenderContext())


def test_structure_is_valid_and_complete(full_html: str) -> None:
    assert full_html.startswith("<!DOCTYPE html>")
    doc = parse(full_html)
    names = [tag for tag, _ in doc.tags]
    for required in ("html", "head", "meta", "title", "style", "body", "header", "main", "footer"):
        assert required in names
    assert names.count("h1") == 1 and names.count("body") == 1
    assert "script" not in names and "link" not in names and "iframe" not in names
    # Every contents link points at a section that exists.
    ids = {attrs.get("id") for _, attrs in doc.tags}
    anchors = [attrs['href'] for tag, attrs in doc.tags if tag == "a"]
    assert anchors and all(a.startswith("#") and a[1:] in ids for a in anchors)
    assert "@media print" in full_html


def test_every_image_is_an_inline_png_that_decodes(full_html: str) -> None:
    doc = parse(full_html)
    images = [attrs for tag, attrs in doc.tags if tag == "img"]
    assert len(images) == 5
    for attrs in images:
        src = attrs["src"] or ""
        assert src.startswith("data:image/png;base64,")
        with Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1], validate=True))) as image:
            image.load()
            assert image.format == "PNG" and image.size[0] > 300
        assert attrs.get("alt")


def test_no_external_urls(full_html: str) -> None:
    doc = parse(full_html)
    for _tag, attrs in doc.tags:
        for name in ("src", "href", "action", "data", "poster"):
            value = attrs.get(name) or ""
            assert not re.match(r"^\s*(https?:|//|ftp:)", value, re.I), (name, value)
    for url in re.findall(r"url\(([^)]*)\)", full_html):
        assert not re.search(r"https?:|//", url)
    assert "http://" not in full_html and "https://" not in full_html


def test_text_is_escaped(full_html: str) -> None:
    doc = parse(full_html)
    assert "<script>" not in full_html
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; co" in full_html
    assert any("no live encoder <script>alert(1)</script> & co" in t for t in doc.text)


def _table_with(doc: Doc, header: list[str]) -> list[list[str]]:
    for table in doc.tables:
        if table and table[0] == header:
            return table[1:]
    raise AssertionError(f"no table with header {header}")


def test_sections_match_the_result(full_html: str) -> None:
    result = full_result()
    doc = parse(full_html)
    text = " ".join("".join(doc.text).split())
    # Headline: verdict, severity, ρ with CI, head shares, conditions.
    assert c.headline(result) in text
    fn = result.frequency_norm
    assert f"Spearman ρ = {fn.spearman:.2f}" in text
    assert f"95% CI {fn.spearman_ci[0]:.2f} to {fn.spearman_ci[1]:.2f}" in text
    assert "C1, C2 and C5 hold, C4 violated, C3 unknown" in text
    stats = dict(_table_with(doc, ["statistic", "value"]))
    assert stats["Spearman ρ"] == f"{fn.spearman:.3f}"
    assert stats["Kendall τ"] == f"{fn.kendall:.3f}"
    assert stats["Spearman p-value"] == "< 1e-300"  # scipy underflows to 0 here
    deciles = _table_with(doc, ["decile", "frequency range", "items", "median norm", "mean norm"])
    assert [row[0] for row in deciles] == [str(d.decile) for d in fn.deciles]
    assert [row[3] for row in deciles] == [f"{d.norm_median:.3f}" for d in fn.deciles]
    # Retrieval: one table per K, values and the dot/cosine ratio.
    per_k = [t[1:] for t in doc.tables if t and t[0] == ["measure", "dot product", "cosine", "dot / cosine", "most popular"]]
    assert len(per_k) == 2
    for rows, k in zip(per_k, (10, 100)):
        cut = result.retrieval.at[k]
        head = rows[0]
        assert head[1:] == [
            f"{100 * cut.dot['head_share_1pct']:.1f}%", f"{100 * cut.cosine['head_share_1pct']:.1f}%",
            f"{cut.dot['head_share_1pct'] / cut.cosine['head_share_1pct']:.2f}×",
            f"{100 * cut.popular['head_share_1pct']:.1f}%",
        ]
        gini = next(r for r in rows if r[0] == "Gini index of exposure")
        assert gini[1] == f"{cut.dot['gini']:.3f}"
    assert "recall@100 of the approximate index vs exact search" in text
    # Conditions: every id with its status.
    conditions = _table_with(doc, ["id", "condition", "status", "evidence"])
    assert {row[0]: row[2] for row in conditions} == {k: v.status for k, v in result.conditions.items()}
    statuses = [attrs.get("class") for tag, attrs in doc.tags if tag == "span" and "badge" in (attrs.get("class") or "")]
    assert statuses.count("badge badge-violated") == 1 and statuses.count("badge badge-holds") == 3
    # Probes, recommendations, warnings, measures, inputs, settings, version.
    assert "share within 90° ± 1°" in text and "89.9%" in text
    for recommendation in result.verdict.recommendations:
        assert " ".join(recommendation.split()) in text
    assert result.warnings[0] in text
    assert "my_plugin_score" in text
    assert "runs/2026-11/model with spaces.pt" in text
    settings = dict(_table_with(doc, ["setting", "value"]))
    assert settings["ks"] == "10, 100" and settings["queries.max_queries"] == "500"
    assert settings["index"] == "auto (ran: ivf)" and settings["seed"] == "0"
    assert dict(_table_with(doc, ["retrieval setting", "value"]))['index'] == "ivf"
    assert "probes.growth: the checkpoint has no optimizer state" in text
    assert f"popaudit {__version__}" in text


def test_missing_sections_say_why() -> None:
    result = bare_result()
    doc = parse(HtmlRenderer().render(result, RenderContext()))
    text = " ".join("".join(doc.text).split())
    for section in ("frequency_norm", "retrieval", "conditions"):
        assert f"Not measured: {result.not_measured[section]}." in text
    assert "Not measured: no reason was recorded by the audit." in text  # probes
    assert not [tag for tag, _ in doc.tags if tag == "img"]
    assert "frequency–norm correlation not measured; retrieval not measured; conditions not assessed" in text


def test_page_helpers_escape_and_align() -> None:
    table = f.Table(("name", "n"), (("<b>x</b>", "1,000"),), (False, True), caption="a & b")
    rendered = table_html(table)
    assert "&lt;b&gt;x&lt;/b&gt;" in rendered and '<td class="num">1,000</td>' in rendered
    assert "<caption>a &amp; b</caption>" in rendered
    document = page("T <1>", [Section("one", "One", "<p>x</p>\n"), Section("two", "Two & more", "")])
    doc = parse(document)
    assert "<title>T &lt;1&gt;</title>" in document and "Two &amp; more" in document
    assert [attrs['href'] for tag, attrs in doc.tags if tag == "a"] == ["#one", "#two"]
    assert esc('"q"') == "&quot;q&quot;"


class _Plugin:
    def __init__(self, *items: object) -> None:
        self.items = list(items)

    @hookspecs.hookimpl
    def popaudit_renderers(self) -> list[object]:
        return self.items


def _pm(*plugins: tuple[str, object]) -> pluggy.PluginManager:
    pm = pluggy.PluginManager("popaudit")
    pm.add_hookspecs(hookspecs)
    for name, plugin in plugins:
        pm.register(plugin, name=name)
    return pm


def test_render_to_writes_atomically(tmp_path: Path) -> None:
    pm = _pm(("mine", _Plugin(HtmlRenderer(), MarkdownRenderer())))
    target = tmp_path / "out" / "report.html"
    render_to(full_result(), "html", target, pm)
    first = target.read_text(encoding="utf-8")
    parse(first)
    render_to(bare_result(), "html", target, pm)
    assert "Not measured" in target.read_text(encoding="utf-8")
    assert sorted(p.name for p in target.parent.iterdir()) == ["report.html"]
    with pytest.raises(InputError, match="available: html, markdown"):
        render_to(bare_result(), "pdf", tmp_path / "r.pdf", pm)
    assert not (tmp_path / "r.pdf").exists()


def test_renderer_registry_names_clashing_plugins() -> None:
    pm = _pm(("first", _Plugin(HtmlRenderer())), ("second", _Plugin(MarkdownRenderer())))
    assert sorted(renderers(pm)) == ["html", "markdown"]
    clash = _pm(("alpha", _Plugin(HtmlRenderer())), ("beta", _Plugin(HtmlRenderer())))
    with pytest.raises(PluginError, match=r"'html'.*'alpha'.*'beta'"):
        renderers(clash)
    with pytest.raises(PluginError, match="'odd'.*not a renderer"):
        renderers(_pm(("odd", _Plugin(object()))))


def test_builtin_plugin_registers_all_four_formats() -> None:
    from auditor.plugins import get_plugin_manager

    available = renderers(get_plugin_manager(entry_points=False))
    assert {"console", "json", "markdown", "html"} <= set(available)
    assert available["html"].suffix == ".html" and available["markdown"].suffix == ".md"
