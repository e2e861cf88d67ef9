"""The console report keeps the documented section order (QA F5): the verdict, what to do
and the warnings come before the first figure, as in Markdown and HTML."""

from __future__ import annotations

from auditor.plugin_api import RenderContext
from auditor.plugins import get_plugin_manager
from auditor.plugins.renderers import render
from report_samples import full_result


def test_console_says_warnings_and_what_to_do_before_the_figures() -> None:
    result = full_result()
    text = render(result, "console", get_plugin_manager(()), RenderContext(color=False, width=120))
    assert isinstance(text, str)
    warning = text.index("Warning: the IVF index recalled 96.2%")
    todo = text.index("What to do")
    first_figure = text.index("Frequency–norm correlation")
    retrieval = text.index("Retrieval skew")
    assert text.index(result.verdict.recommendations[0][:40]) < warning
    assert todo < warning < first_figure < retrieval
    markdown = render(result, "markdown", get_plugin_manager(()))
    assert isinstance(markdown, str)
    assert markdown.index("## Warnings") < markdown.index("Frequency")  # the order the console now shares
