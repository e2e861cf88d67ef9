"""A batch summary as each format renders it (console, HTML, Markdown), for tests that
assert the same words in every one."""

from __future__ import annotations

import html as html_text
import io
from pathlib import Path
from typing import Any

from rich.console import Console


def summary_pages(summary: Any) -> dict[str, str]:
    """``{"console", "html", "markdown"}``: the text of each rendering of ``summary``."""
    from auditor.report.batch_summary import batch_document, summary_console, summary_html
    from auditor.report.markdown import markdown_text

    buffer = io.StringIO()
    console = Console(file=buffer, width=400, color_system=None)
    for renderable in summary_console(summary, n_resumed=0, output=Path("r.parquet")):
        console.print(renderable)
    return {"console": buffer.getvalue(), "html": html_text.unescape(summary_html(summary)),
            "markdown": markdown_text(batch_document(summary), None).replace("\\_", "_")}
