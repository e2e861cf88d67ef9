"""Report renderers, chosen by name through one registry that plugins extend.

A renderer turns an :class:`~auditor.result.AuditResult` into text or bytes; the CLI
decides where that goes (terminal or a file written atomically). Built-in renderers
register through the same ``popaudit_renderers`` hook as plugins.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pluggy

from auditor.errors import InputError, PluginError
from auditor.io import write_atomic
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


def renderers(pm: pluggy.PluginManager) -> dict[str, Renderer]:
    """Every renderer registered through ``popaudit_renderers``, by ``--format`` name.

    Two renderers with the same name are a :class:`~auditor.errors.PluginError` naming
    both plugins; so is a hook that raises or returns something that is not a renderer.
    """
    found: dict[str, tuple[Renderer, str]] = {}
    # Call each implementation on its own, in registration order (built-ins first), so a
    # clash or a failure names its plugin.
    for impl in pm.hook.popaudit_renderers.get_hookimpls():
        plugin = impl.plugin_name
        try:
            provided = impl.function()
        except Exception as exc:
            raise PluginError(
                f"plugin {plugin!r} failed in hook popaudit_renderers: {type(exc).__name__}: {exc}"
            ) from exc
        for renderer in provided or []:
            name = getattr(renderer, "name", None)
            if not isinstance(name, str) or not name or not callable(getattr(renderer, "render", None)):
                raise PluginError(
                    f"plugin {plugin!r} returned {renderer!r} from popaudit_renderers, which is not "
                    "a renderer (it needs a non-empty str name and a render method)"
                )
            if name in found:
                raise PluginError(
                    f"two renderers are named {name!r}: one from plugin {found[name][1]!r}, "
                    f"one from plugin {plugin!r}"
                )
            found[name] = (renderer, plugin)
    return {name: renderer for name, (renderer, _plugin) in found.items()}


def render_to(
    result: AuditResult,
    fmt: str,
    path: Path,
    pm: pluggy.PluginManager,
    *,
    color: bool = False,
    width: int = 100,
) -> None:
    """Render ``result`` as ``fmt`` and write it to ``path`` atomically.

    An unknown ``fmt`` is an :class:`~auditor.errors.InputError` listing the known ones.
    """
    available = renderers(pm)
    if fmt not in available:
        raise InputError(f"unknown report format {fmt!r}; available: {', '.join(sorted(available))}")
    path = Path(path)
    data = available[fmt].render(result, RenderContext(destination=path, color=color, width=width))
    write_atomic(path, data)
