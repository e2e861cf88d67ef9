"""The report formats' registry: every renderer registered through ``popaudit_renderers``
(the built-in ones too, :mod:`auditor.report.builtin`), chosen by ``--format`` name.

A renderer turns an :class:`~auditor.result.AuditResult` (:func:`render`) or any report
:class:`~auditor.report.document.Document`, summaries included (:func:`render_document`),
into text or bytes; the CLI decides where that goes (the terminal, or files written
together and atomically: :func:`render_outputs`). A plugin that raises, calls
``sys.exit`` or returns something else is a :class:`~auditor.errors.PluginError` naming it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any
from contextlib import ExitStack
from pathlib import Path

import pluggy

from auditor.errors import AuditError, InputError, OutputError, PluginError, setting
from auditor.io import atomic_path
from auditor.output_guard import check_not_inputs, refuse_linked_folder
from auditor.plugin_api import RenderContext, Renderer
from auditor.plugins.manager import BUILTIN_PREFIX, PLUGIN_FAILURES, describe_failure, reraise_interrupt
from auditor.report.document import Document
from auditor.report.markdown import figure_paths
from auditor.result import AuditResult


def renderers(pm: pluggy.PluginManager) -> dict[str, Renderer]:
    """Every renderer registered through ``popaudit_renderers``, by ``--format`` name.

    Two renderers with the same name are a :class:`~auditor.errors.PluginError` naming
    both plugins; so is a hook that raises or returns something that is not a renderer.
    """
    return {name: renderer for name, (renderer, _plugin) in _registered(pm).items()}


def _registered(pm: pluggy.PluginManager) -> dict[str, tuple[Renderer, str]]:
    """Renderer name -> (renderer, name of the plugin that registered it)."""
    found: dict[str, tuple[Renderer, str]] = {}
    # Call each implementation on its own, in registration order (built-ins first), so a
    # clash or a failure names its plugin.
    for impl in pm.hook.popaudit_renderers.get_hookimpls():
        plugin = impl.plugin_name
        try:
            provided = impl.function()
        except PLUGIN_FAILURES as exc:  # a plugin cannot end the run, not even with exit(0)
            reraise_interrupt(exc)
            raise PluginError(
                f"plugin {plugin!r} failed in hook popaudit_renderers: {describe_failure(exc)}"
            ) from exc
        if provided is None:
            continue
        if not isinstance(provided, (list, tuple)):
            raise PluginError(
                f"plugin {plugin!r} returned a {type(provided).__name__} from popaudit_renderers; "
                "it must return a list of renderers"
            )
        for renderer in provided:
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
    return found


def render(
    result: AuditResult, fmt: str, pm: pluggy.PluginManager, context: RenderContext | None = None
) -> str | bytes:
    """``result`` rendered as ``fmt`` (the renderer's ``render``).

    An unknown ``fmt`` is an :class:`~auditor.errors.InputError` listing the known ones;
    a renderer that raises (or calls ``sys.exit``), or returns something other than str
    or bytes, is a PluginError naming its plugin.
    """
    renderer, plugin = _chosen(fmt, pm)
    return _call(lambda ctx: renderer.render(_lent(result, plugin), ctx), "render", fmt, plugin, context)


def render_document(
    document: Document, fmt: str, pm: pluggy.PluginManager, context: RenderContext | None = None
) -> str | bytes:
    """``document`` (an audit's or a summary's) rendered as ``fmt``, by the renderer's
    ``render_document``; errors as :func:`render`. A renderer without one renders
    audits only: for another document it is an InputError saying so."""
    renderer, plugin = _chosen(fmt, pm)
    method = getattr(renderer, "render_document", None)
    if not callable(method):
        raise InputError(
            f"the report format {fmt!r} (plugin {plugin!r}) cannot render a {document.kind} report: its "
            "renderer has no render_document method (it renders audits only)"
        )
    return _call(lambda ctx: method(_lent(document, plugin), ctx), "render_document", fmt, plugin, context)


def _lent(report: Any, plugin: str) -> Any:
    """What a plugin's renderer is given: a copy (the other formats render the original)."""
    if plugin.startswith(BUILTIN_PREFIX):
        return report
    from auditor.plugins.lending import lend_result

    return lend_result(report)


def _chosen(fmt: str, pm: pluggy.PluginManager) -> tuple[Renderer, str]:
    available = _registered(pm)
    if fmt not in available:
        raise InputError(f"unknown report format {fmt!r}; available: {', '.join(sorted(available))}")
    return available[fmt]


def _call(
    draw: Callable[[RenderContext], object], method: str, fmt: str, plugin: str, context: RenderContext | None
) -> str | bytes:
    """Run a renderer, its failures attributed to its plugin."""
    try:
        data = draw(context or RenderContext())
    except AuditError:
        raise
    except PLUGIN_FAILURES as exc:
        reraise_interrupt(exc)
        raise PluginError(
            f"renderer {fmt!r} of plugin {plugin!r} failed: {describe_failure(exc)}"
        ) from exc
    if not isinstance(data, (str, bytes)):
        raise PluginError(
            f"renderer {fmt!r} of plugin {plugin!r} returned {type(data).__name__} from {method}(); "
            "it must return the report as str or bytes"
        )
    return data


def planned_outputs(outputs: Mapping[str, tuple[str, Path | None]]) -> dict[str, Path | None]:
    """Every file the reports in ``outputs`` (what names it, e.g. ``--markdown``, to
    (format, path)) will write, by what names it: each report, and the figures a
    Markdown report puts beside a regular file (``r_files/*.png`` for ``r.md``), named
    "figure head_share.png of --markdown r.md". For :func:`~auditor.output_guard.check_not_inputs`
    before the audit runs, so that no output replaces another or an input.
    """
    files: dict[str, Path | None] = {label: path for label, (_fmt, path) in outputs.items()}
    for label, (fmt, path) in outputs.items():
        if fmt == "markdown" and path is not None:
            for figure in figure_paths(Path(path)):
                refuse_linked_folder(figure.parent, f"{label} {path}")
                files[f"figure {figure.name} of {label} {path}"] = figure
    return files


def render_outputs(
    result: AuditResult,
    outputs: Sequence[tuple[str, Path]],
    pm: pluggy.PluginManager,
    *,
    width: int = 100,
    labels: Sequence[str] | None = None,
    inputs: Mapping[str, Path | None] | None = None,
) -> list[Path]:
    """Render ``result`` in each (format, path) and write them all, or none
    (:func:`render_files`, then :func:`write_all`); returns the paths written. A path that
    is a file the audit read (:func:`audit_inputs`) or one of ``inputs`` is an InputError
    before anything is written."""
    files = render_files(result, outputs, pm, width=width, labels=labels, inputs=inputs)
    write_all(files, remove=stale_figures(outputs, files))
    return list(files)


def render_files(
    result: AuditResult,
    outputs: Sequence[tuple[str, Path]],
    pm: pluggy.PluginManager,
    *,
    width: int = 100,
    labels: Sequence[str] | None = None,
    inputs: Mapping[str, Path | None] | None = None,
) -> dict[Path, bytes]:
    """``result`` rendered in each (format, path): every file's content by path, the
    attachments included, in order, for :func:`write_all` (rendering, which may run a
    plugin's renderer, and writing can happen in different processes).

    Attachments go into a real folder beside their report, never through a symlink there
    (:func:`~auditor.output_guard.refuse_linked_folder`). Every report is rendered in memory, so a
    failing renderer leaves no output of this run behind. Every file (attachments
    included) must be distinct and none may be a file the audit read (:func:`audit_inputs`)
    or one of ``inputs``, files a caller adds (:func:`~auditor.output_guard.check_not_inputs`;
    ``labels``: what named each output, e.g. ``--json``, for its messages).
    """
    names = list(labels) if labels is not None else _default_labels([fmt for fmt, _path in outputs])
    if len(names) != len(outputs):
        raise ValueError(f"{len(names)} labels for {len(outputs)} outputs")
    files: dict[Path, bytes] = {}
    named: dict[str, Path | None] = {}
    for (fmt, path), name in zip(outputs, names):
        context = RenderContext(destination=Path(path), width=width)
        data = render(result, fmt, pm, context)
        files[Path(path)] = data if isinstance(data, bytes) else data.encode("utf-8")
        named[name] = Path(path)
        for attachment, content in context.attachments.items():
            if Path(attachment).parent != Path(path).parent:  # a folder popaudit makes, not one named
                refuse_linked_folder(Path(attachment).parent, f"{name} {path}")
            files[Path(attachment)] = content
            kind = "figure" if fmt == "markdown" else "file"
            named[f"{kind} {Path(attachment).name} of {name} {path}"] = Path(attachment)
    check_not_inputs(named, {**audit_inputs(result), **(inputs or {})})
    return files


def _default_labels(formats: Sequence[str]) -> list[str]:
    """What names each output in messages when the caller names none (messages add the
    path): ``the json report``, with its place among the outputs when a format is written twice."""
    twice = {fmt for fmt in formats if formats.count(fmt) > 1}
    return [f"the {fmt} report" + (f" (output {i + 1})" if fmt in twice else "") for i, fmt in enumerate(formats)]


def audit_inputs(result: AuditResult) -> dict[str, Path]:
    """The files ``result``'s audit read, by the setting that named each: what
    :func:`~auditor.audit.run_audit` recorded (``read_files``), else (a result built
    otherwise) the model, log and item-id files its ``inputs`` section names. Reports are
    never written over one of them, from the CLI or from Python."""
    if result.read_files:
        return dict(result.read_files)
    named = {"model": result.inputs.model, "interactions": result.inputs.interactions,
             "item_ids": result.inputs.item_ids}
    return {setting(name): Path(path) for name, path in named.items() if path}


def render_to(result: AuditResult, fmt: str, path: Path, pm: pluggy.PluginManager) -> None:
    """Render ``result`` as ``fmt`` and write it (with its attachments) to ``path``."""
    render_outputs(result, [(fmt, Path(path))], pm)


def stale_figures(outputs: Iterable[tuple[str, Path | None]], files: Mapping[Path, bytes]) -> list[Path]:
    """The figures an earlier run left in a Markdown report's figure folder that this run's
    ``files`` do not replace (a run without retrieval draws 2 of the 6): popaudit's own
    figure names only, regular files only (never a link), for :func:`write_all` to remove
    once the new files are in place, so the folder never shows another run's plots."""
    stale = []
    for fmt, path in outputs:
        if fmt != "markdown" or path is None:
            continue
        stale += [figure for figure in figure_paths(Path(path))
                  if figure not in files and figure.is_file() and not figure.is_symlink()]
    return stale


def write_all(files: Mapping[Path, bytes], remove: Iterable[Path] = ()) -> None:
    """Write every file, or (on any error) none: all temp files first, then the renames;
    then (only when all are in place) remove each of ``remove`` (:func:`stale_figures`)."""
    with ExitStack() as stack:
        for path, data in files.items():
            tmp = stack.enter_context(atomic_path(path))
            with open(tmp, "wb") as fh:
                fh.write(data)
    for path in remove:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise OutputError(f"cannot remove {path}, a figure of an earlier run: {exc.strerror or exc}") from exc


__all__ = [
    "RenderContext", "Renderer", "audit_inputs", "planned_outputs", "render", "render_document", "render_files", "render_outputs",
    "render_to", "renderers", "stale_figures", "write_all",
]  # fmt: skip
