"""Report renderers, chosen by name through one registry that plugins extend.

A renderer turns an :class:`~auditor.result.AuditResult` into text or bytes; the CLI
decides where that goes (terminal or a file written atomically). Built-in renderers
register through the same ``popaudit_renderers`` hook as plugins.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from auditor.result import AuditResult


@dataclass(frozen=True)
class RenderContext:
    """Where and how a report is rendered."""

    destination: Path | None = None
    """The file being written (None: the terminal); renderers that write images put
    them beside it."""
    color: bool = False
    width: int = 100


class Renderer(Protocol):
    """One output format."""

    name: str
    """The ``--format`` value."""
    suffix: str
    """Default file extension, with the dot."""
    description: str

    def render(self, result: AuditResult, context: RenderContext) -> str | bytes:
        """The report as text (or bytes), ready to print or write."""
        ...
