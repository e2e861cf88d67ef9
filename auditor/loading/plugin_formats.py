"""The model formats plugins register through ``popaudit_model_formats``, checked and
placed before the built-in table (:mod:`auditor.loading.formats`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pluggy

from auditor.config import LoadOptions
from auditor.errors import AuditError, PluginError
from auditor.loading.formats import BUILTIN_FORMATS, detect_format
from auditor.plugin_api import ModelFormat, RowNorms, WriteJob, Written
from auditor.model import ModelBundle
from auditor.plugins.calls import as_list, hook_results
from auditor.plugins.manager import PLUGIN_FAILURES, describe_failure, reraise_interrupt

HOOK = "popaudit_model_formats"
T = TypeVar("T")


def plugin_formats(pm: pluggy.PluginManager) -> list[ModelFormat]:
    """Every format a plugin registered (:func:`registered_formats`), without owners."""
    return [fmt for fmt, _plugin in registered_formats(pm)]


def registered_formats(pm: pluggy.PluginManager) -> list[tuple[ModelFormat, str]]:
    """Every format a plugin registered, in pluggy's call order.

    PluginError, naming the plugin, for an answer that is not a list of
    :class:`ModelFormat`, a format with no reader or no way to tell its files apart
    (suffixes, magic bytes or a sniff), a suffix that is not lower case with its dot,
    and a name a built-in format or another plugin's already has."""
    taken = {f.name: "popaudit (built-in)" for f in BUILTIN_FORMATS}
    found: list[tuple[ModelFormat, str]] = []
    for result in hook_results(pm, HOOK):
        for fmt in as_list(result, HOOK):
            problem = _problem(fmt)
            if problem is not None:
                raise PluginError(f"plugin {result.plugin!r} returned {fmt!r} from hook {HOOK}: {problem}")
            if fmt.name in taken:
                raise PluginError(
                    f"two model formats are named {fmt.name!r}: one from {taken[fmt.name]}, one from plugin "
                    f"{result.plugin!r}"
                )
            taken[fmt.name] = f"plugin {result.plugin!r}"
            found.append((fmt, result.plugin))
    return found


def model_formats(pm: pluggy.PluginManager) -> list[ModelFormat]:
    """The whole table: plugins' formats first, then the built-in ones."""
    return [*plugin_formats(pm), *BUILTIN_FORMATS]


def read_plugin_format(pm: pluggy.PluginManager, path: Path, options: LoadOptions) -> ModelBundle | None:
    """``path`` read by the reader of the plugin format that claims it; None when none
    does or its reader passes. What the reader raises names its plugin."""
    owners = registered_formats(pm)
    fmt = detect_format(path, [f for f, _ in owners]) if owners and path.is_file() else None
    if fmt is None or fmt.read is None:
        return None
    read, owner = fmt.read, _owner(owners, fmt)
    bundle = _attributed(owner, f"format {fmt.name!r}: its reader (read) failed on {path}", lambda: read(path, options))
    if bundle is not None and not isinstance(bundle, ModelBundle):
        raise PluginError(f"the reader of plugin {owner!r}'s format {fmt.name!r} returned "
                          f"{type(bundle).__name__} for {path}, not a ModelBundle")
    return bundle


def write_model_format(pm: pluggy.PluginManager, fmt: ModelFormat, job: WriteJob) -> Written:
    """``job`` written by ``fmt``'s writer; what it raises (or a result that is not a
    :class:`Written`) names its plugin (built-in formats' writers are called as they are)."""
    assert fmt.write is not None
    write = fmt.write
    owner = _owner(registered_formats(pm), fmt)
    if owner is None:
        return write(job)
    written = _attributed(owner, f"format {fmt.name!r}: its writer (write) failed rescaling {job.source}",
                          lambda: write(job))
    if not isinstance(written, Written):
        raise PluginError(f"the writer of plugin {owner!r}'s format {fmt.name!r} returned "
                          f"{type(written).__name__}, not an auditor.loading.formats.Written")
    problem = _written_problem(written, job.n_items)
    if problem is not None:
        raise PluginError(f"the writer of plugin {owner!r}'s format {fmt.name!r} returned a Written whose {problem}")
    return written


def plugin_owner(pm: pluggy.PluginManager, fmt: ModelFormat) -> str | None:
    """The plugin that registered ``fmt``; None for a built-in format."""
    return _owner(registered_formats(pm), fmt)


def read_written(pm: pluggy.PluginManager, fmt: ModelFormat, path: Path, options: LoadOptions) -> ModelBundle:
    """``path``, which ``fmt``'s writer just wrote, read back by ``fmt``'s own reader (its
    name may not say its format: a temporary file); what the reader raises, or a result
    that is not a :class:`ModelBundle`, names its plugin."""
    assert fmt.read is not None
    read, owner = fmt.read, plugin_owner(pm, fmt)
    bundle = _attributed(owner, f"format {fmt.name!r}: its reader (read) failed reading back what its writer wrote",
                         lambda: read(path, options))
    if not isinstance(bundle, ModelBundle):
        raise PluginError(f"the reader of plugin {owner!r}'s format {fmt.name!r} returned "
                          f"{type(bundle).__name__} for what its writer wrote, not a ModelBundle")
    return bundle


def _written_problem(written: Written, n_items: int) -> str | None:
    """What is wrong with the fields of a writer's :class:`Written` (None: nothing): the
    sidecar records them, so each must be what it claims to be."""
    import numpy as np  # here: the format table is read without numpy

    norms = written.norms
    if not isinstance(norms, RowNorms):
        return f"norms is {type(norms).__name__}, not an auditor.plugin_api.RowNorms"
    for name in ("before", "after"):
        values = getattr(norms, name)
        if not isinstance(values, np.ndarray) or values.ndim != 1 or values.dtype.kind != "f":
            return f"norms.{name} is not a 1-D float array"
        if values.shape[0] != n_items:
            return f"norms.{name} holds {values.shape[0]} rows but check reads {n_items}"
        if not np.isfinite(values).all() or (values < 0).any():
            return f"norms.{name} holds NaN, infinite or negative norms"
    if not isinstance(written.dtype, str) or not written.dtype:
        return f"dtype is {written.dtype!r}, not the name of the table's dtype"
    if written.layout not in ("rows", "columns"):
        return f"layout is {written.layout!r}, not 'rows' or 'columns'"
    if not isinstance(written.notes, list) or not all(isinstance(n, str) for n in written.notes):
        return "notes is not a list of str"
    if written.format is not None and not isinstance(written.format, str):
        return f"format is {written.format!r}, not a str or None"
    return None


def _owner(owners: list[tuple[ModelFormat, str]], fmt: ModelFormat) -> str | None:
    return next((plugin for f, plugin in owners if f.name == fmt.name), None)  # names are unique


def _attributed(plugin: str | None, what: str, call: Callable[[], T]) -> T:
    """``call()`` (a plugin format's reader or writer); a failure names the plugin, the
    format, the function and the file (``what``), not the hook that registered the format,
    which ran fine. A plugin's AuditError keeps its class (exit code) with that prefix."""
    try:
        return call()
    except PLUGIN_FAILURES as exc:
        reraise_interrupt(exc)
        if plugin is None:
            raise
        if isinstance(exc, AuditError):
            if not isinstance(exc, PluginError) and len(exc.args) == 1 and isinstance(exc.args[0], str):
                exc.args = (f"plugin {plugin!r}, {what}: {exc.args[0]}",)
            raise
        raise PluginError(f"plugin {plugin!r}, {what}: {describe_failure(exc)}") from exc


def _problem(fmt: object) -> str | None:
    if not isinstance(fmt, ModelFormat):
        return "it is not an auditor.loading.formats.ModelFormat"
    if not fmt.name or not isinstance(fmt.name, str):
        return "it has no name"
    if fmt.kind is not None:
        return "a plugin format is read by its own reader: leave kind unset"
    if not callable(fmt.read):
        return "it has no reader (read)"
    if fmt.write is not None and not callable(fmt.write):
        return "its writer (write) is not callable"
    if not (fmt.suffixes or fmt.magic or fmt.sniff is not None):
        return "nothing tells its files apart: give suffixes, magic bytes or a sniff"
    bad = [s for s in fmt.suffixes if not (isinstance(s, str) and s.startswith(".") and s == s.lower())]
    if bad:
        return f"suffixes must be lower case and start with a dot, got {bad!r}"
    if any(not isinstance(m, bytes) or not m for m in fmt.magic):
        return "magic must be non-empty bytes"
    return None


__all__ = [
    "model_formats", "plugin_formats", "plugin_owner", "read_plugin_format", "read_written", "registered_formats",
    "write_model_format",
]  # fmt: skip
