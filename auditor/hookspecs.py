"""Hook specifications of popaudit (pluggy project name and entry-point group ``popaudit``).

Built-in loaders, live-model builders and renderers register through these same hooks.
Every hook here is documented in ``plugins/README.md`` (a test checks it).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pluggy

if TYPE_CHECKING:
    import click

    from auditor.config import LoadOptions
    from auditor.metrics.exposure import ListContext, Slots
    from auditor.model import ItemStats, LiveModel, ModelBundle
    from auditor.report import Renderer
    from auditor.result import Condition, MeasuredSections

hookspec = pluggy.HookspecMarker("popaudit")
hookimpl = pluggy.HookimplMarker("popaudit")


@hookspec(firstresult=True)
def popaudit_load_model(path: Path, options: LoadOptions) -> ModelBundle | None:
    """Load the model at ``path``; return None when this plugin does not know the file.

    Called once per audit, plugins first and the built-in loader last. The returned
    bundle holds at least the item table; it may carry a live model (``bundle.live``).
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
    overrides what popaudit infers, and the report says where it came from.
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


class Measure(Protocol):
    """An extra measure: a name, a description and ``compute``.

    ``compute`` returns a float (also a flat metric usable by ``--fail-on``) or any
    JSON-serialisable value; it is stored under ``measures[name]`` in the report.
    """

    name: str
    description: str

    def compute(self, bundle: ModelBundle, stats: ItemStats | None, result: MeasuredSections) -> Any:
        """The measure's value for one audit; ``result`` holds every measured section
        (the verdict is decided after the measures)."""
        ...


class ListMeasure(Protocol):
    """A measure of top-K lists, measured for every scoring (dot, cosine, popular,
    alpha_<a>) at every K like the built-in exposure measures.

    Its flat metrics are ``<name>_<scoring>@K`` and ``<name>_ratio@K`` (dot / cosine),
    usable by ``--fail-on`` and written as batch columns; the report lists it under
    ``label`` in every K's table and its ``definition`` under ``retrieval.definitions``.
    """

    name: str
    """An identifier (letters, digits, underscores), unique among all measures."""
    label: str
    """How report tables name it, e.g. ``"head share, top 1% of items"``."""
    display: str
    """``"pct"`` (a share shown as a percentage) or ``"numN"`` (N decimals, N 0-9)."""
    definition: str
    """What it measures, in words, starting with ``"<name>: "``."""

    def bind(self, context: ListContext) -> Callable[[Slots], float | None] | None:
        """Build the measure from one audit's statistics, once; the returned callable
        measures one scoring's lists at one K (an :class:`~auditor.metrics.exposure.Slots`:
        ``lists`` is the (n_queries, K) matrix of item rows, -1 for an empty slot).
        Return None when the audit lacks what the measure needs (its values are null)."""
        ...
