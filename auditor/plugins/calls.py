"""Calling hooks so that every failure names the plugin and the hook it failed in.

A plugin's own :class:`~auditor.errors.AuditError` keeps its class (and exit code) with
the plugin named in its message; anything else it raises, ``sys.exit`` included, becomes
a :class:`~auditor.errors.PluginError`.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import pluggy

from auditor.errors import AuditError, PluginError
from auditor.plugins.manager import BUILTIN_PREFIX, PLUGIN_FAILURES, describe_failure, hook_names, reraise_interrupt


def call_hook(pm: pluggy.PluginManager, hook_name: str, **kwargs: object) -> Any:
    """Call a hook; an exception inside a plugin names the plugin and the hook.

    A plugin's :class:`AuditError` keeps its class (and so its exit code) with the
    plugin and hook prefixed to its message; built-ins' errors pass unchanged, their
    messages already say what is wrong. Any other exception becomes a PluginError.
    """
    hook = _hook(pm, hook_name)
    try:
        return hook(**kwargs)
    except PLUGIN_FAILURES as exc:
        reraise_interrupt(exc)
        error = attribute_failure(hook_name, exc, _culprit(pm, hook_name, exc))
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
        except PLUGIN_FAILURES as exc:
            reraise_interrupt(exc)
            error = attribute_failure(hook_name, exc, impl.plugin_name)
            if error is exc:
                raise
            raise error from exc
        if value is not None:
            results.append(HookResult(impl.plugin_name, value))
    return results


def _hook(pm: pluggy.PluginManager, hook_name: str) -> Any:
    hook = getattr(pm.hook, hook_name, None)
    if hook is None or not hook.has_spec():
        raise PluginError(f"no such hook: {hook_name} (known: {', '.join(hook_names())})")
    return hook


def attribute_failure(hook_name: str, exc: BaseException, culprit: str | None) -> BaseException:
    """The exception to raise for ``exc`` raised by plugin ``culprit`` in ``hook_name``."""
    if isinstance(exc, AuditError):
        if culprit is None or culprit.startswith(BUILTIN_PREFIX) or isinstance(exc, PluginError):
            return exc
        if len(exc.args) == 1 and isinstance(exc.args[0], str):
            # Keep the class (exit code, batch status) and name the plugin in the message.
            exc.args = (f"plugin {culprit!r} (hook {hook_name}): {exc.args[0]}",)
        return exc
    who = repr(culprit) if culprit else "(unknown)"
    return PluginError(f"plugin {who} failed in hook {hook_name}: {describe_failure(exc)}")


def _culprit(pm: pluggy.PluginManager, hook_name: str, exc: BaseException) -> str | None:
    """Which plugin raised: the hook implementation whose frame is in the traceback."""
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code)
        tb = tb.tb_next
    impls = _hook(pm, hook_name).get_hookimpls()
    codes: dict[object, str] = {}
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
            return str(impl.plugin_name)
    return None


def as_list(result: HookResult, hook_name: str) -> list[Any]:
    if isinstance(result.value, (list, tuple)):
        return list(result.value)
    raise PluginError(
        f"plugin {result.plugin!r} returned {type(result.value).__name__} from hook {hook_name}; "
        "expected a list"
    )


def require_attributes(
    result: HookResult, hook_name: str, obj: object, attrs: tuple[str, ...], methods: tuple[str, ...]
) -> None:
    missing = [a for a in attrs if not isinstance(getattr(obj, a, None), str)]
    missing += [m for m in methods if not callable(getattr(obj, m, None))]
    if missing:
        raise PluginError(
            f"plugin {result.plugin!r} returned {obj!r} from hook {hook_name}, which lacks "
            f"{', '.join(missing)}"
        )
