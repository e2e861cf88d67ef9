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
import importlib.metadata
import importlib.util
import inspect
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

import pluggy

from auditor import hookspecs
from auditor.errors import AuditError, PluginError

PROJECT = "popaudit"
ENTRY_POINT_GROUP = PROJECT
HOOK_PREFIX = "popaudit_"
BUILTIN_PREFIX = "builtin:"
FILE_PREFIX = "file:"
CONDITION_IDS = ("C1", "C2", "C3", "C4", "C5")
BUILTIN_PLUGINS = (
    "auditor.loading.builtin",
    "auditor.report.builtin",
    "auditor.train.plugin",
)

PluginKind = Literal["builtin", "entrypoint", "file"]


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
            except Exception as exc:
                raise PluginError(
                    f"built-in plugin {module_name} failed to import: {type(exc).__name__}: {exc}"
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


def load_plugin_file(path: Path) -> ModuleType:
    """Import a single-file plugin given with ``--plugin PATH``.

    The module is cached under a name derived from the resolved path and reused while
    the file is unchanged, so building several managers in one process imports it once.
    """
    path = Path(path)
    if not path.is_file():
        raise PluginError(f"plugin file not found: {path}")
    if path.suffix != ".py":
        raise PluginError(f"plugin file {path} is not a Python file (.py)")
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
    except Exception as exc:
        del sys.modules[module_name]
        raise PluginError(f"plugin {path} failed to import: {type(exc).__name__}: {exc}") from exc
    module.__popaudit_stamp__ = stamp  # type: ignore[attr-defined]
    return module


def call_hook(pm: pluggy.PluginManager, hook_name: str, **kwargs: object) -> Any:
    """Call a hook; an exception inside a plugin names the plugin and the hook.

    A plugin's :class:`AuditError` keeps its class (and so its exit code) with the
    plugin and hook prefixed to its message; built-ins' errors pass unchanged, their
    messages already say what is wrong. Any other exception becomes a PluginError.
    """
    hook = _hook(pm, hook_name)
    try:
        return hook(**kwargs)
    except Exception as exc:
        error = _attribute(pm, hook_name, exc, _culprit(pm, hook_name, exc))
        if error is exc:
            raise
        raise error from exc


@dataclass(frozen=True)
class HookResult:
    """One plugin's answer to a hook (see :func:`hook_results`)."""

    plugin: str
    value: Any


def hook_results(pm: pluggy.PluginManager, hook_name: str, **kwargs: object) -> list[HookResult]:
    """Each plugin's non-None answer to a collecting hook, in pluggy's call order.

    Unlike :func:`call_hook` every answer carries the name of the plugin that gave it,
    so a malformed answer can be blamed precisely. Hook wrappers are not run.
    """
    hook = _hook(pm, hook_name)
    results: list[HookResult] = []
    # pluggy calls the last-registered (and tryfirst) implementations first.
    for impl in reversed(hook.get_hookimpls()):
        if impl.hookwrapper or impl.wrapper:
            continue
        try:
            value = impl.function(*[kwargs[arg] for arg in impl.argnames])
        except Exception as exc:
            error = _attribute(pm, hook_name, exc, impl.plugin_name)
            if error is exc:
                raise
            raise error from exc
        if value is not None:
            results.append(HookResult(impl.plugin_name, value))
    return results


def collect_measures(pm: pluggy.PluginManager) -> list[Any]:
    """Extra measures from every plugin; a name given twice is a PluginError.

    Each measure must have ``name``, ``description`` and ``compute``.
    """
    return [measure for _, measure in _measures(pm)]


def compute_measures(pm: pluggy.PluginManager, bundle: Any, stats: Any, result: Any) -> dict[str, Any]:
    """Every plugin measure's value for one audit, by name (for ``AuditResult.measures``).

    A measure whose ``compute`` raises is a PluginError naming the measure and its plugin
    (an AuditError keeps its class, with them prefixed to its message).
    """
    values: dict[str, Any] = {}
    for plugin, measure in _measures(pm):
        try:
            values[str(measure.name)] = measure.compute(bundle, stats, result)
        except Exception as exc:
            error = _attribute(pm, f"popaudit_measures (measure {measure.name!r})", exc, plugin)
            if error is exc:
                raise
            raise error from exc
    return values


def _measures(pm: pluggy.PluginManager) -> list[tuple[str, Any]]:
    measures: dict[str, tuple[str, Any]] = {}
    for result in hook_results(pm, "popaudit_measures"):
        for measure in _as_list(result, "popaudit_measures"):
            _require(result, "popaudit_measures", measure, ("name", "description"), ("compute",))
            name = str(measure.name)
            if name in measures:
                raise PluginError(
                    f"measure {name!r} is defined by both plugin {measures[name][0]!r} "
                    f"and plugin {result.plugin!r} (hook popaudit_measures)"
                )
            measures[name] = (result.plugin, measure)
    return list(measures.values())


@dataclass
class DeclaredConditions:
    """Condition verdicts declared by plugins (hook ``popaudit_condition_evidence``)."""

    conditions: dict[str, Any] = field(default_factory=dict)
    """Condition id (C1..C5) -> :class:`auditor.result.Condition`, ``details["source"]``
    naming the plugin."""
    warnings: list[str] = field(default_factory=list)
    """Declarations that lost to an earlier plugin's different verdict."""


def collect_condition_evidence(pm: pluggy.PluginManager, bundle: Any) -> DeclaredConditions:
    """Merge the plugins' declared verdicts for ``bundle``; the first plugin called wins.

    Values may be :class:`auditor.result.Condition` objects or mappings with ``name``,
    ``status`` and ``evidence``; keys must be C1..C5 and statuses holds/violated/unknown.
    """
    from auditor.result import Condition

    declared = DeclaredConditions()
    for result in hook_results(pm, "popaudit_condition_evidence", bundle=bundle):
        if not isinstance(result.value, Mapping):
            raise PluginError(
                f"plugin {result.plugin!r} returned {type(result.value).__name__} from hook "
                "popaudit_condition_evidence; expected a mapping such as {'C3': Condition(...)}"
            )
        for key, value in result.value.items():
            condition = _as_condition(result.plugin, key, value, Condition)
            previous = declared.conditions.get(key)
            if previous is None:
                declared.conditions[key] = condition
            elif previous.status != condition.status:
                declared.warnings.append(
                    f"{key}: plugin {result.plugin!r} declared {condition.status}, "
                    f"plugin {previous.details['source']!r} {previous.status}; kept the latter"
                )
    return declared


@dataclass(frozen=True)
class PluginInfo:
    """One loaded plugin, as ``popaudit plugins`` lists it."""

    name: str
    kind: PluginKind
    module: str | None
    path: str | None
    hooks: tuple[str, ...]
    distribution: str | None = None
    version: str | None = None

    @property
    def builtin(self) -> bool:
        return self.kind == "builtin"

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``popaudit plugins --json``)."""
        return {
            "name": self.name,
            "kind": self.kind,
            "builtin": self.builtin,
            "module": self.module,
            "path": self.path,
            "distribution": self.distribution,
            "version": self.version,
            "hooks": list(self.hooks),
        }


def describe_plugins(pm: pluggy.PluginManager) -> list[PluginInfo]:
    """Every registered plugin with the hooks it implements (built-ins first)."""
    dists = {id(plugin): dist for plugin, dist in pm.list_plugin_distinfo()}
    infos: list[PluginInfo] = []
    for name, plugin in pm.list_name_plugin():
        hooks = tuple(sorted(caller.name for caller in pm.get_hookcallers(plugin) or ()))
        kind: PluginKind
        if name.startswith(BUILTIN_PREFIX):
            kind = "builtin"
        elif name.startswith(FILE_PREFIX):
            kind = "file"
        else:
            kind = "entrypoint"
        dist = dists.get(id(plugin))
        module = getattr(plugin, "__name__", None) or type(plugin).__module__
        infos.append(
            PluginInfo(
                name=name,
                kind=kind,
                module=str(module) if module else None,
                path=getattr(plugin, "__file__", None) or _class_file(plugin),
                hooks=hooks,
                distribution=dist.metadata["name"] if dist is not None else None,
                version=dist.version if dist is not None else None,
            )
        )
    order = {"builtin": 0, "entrypoint": 1, "file": 2}
    return sorted(infos, key=lambda info: order[info.kind])


def hook_names() -> tuple[str, ...]:
    """Names of every hook popaudit specifies (``popaudit_*``)."""
    return tuple(
        sorted(
            name
            for name, obj in vars(hookspecs).items()
            if name.startswith(HOOK_PREFIX) and callable(obj)
        )
    )


def plugin_paths_from_argv(argv: Iterable[str]) -> tuple[Path, ...]:
    """``--plugin PATH`` / ``--plugin=PATH`` values in a raw command line, in order.

    The CLI reads these before click parses, so plugin commands can be found.
    """
    args = list(argv)
    paths: list[Path] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            break
        if arg == "--plugin" and i + 1 < len(args):
            paths.append(Path(args[i + 1]))
            i += 2
            continue
        if arg.startswith("--plugin="):
            paths.append(Path(arg.split("=", 1)[1]))
        i += 1
    return tuple(paths)


# --- internals -------------------------------------------------------------------------


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
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
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
        except Exception as exc:
            raise PluginError(
                f"installed plugin {where} failed to load: {type(exc).__name__}: {exc}"
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
        spec_name = (opts or {}).get("specname") or attr
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


def _hook(pm: pluggy.PluginManager, hook_name: str) -> Any:
    hook = getattr(pm.hook, hook_name, None)
    if hook is None or not hook.has_spec():
        raise PluginError(f"no such hook: {hook_name} (known: {', '.join(hook_names())})")
    return hook


def _attribute(pm: pluggy.PluginManager, hook_name: str, exc: Exception, culprit: str | None) -> Exception:
    """The exception to raise for ``exc`` raised by plugin ``culprit`` in ``hook_name``."""
    if isinstance(exc, AuditError):
        if culprit is None or culprit.startswith(BUILTIN_PREFIX) or isinstance(exc, PluginError):
            return exc
        if len(exc.args) == 1 and isinstance(exc.args[0], str):
            # Keep the class (exit code, batch status) and name the plugin in the message.
            exc.args = (f"plugin {culprit!r} (hook {hook_name}): {exc.args[0]}",)
        return exc
    who = repr(culprit) if culprit else "(unknown)"
    return PluginError(f"plugin {who} failed in hook {hook_name}: {type(exc).__name__}: {exc}")


def _culprit(pm: pluggy.PluginManager, hook_name: str, exc: BaseException) -> str | None:
    """Which plugin raised: the hook implementation whose frame is in the traceback."""
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code)
        tb = tb.tb_next
    impls = _hook(pm, hook_name).get_hookimpls()
    codes = {}
    for impl in impls:
        function = inspect.unwrap(impl.function)
        code = getattr(getattr(function, "__func__", function), "__code__", None)
        if code is not None:
            codes[code] = impl.plugin_name
    for code in frames:  # outermost first: the implementation pluggy called
        if code in codes:
            return codes[code]
    files = {code.co_filename for code in frames}
    for impl in reversed(impls):
        plugin_file = getattr(impl.plugin, "__file__", None)
        if plugin_file and plugin_file in files:
            return impl.plugin_name
    return None


def _as_list(result: HookResult, hook_name: str) -> list[Any]:
    if isinstance(result.value, (list, tuple)):
        return list(result.value)
    raise PluginError(
        f"plugin {result.plugin!r} returned {type(result.value).__name__} from hook {hook_name}; "
        "expected a list"
    )


def _require(
    result: HookResult, hook_name: str, obj: object, attrs: tuple[str, ...], methods: tuple[str, ...]
) -> None:
    missing = [a for a in attrs if not isinstance(getattr(obj, a, None), str)]
    missing += [m for m in methods if not callable(getattr(obj, m, None))]
    if missing:
        raise PluginError(
            f"plugin {result.plugin!r} returned {obj!r} from hook {hook_name}, which lacks "
            f"{', '.join(missing)}"
        )


def _as_condition(plugin: str, key: object, value: object, condition_type: type) -> Any:
    where = f"plugin {plugin!r} (hook popaudit_condition_evidence)"
    if key not in CONDITION_IDS:
        raise PluginError(f"{where} declared unknown condition {key!r}; use one of {', '.join(CONDITION_IDS)}")
    if isinstance(value, condition_type):
        condition = value
    elif isinstance(value, Mapping) and {"name", "status", "evidence"} <= set(value):
        condition = condition_type(
            name=str(value["name"]),
            status=value["status"],
            evidence=str(value["evidence"]),
            details=dict(value.get("details") or {}),
        )
    else:
        raise PluginError(f"{where} gave {key} as {value!r}; expected a Condition")
    if condition.status not in ("holds", "violated", "unknown"):
        raise PluginError(f"{where} gave {key} status {condition.status!r}; expected holds, violated or unknown")
    details = dict(condition.details)
    details["source"] = plugin
    return condition_type(condition.name, condition.status, condition.evidence, details)


def _class_file(plugin: object) -> str | None:
    try:
        return inspect.getsourcefile(type(plugin))
    except TypeError:
        return None
