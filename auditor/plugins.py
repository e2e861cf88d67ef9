"""The plugin manager: built-ins, installed entry points and ``--plugin`` files.

Built-in features register through the same hooks as third-party plugins, so the
registry seen by ``check`` is always ``get_plugin_manager(...)``.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

import pluggy

from auditor import hookspecs
from auditor.errors import PluginError

PROJECT = "popaudit"
BUILTIN_PLUGINS = (
    "auditor.loading.builtin",
    "auditor.report.builtin",
)


def get_plugin_manager(plugin_paths: Iterable[Path] = (), *, entry_points: bool = True) -> pluggy.PluginManager:
    """A plugin manager with the built-ins, installed plugins and the given files."""
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(hookspecs)
    for name in BUILTIN_PLUGINS:
        pm.register(importlib.import_module(name), name=f"builtin:{name.rsplit('.', 2)[-2]}")
    if entry_points:
        try:
            pm.load_setuptools_entrypoints(PROJECT)
        except Exception as exc:  # a broken installed plugin must name itself
            raise PluginError(f"an installed popaudit plugin failed to load: {exc}") from exc
    for path in plugin_paths:
        pm.register(load_plugin_file(Path(path)), name=f"file:{path}")
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        raise PluginError(f"plugin {exc.plugin_name!r} implements unknown hooks: {exc}") from exc
    return pm


def load_plugin_file(path: Path) -> ModuleType:
    """Import a single-file plugin given with ``--plugin PATH``."""
    if not path.is_file():
        raise PluginError(f"plugin file not found: {path}")
    module_name = f"popaudit_plugin_{path.stem}_{abs(hash(str(path.resolve()))):x}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise PluginError(f"cannot import plugin file {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[module_name]
        raise PluginError(f"plugin {path} failed to import: {type(exc).__name__}: {exc}") from exc
    return module


def call_hook(pm: pluggy.PluginManager, hook_name: str, **kwargs: object) -> object:
    """Call a hook; an exception inside a plugin becomes a PluginError naming it."""
    hook = getattr(pm.hook, hook_name)
    try:
        return hook(**kwargs)
    except PluginError:
        raise
    except Exception as exc:
        from auditor.errors import AuditError

        if isinstance(exc, AuditError):
            raise
        culprit = _culprit(pm, exc)
        raise PluginError(
            f"plugin {culprit} failed in hook {hook_name}: {type(exc).__name__}: {exc}"
        ) from exc


def _culprit(pm: pluggy.PluginManager, exc: BaseException) -> str:
    """Best guess of which plugin raised, from the traceback's module files."""
    tb = exc.__traceback__
    files: list[str] = []
    while tb is not None:
        files.append(tb.tb_frame.f_code.co_filename)
        tb = tb.tb_next
    for name, plugin in reversed(pm.list_name_plugin()):
        plugin_file = getattr(plugin, "__file__", None)
        if plugin_file and plugin_file in files:
            return repr(name)
    return "(unknown)"
