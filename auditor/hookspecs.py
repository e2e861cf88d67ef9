"""Hook specifications of popaudit (pluggy project name and entry-point group ``popaudit``).

Built-in loaders, live-model builders and renderers register through these same hooks.
Every hook here is documented in ``plugins/README.md`` (a test checks it); the types the
hooks take and return are in :mod:`auditor.plugin_api`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pluggy

from auditor.plugin_api import ListMeasure, Measure, Renderer

if TYPE_CHECKING:  # click is a heavy import a plugin's hook never needs at runtime
    import click

    from auditor.config import LoadOptions
    from auditor.plugin_api import ModelFormat
    from auditor.model import LiveModel, ModelBundle
    from auditor.result import Condition

hookspec = pluggy.HookspecMarker("popaudit")
hookimpl = pluggy.HookimplMarker("popaudit")


@hookspec(firstresult=True)
def popaudit_load_model(path: Path, options: LoadOptions) -> ModelBundle | None:
    """Load the model at ``path``; return None when this plugin does not know the file.

    Called once per audit, plugins first and the built-in loader last. The returned
    bundle holds at least the item table; it may carry a live model (``bundle.live``).
    """


@hookspec
def popaudit_model_formats() -> list[ModelFormat]:
    """Return model formats (:class:`auditor.loading.formats.ModelFormat`): a name, the
    suffixes, magic bytes or sniff that tell its files apart, a reader, and optionally a
    writer through which ``popaudit mitigate`` writes the rescaled model in that format.

    Every plugin is asked. A file a plugin format claims (suffix first, then content) is
    read by its reader, before the ``popaudit_load_model`` loaders and the built-in
    formats (a reader that returns None lets them try); ``mitigate`` writes it with its
    writer. A name taken by a built-in format or another plugin's is a PluginError.
    """


@hookspec(firstresult=True)
def popaudit_live_model(bundle: ModelBundle) -> LiveModel | None:
    """Build a live encoder for a loaded bundle (so probes can step custom towers).

    Called after loading when ``bundle.live`` is None; return None to pass.
    """


@hookspec
def popaudit_condition_evidence(bundle: ModelBundle) -> dict[str, Condition] | None:
    """Declare verdicts for conditions C1-C5 that only the model's author knows.

    Return a mapping such as ``{"C3": Condition(...)}`` (keys C1..C5, status holds,
    violated or unknown), or None to pass. Every plugin is asked; declared evidence
    settles what popaudit leaves unknown and replaces what it reads from the tensors'
    structure or the CLI's declarations, and the report says where it came from. A verdict
    popaudit measured (a probe, the trained table, the optimizer state) or read from the
    recorded config stands against a declaration that contradicts it, with a warning.
    """


@hookspec
def popaudit_measures() -> list[Measure | ListMeasure]:
    """Return measures: :class:`Measure` (one value per audit, computed after the
    sections) or :class:`ListMeasure` (measured on every scoring's top-K lists at every K).

    The built-in list measures (head share, ARP, ..., novelty) and audit measures come
    through this hook too. Names must be unique across plugins and built-ins; numeric
    values become flat metrics.
    """


@hookspec
def popaudit_renderers() -> list[Renderer]:
    """Return report renderers (a new ``--format`` is a new renderer)."""


@hookspec
def popaudit_cli_commands() -> list[click.Command]:
    """Return extra click commands added to the ``popaudit`` group.

    Asked when a command name is not a built-in one (and for ``--help``): installed
    plugins and the ``--plugin`` files on the command line are consulted. A name that
    clashes with a built-in or another plugin's command is a PluginError.
    """


__all__ = ["ListMeasure", "Measure", "Renderer", "hookimpl", "hookspec"]
