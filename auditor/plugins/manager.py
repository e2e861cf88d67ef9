"""The plugin manager: built-ins, installed entry points and ``--plugin`` files.

Built-in features register through the same hooks as third-party plugins, so the
registry seen by ``check`` is always ``get_plugin_manager(...)``. Nothing here runs at
import time: a command builds the manager when it needs one, so ``popaudit --help``
imports no built-in plugin and no ``--plugin`` file (installed plugins are imported to
list the commands they add).

Plugin names in the manager say where a plugin came from: ``builtin:<area>`` for the
modules in :data:`BUILTIN_PLUGINS`, the entry-point name for installed packages (group
``popaudit``) and ``file:<path>`` for ``--plugin PATH`` files.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.util
import inspect
import linecache
import re
import signal
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

import pluggy

from auditor import hookspecs
from auditor.errors import InputError, PluginError, Terminated
from auditor.io import require_regular_file
from auditor.plugin_names import ENTRY_POINT_GROUP as ENTRY_POINT_GROUP  # defined once, light
from auditor.plugin_names import PROJECT as PROJECT
from auditor.plugin_names import installed_entry_points

HOOK_PREFIX = "popaudit_"
BUILTIN_PREFIX = "builtin:"
FILE_PREFIX = "file:"
BUILTIN_PLUGINS = (
    "auditor.loading.builtin",
    "auditor.metrics.builtin_measures",
    "auditor.report.builtin",
    "auditor.train.plugin",
)

PLUGIN_FAILURES = (BaseException,)
"""What plugin code may raise and popaudit catches: anything (a plugin that calls
``sys.exit(0)``, raises ``GeneratorExit`` or a bare ``BaseException`` at import or in a
hook must not end the run with success or a traceback), except Ctrl-C, which every
handler passes on through :func:`reraise_interrupt`."""


def reraise_interrupt(exc: BaseException) -> None:
    """Re-raise ``exc`` when it is a KeyboardInterrupt that may be Ctrl-C, or a Terminated
    that may be SIGTERM (the CLI's handler raises it): the user stopping the run, not the
    plugin failing. Where SIGINT is ignored (the child process ``check`` and ``mitigate``
    run plugin code in, pool workers, a background job) no Ctrl-C can raise one, nor
    SIGTERM a Terminated where no handler of it is installed: the plugin raised it, and
    it fails as any other exception does, named."""
    if isinstance(exc, Terminated):
        if _signal_raises(signal.SIGTERM):
            raise exc
    elif isinstance(exc, KeyboardInterrupt) and _signal_raises(signal.SIGINT):
        raise exc


def _signal_raises(signum: int) -> bool:
    """Whether ``signum`` can raise in this process: SIGINT unless ignored (Python's own
    handler), SIGTERM where a Python handler is installed (the CLI's)."""
    try:
        handler = signal.getsignal(signum)
    except ValueError:  # not a signal this platform knows
        return True
    return callable(handler) if signum == signal.SIGTERM else handler is not signal.SIG_IGN


NUMPY_READ_ONLY = re.compile(r"(?:put: )?(?:assignment destination|output array|(?:sort |partition )?array"
                             r"(?: to be byte-swapped)?) is read-only")
"""Numpy's own errors for a write to a read-only array (``a[0] = 1``, ``a /= 2``, ``out=``,
``a.sort()``, ``put``, ``shuffle``...): only these are said as a write to a lent array; a
plugin's own error that mentions 'read-only' keeps its text."""


def describe_failure(exc: BaseException) -> str:
    """``Type: message`` of an exception raised by plugin code (sys.exit said as such)."""
    if isinstance(exc, SystemExit):
        return f"it called sys.exit({exc.code!r}); a plugin cannot end the run"
    if isinstance(exc, ValueError) and NUMPY_READ_ONLY.fullmatch(str(exc)):
        return (f"it tried to change, in place, an array popaudit lends it read-only{_failing_line(exc)}: the "
                "built-in figures read the same array; change a copy (numpy.array(...))")
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001  (a plugin's __str__ may raise too)
        text = "(its message cannot be shown)"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _failing_line(exc: BaseException) -> str:
    """`` (`<line>`, <file> line N)``: the Python line that raised ``exc`` ('' when unknown)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return ""
    code = tb.tb_frame.f_code
    text = linecache.getline(code.co_filename, tb.tb_lineno).strip()
    where = f"{Path(code.co_filename).name} line {tb.tb_lineno}"
    return f" (`{text}`, {where})" if text else f" ({where})"


def get_plugin_manager(
    plugin_paths: Iterable[Path] = (), *, entry_points: bool = True, builtins: bool = True
) -> pluggy.PluginManager:
    """A plugin manager with the built-ins, installed plugins and the given files.

    Every failure is a :class:`PluginError` naming the plugin: a built-in or entry point
    that does not import, a file that is missing or raises on import, a hook
    implementation whose arguments the spec does not have, and a misspelled hook (a
    ``popaudit_*`` function that is not a known hook, or a known one without
    ``@hookimpl``). ``builtins=False`` leaves the built-ins out (used to discover plugin
    commands without importing the heavy built-in modules).
    """
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(hookspecs)
    if builtins:
        for module_name in BUILTIN_PLUGINS:
            try:
                module = importlib.import_module(module_name)
            except PLUGIN_FAILURES as exc:
                reraise_interrupt(exc)
                raise PluginError(
                    f"built-in plugin {module_name} failed to import: {describe_failure(exc)}"
                ) from exc
            _register(pm, module, f"{BUILTIN_PREFIX}{module_name.rsplit('.', 2)[-2]}")
    if entry_points:
        _load_entry_points(pm)
    seen: set[Path] = {Path(f).resolve() for f in _registered_files(pm)}
    for path in plugin_paths:
        path = Path(path)
        resolved = path.resolve()
        if resolved in seen:  # the same file twice, or a file already installed
            continue
        seen.add(resolved)
        _register(pm, load_plugin_file(path), f"{FILE_PREFIX}{path}")
    for name, plugin in pm.list_name_plugin():
        _check_hook_names(pm, name, plugin)
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        raise PluginError(
            f"plugin {pm.get_name(exc.plugin)!r} implements an unknown hook: {exc}"
        ) from exc
    return pm


def check_plugin_file(path: Path) -> Path:
    """``path`` when it can be a plugin file (a regular ``.py`` file); PluginError
    otherwise. Nothing is imported."""
    path = Path(path)
    try:
        require_regular_file(path, "plugin file")
    except InputError as exc:
        raise PluginError(str(exc)) from None
    if path.suffix != ".py":
        raise PluginError(f"plugin file {path} is not a Python file (.py)")
    return path


def load_plugin_file(path: Path) -> ModuleType:
    """Import a single-file plugin given with ``--plugin PATH``.

    The module is cached under a name derived from the resolved path and reused while
    the file is unchanged, so building several managers in one process imports it once.
    """
    path = check_plugin_file(path)
    resolved = path.resolve()
    stat = resolved.stat()
    digest = hashlib.sha1(str(resolved).encode()).hexdigest()[:12]
    stem = "".join(ch if ch.isalnum() else "_" for ch in path.stem)
    module_name = f"popaudit_plugin_{stem}_{digest}"
    stamp = (stat.st_mtime_ns, stat.st_size)
    cached = sys.modules.get(module_name)
    if cached is not None and getattr(cached, "__popaudit_stamp__", None) == stamp:
        return cached
    spec = importlib.util.spec_from_file_location(module_name, resolved)
    if spec is None or spec.loader is None:
        raise PluginError(f"cannot import plugin file {path}")
    module = importlib.util.module_from_spec(spec)
    # Registered before executing so dataclasses, pickling and torch can find the module.
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except PLUGIN_FAILURES as exc:
        reraise_interrupt(exc)
        del sys.modules[module_name]
        raise PluginError(f"plugin {path} failed to import: {describe_failure(exc)}") from exc
    module.__popaudit_stamp__ = stamp  # type: ignore[attr-defined]
    return module


def hook_names() -> tuple[str, ...]:
    """Names of every hook popaudit specifies (``popaudit_*``)."""
    return tuple(
        sorted(
            name
            for name, obj in vars(hookspecs).items()
            if name.startswith(HOOK_PREFIX) and callable(obj)
        )
    )


def _register(pm: pluggy.PluginManager, plugin: object, name: str) -> None:
    try:
        pm.register(plugin, name=name)
    except pluggy.PluginValidationError as exc:
        detail = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        raise PluginError(f"plugin {name!r} has an invalid hook implementation: {detail}") from exc
    except ValueError as exc:  # pluggy: the name or the object is registered already
        raise PluginError(f"plugin {name!r} cannot be registered: {exc}") from exc


def _load_entry_points(pm: pluggy.PluginManager) -> None:
    """Load the ``popaudit`` entry points one by one, so a failure names its package."""
    seen: set[str] = set()
    for ep in installed_entry_points():
        if ep.name in seen:
            continue
        seen.add(ep.name)
        dist = getattr(ep, "dist", None)
        where = f"entry point {ep.name!r} ({ep.value}" + (f", package {dist.name}" if dist else "") + ")"
        try:
            pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP, name=ep.name)
        except pluggy.PluginValidationError as exc:
            detail = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
            raise PluginError(f"installed plugin {where} has an invalid hook implementation: {detail}") from exc
        except PLUGIN_FAILURES as exc:
            reraise_interrupt(exc)
            raise PluginError(
                f"installed plugin {where} failed to load: {describe_failure(exc)}"
            ) from exc


def _registered_files(pm: pluggy.PluginManager) -> list[str]:
    return [f for _, plugin in pm.list_name_plugin() if (f := getattr(plugin, "__file__", None))]


def _check_hook_names(pm: pluggy.PluginManager, name: str, plugin: object) -> None:
    """Misspelled or unmarked hooks: pluggy silently ignores both."""
    known = set(hook_names())
    for attr in dir(plugin):
        if not attr.startswith(HOOK_PREFIX):
            continue
        obj = getattr(plugin, attr, None)
        if not callable(obj) or inspect.isclass(obj):
            continue
        if isinstance(plugin, ModuleType) and getattr(obj, "__module__", None) not in (
            plugin.__name__,
            None,
        ):
            continue  # imported from elsewhere, not defined by this plugin
        opts = pm.parse_hookimpl_opts(plugin, attr)
        spec_name = (opts.get("specname") if opts is not None else None) or attr
        if spec_name in known and opts is not None:
            continue
        if opts is not None and opts.get("optionalhook"):
            continue
        close = difflib.get_close_matches(spec_name, sorted(known), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        if spec_name not in known:
            raise PluginError(f"plugin {name!r} defines {attr}, which is not a popaudit hook{hint}")
        raise PluginError(
            f"plugin {name!r} defines {attr} without @hookimpl, so it would never be called; "
            "decorate it with auditor.hookspecs.hookimpl"
        )
