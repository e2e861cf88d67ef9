"""Summaries (batch, experiments) rendered through the renderer registry, like audits.

Their formats are the built-in ones: no installed plugin or ``--plugin`` file runs just
to print a summary (``batch`` loads plugins only when a gate may name their measures).
"""

from __future__ import annotations


from auditor.cli._stdout import stdout_is_terminal, write_stdout
from auditor.plugin_api import RenderContext
from auditor.report.document import Document


def rendered(document: Document, fmt: str, context: RenderContext | None = None) -> str | bytes:
    """``document`` in the built-in format ``fmt``."""
    from auditor.plugins import get_plugin_manager
    from auditor.plugins.renderers import render_document

    return render_document(document, fmt, get_plugin_manager(entry_points=False), context)


def print_report(document: Document, *, width: int) -> None:
    """``document``'s terminal view on standard output, coloured on a terminal; ``width``
    0 lays it out for a log file (tables at their natural width, text unwrapped)."""
    text = rendered(document, "console", RenderContext(color=stdout_is_terminal(), width=width))
    write_stdout(text)
