"""The Markdown report (GitHub-flavoured), with plots written beside it.

For a report written to ``path/report.md`` the figures go to
``path/report_files/<name>.png`` (each written atomically) and are linked relatively,
so the folder can be moved or committed as a whole. Rendered to standard output
(``context.destination`` None) or to a file that is not a regular one (``/dev/null``,
``/dev/stdout``, a FIFO) there is nowhere to put images: they are left out and the
report says so.

Reusable layer for other Markdown reports (experiment and batch summaries):
:func:`md_escape`, :func:`md_table`, :func:`images_folder`, :func:`image_files` and
:func:`figure_paths`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from auditor import __version__
from auditor.errors import setting
from auditor.io import is_special_file
from auditor.report import accuracy as accuracy_view
from auditor.plugin_api import RenderContext
from auditor.report import content as c
from auditor.report.formatting import Table
from auditor.result import AuditResult

if TYPE_CHECKING:
    from auditor.report.plots import Plot, PlotSpec

_SPECIAL = re.compile(r"([\\`*_\[\]<>|~#])")


def md_escape(text: object) -> str:
    """``text`` on one line with Markdown's active characters backslash-escaped.

    Escaping ``<`` and ``>`` keeps raw HTML out; ``|`` keeps table cells intact.
    """
    return _SPECIAL.sub(r"\\\1", " ".join(str(text).split()))


def md_table(table: Table) -> str:
    """A :class:`~auditor.report.content.Table` as a GFM pipe table (numeric columns right-aligned)."""
    head = "| " + " | ".join(md_escape(h) for h in table.headers) + " |"
    rule = "|" + "|".join("---:" if table.is_numeric(i) else ":---" for i in range(len(table.headers))) + "|"
    rows = ["| " + " | ".join(md_escape(cell) if cell else " " for cell in row) + " |" for row in table.rows]
    caption = f"\n_{md_escape(table.caption)}_\n" if table.caption else ""
    return "\n".join([head, rule, *rows]) + "\n" + caption + "\n"


def bullets(items: Iterable[str]) -> str:
    """A Markdown bullet list of escaped items."""
    return "".join(f"- {md_escape(item)}\n" for item in items) + "\n"


def images_folder(destination: Path) -> Path:
    """Where the figures of a report written to ``destination`` go: ``<stem>_files``."""
    return destination.parent / f"{destination.stem}_files"


FIGURE_NAMES = ("norm_vs_frequency", "norm_by_decile", "exposure_lorenz", "head_share", "update_angles")
"""Every figure an audit report can have (:func:`auditor.report.plots.plot_specs`); its
file is ``<stem>_files/<name>.png``."""


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


def image_files(plots: Sequence[Plot], destination: Path) -> tuple[dict[Path, bytes], dict[str, str]]:
    """Each plot's PNG file beside ``destination`` and name -> relative link.

    Links are relative to the report's folder and URL-quoted.
    """
    folder = images_folder(destination)
    files: dict[Path, bytes] = {}
    links: dict[str, str] = {}
    for plot in plots:
        files[folder / f"{plot.name}.png"] = plot.png
        links[plot.name] = quote(f"{folder.name}/{plot.name}.png")
    return files, links


def _figures(plots: Sequence[Plot | PlotSpec], links: dict[str, str], section: str) -> str:
    out = ""
    for plot in plots:
        if plot.section == section and plot.name in links:
            out += f"![{md_escape(plot.alt)}]({links[plot.name]})\n\n_{md_escape(plot.title)}_\n\n"
    return out


def _not_measured(result: AuditResult, section: str) -> str:
    return f"_Not measured: {md_escape(c.not_measured_reason(result, section))}._\n\n"


def render_audit_markdown(
    result: AuditResult,
    plots: Sequence[Plot | PlotSpec],
    links: dict[str, str] | None,
    *,
    went_to: str = "standard output",
) -> str:
    """The Markdown report; ``links`` maps plot names to image paths (None: images omitted,
    with a note saying the report ``went_to`` where none can go, when ``plots`` is not
    empty)."""
    out: list[str] = [f"# popaudit report: {md_escape(c.model_name(result))}\n\n"]
    phrase, evidence = c.headline_parts(result)
    out.append(f"> **{md_escape(phrase)}**: {md_escape(evidence)}.\n\n")
    if links is None and plots:
        out.append(
            f"_Plots omitted: this report went to {md_escape(went_to)}; write it to a regular file "
            f"(`{setting('markdown')} PATH` or `{setting('output')} PATH`) to get the figures beside it._\n\n"
        )
    links = links or {}

    verdict = result.verdict
    out.append("## Verdict and recommendations\n\n")
    if verdict.summary:
        out.append(md_escape(verdict.summary) + "\n\n")
    out.append("_" + md_escape(c.SEVERITY_POINTER) + "_\n\n")
    if verdict.recommendations:
        out.append("### Recommendations\n\n" + bullets(verdict.recommendations))
    else:
        out.append("No recommendations: nothing to change.\n\n")
    if result.warnings:
        out.append("## Warnings\n\n" + bullets(result.warnings))

    out.append(f"## {c.SECTION_TITLES['frequency_norm']}\n\n")
    fn = result.frequency_norm
    if fn is not None:
        out.append(md_table(c.frequency_norm_table(fn)))
        out.append(_figures(plots, links, "frequency_norm"))
        if fn.deciles:
            out.append("### Norm by popularity decile\n\n" + md_table(c.deciles_table(fn)))
    else:
        out.append(_not_measured(result, "frequency_norm"))

    out.append(f"## {c.SECTION_TITLES['retrieval']}\n\n")
    retrieval = result.retrieval
    if retrieval is not None:
        out.append(
            "The same queries retrieved by dot product (what serving uses), by cosine (norms removed) "
            "and a most-popular baseline; dot / cosine above 1 means norms push popular items into "
            "the lists.\n\n"
        )
        out.append(md_table(c.retrieval_summary_table(retrieval)))
        for k, cut in c.sorted_cutoffs(retrieval):
            out.append(f"### Top-{k}\n\n" + md_table(c.cutoff_table(k, cut, retrieval.list_measures)))
        out.append(_figures(plots, links, "retrieval"))
        if retrieval.definitions:
            out.append("### Definitions used\n\n" + md_table(c.definitions_table(retrieval.definitions)))
    else:
        out.append(_not_measured(result, "retrieval"))

    out.append(f"## {c.SECTION_TITLES['accuracy']}\n\n")
    accuracy = result.accuracy
    if accuracy is not None:
        out.append(md_table(accuracy_view.summary_table(accuracy)))
        for k in sorted(accuracy.at):
            out.append(f"### Top-{k}\n\n" + md_table(accuracy_view.tradeoff_table(result, k)))
        if accuracy.changes:
            out.append(f"### Against dot at K={accuracy.quoted_k}\n\n" + md_table(accuracy_view.changes_table(accuracy)))
        out.append(_figures(plots, links, "accuracy"))
        if accuracy.recommendation:
            out.append(md_escape(accuracy.recommendation) + "\n\n")
    else:
        out.append(_not_measured(result, "accuracy"))

    out.append(f"## {c.SECTION_TITLES['conditions']}\n\n")
    if result.conditions:
        out.append(md_table(c.conditions_table(result)))
    else:
        out.append(_not_measured(result, "conditions"))

    out.append(f"## {c.SECTION_TITLES['probes']}\n\n")
    if result.probes is not None:
        for key, title, table in c.probes_tables(result.probes.to_dict()):
            out.append(f"### {md_escape(title)}\n\n" + md_table(table))
            if key == "update_angles":
                out.append(_figures(plots, links, "probes"))
        if result.probes.update is None:
            out.append(_figures(plots, links, "probes"))
    else:
        out.append(_not_measured(result, "probes"))

    if result.measures:
        out.append("## Additional measures (built-in and plugins)\n\n" + md_table(c.measures_table(result.measures)))

    out.append("## Inputs and settings\n\n### Inputs\n\n" + md_table(c.inputs_table(result.inputs)))
    if result.settings:
        out.append("### Settings\n\n" + md_table(c.settings_table(result.settings)))
    others = c.other_not_measured(result)
    if others:
        out.append("### Also not measured\n\n" + bullets(f"{key}: {why}" for key, why in others))
    out.append(f"---\n\nGenerated by popaudit {md_escape(__version__)}.\n")
    return "".join(out)


class MarkdownRenderer:
    """``--format markdown``: GitHub-flavoured Markdown, figures as PNGs beside the file."""

    name = "markdown"
    suffix = ".md"
    description = "GitHub-flavoured Markdown; plots written to <name>_files/ beside the report"

    def render(self, result: AuditResult, context: RenderContext) -> str:
        """The report text; its figures go to ``context.attachments`` when it is written
        to a regular file (``context.destination``)."""
        from auditor.report.plots import plot_specs

        specs = plot_specs(result)
        if context.destination is None or not has_figures(context.destination):
            # Standard output or a special file (/dev/null, a FIFO): nowhere to put
            # images, so name them as omitted without drawing them.
            went_to = "standard output" if context.destination is None else f"{context.destination}, not a regular file"
            return render_audit_markdown(result, specs, None, went_to=went_to)
        plots = [spec.render() for spec in specs]
        files, links = image_files(plots, Path(context.destination))
        context.attachments.update(files)
        return render_audit_markdown(result, plots, links)
