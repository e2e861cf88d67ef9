"""The built-in renderers, registered through the same hook as plugins' renderers.

The renderer modules are imported when the hook is called, not when the plugin
manager starts, so commands that render nothing never import matplotlib or rich.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from auditor.hookspecs import hookimpl

if TYPE_CHECKING:
    from auditor.plugin_api import Renderer


@hookimpl
def popaudit_renderers() -> list[Renderer]:
    """console, json, markdown and html."""
    from auditor.report.console import ConsoleRenderer
    from auditor.report.html import HtmlRenderer
    from auditor.report.json import JsonRenderer
    from auditor.report.markdown import MarkdownRenderer

    return [ConsoleRenderer(), JsonRenderer(), MarkdownRenderer(), HtmlRenderer()]
