"""What popaudit lends a plugin's hook of the model and statistics its built-in figures
read afterwards: read-only views, so that a plugin cannot change those figures silently.

A numpy array is lent as a view that raises on an in-place write (a plugin that tries
fails, named, as any plugin failure: :func:`auditor.plugins.manager.describe_failure`);
the torch tensors of ``state_dict``, which have no read-only mode, are watched through
their version counters instead (:func:`unchanged_tensors`). A view's read-only flag binds
numpy only: ``torch.from_numpy`` or ``torch.as_tensor`` of it writes through, so the lent
arrays are also checked after each plugin call (:class:`ArrayWatch`, a CRC-32 of their
bytes, around plugin calls only). Imported by the audit's numpy-loading modules only (it
loads numpy).
"""

from __future__ import annotations

import copy
import zlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import fields, is_dataclass, replace
from typing import Any, TypeVar

import numpy as np

from auditor.errors import PluginError
from auditor.plugin_api import read_only

Record = TypeVar("Record")


def lend(record: Record) -> Record:
    """A shallow copy of a dataclass ``record`` (a ``ModelBundle``, ``ItemStats``, ...) whose
    numpy arrays, and those of the dataclasses it holds (the interaction pairs), are
    read-only views; None stays None."""
    if record is None or not is_dataclass(record) or isinstance(record, type):
        return record
    changes: dict[str, Any] = {}
    for field in fields(record):
        if not field.init:
            continue
        value = getattr(record, field.name)
        lent = lend(value) if is_dataclass(value) and not isinstance(value, type) else read_only(value)
        if lent is not value:
            changes[field.name] = lent
    return replace(record, **changes) if changes else record


def lend_result(result: Record) -> Record:
    """A copy of a measured result for a plugin (nested dicts and arrays: copying is the
    read-only view there), so that what it changes is not what the verdict and the other
    reports read."""
    return copy.deepcopy(result)


def named_arrays(value: Any, name: str = "") -> dict[str, np.ndarray]:
    """The numpy arrays of a lent ``value`` by dotted name: a dataclass's fields (nested ones
    included), a tuple's parts (``profiles[0]``) or the array itself."""
    if isinstance(value, np.ndarray):
        return {} if value.dtype.hasobject else {name or "array": value}
    found: dict[str, np.ndarray] = {}
    if is_dataclass(value) and not isinstance(value, type):
        for field in fields(value):
            found.update(named_arrays(getattr(value, field.name, None), f"{name}.{field.name}".lstrip(".")))
    elif isinstance(value, tuple):
        for index, part in enumerate(value):
            found.update(named_arrays(part, f"{name}[{index}]"))
    return found


def _checksum(array: np.ndarray) -> int:
    return zlib.crc32(np.ascontiguousarray(array).data)


class ArrayWatch:
    """CRC-32s of the arrays lent to plugins, taken now; :meth:`check` after a plugin call
    fails naming the plugin and the array it changed. A read-only view binds numpy only:
    ``torch.from_numpy(view)`` (or ``as_tensor``, or a buffer) writes through it, and
    retrieval and the built-in figures read the same memory afterwards."""

    def __init__(self, arrays: Mapping[str, np.ndarray]) -> None:
        self.arrays = dict(arrays)
        self.sums = {name: _checksum(array) for name, array in self.arrays.items()}

    def check(self, who: str) -> None:
        changed = [name for name, array in self.arrays.items() if _checksum(array) != self.sums[name]]
        if changed:
            raise PluginError(
                f"{who} changed, in place, the array {changed[0]!r} popaudit lends it read-only"
                + (f" (and {len(changed) - 1} more)" if len(changed) > 1 else "")
                + ", through a view that ignores numpy's read-only flag (torch.from_numpy, torch.as_tensor, "
                "a buffer): the built-in figures and retrieval read the same memory; change a copy "
                "(numpy.array(...), tensor.clone())"
            )


def _versions(state_dict: Mapping[str, Any]) -> dict[str, int]:
    return {str(key): int(getattr(tensor, "_version", 0)) for key, tensor in state_dict.items()}


@contextmanager
def unchanged_tensors(bundle: Any, who: str, stats: Any = None) -> Iterator[None]:
    """Run a plugin's hook on ``bundle``; PluginError naming ``who`` and the tensor when it
    changed one of ``bundle.state_dict``'s tensors in place (torch has no read-only
    tensors: every in-place operation bumps a tensor's version counter), or the array when
    it changed one of ``bundle``'s or ``stats``'s numpy arrays (:class:`ArrayWatch`)."""
    state_dict = getattr(bundle, "state_dict", None) or {}
    before = _versions(state_dict)
    watch = ArrayWatch({**named_arrays(bundle, "bundle"), **named_arrays(stats, "stats")})
    yield
    changed = [key for key, version in _versions(state_dict).items() if before.get(key, version) != version]
    if changed:
        raise PluginError(
            f"{who} changed the model's tensor {changed[0]!r} in place"
            + (f" (and {len(changed) - 1} more)" if len(changed) > 1 else "")
            + ": the built-in figures read it; change a copy (tensor.clone())"
        )
    watch.check(who)


def implementers(pm: Any, hook_name: str) -> str:
    """``plugin 'x' (hook h)``: who implements ``hook_name`` (built-ins left out), for a
    failure found after the hook ran."""
    from auditor.plugins.manager import BUILTIN_PREFIX

    names = [impl.plugin_name for impl in getattr(pm.hook, hook_name).get_hookimpls()
             if not impl.plugin_name.startswith(BUILTIN_PREFIX)]
    return f"plugin {' or '.join(map(repr, names)) or '(unknown)'} (hook {hook_name})"


def live_model_hook(pm: Any, bundle: Any) -> Any:
    """``popaudit_live_model`` asked about a lent ``bundle`` (a live encoder a plugin builds may
    keep its arrays: read-only views of the ones retrieval and the probes read)."""
    from auditor.plugins.calls import call_hook

    with unchanged_tensors(bundle, implementers(pm, "popaudit_live_model")):
        return call_hook(pm, "popaudit_live_model", bundle=lend(bundle))


def live_author(pm: Any, bundle: Any, live: object) -> str | None:
    """Who built ``live``, for an error its code causes (``plugin 'file:x.py'``, or the hooks
    one of which did): the plugin whose module defines its class, else the plugin loader
    that read the file (a live model set on the bundle it returned), else the plugins
    implementing ``popaudit_live_model``. None for popaudit's own live model."""
    module = type(live).__module__
    if module == "auditor" or module.startswith("auditor."):
        return None
    for name, plugin in pm.list_name_plugin() if pm is not None else ():
        defined = getattr(plugin, "__name__", None)
        if isinstance(defined, str) and (module == defined or module.startswith(defined + ".")):
            return f"plugin {name!r}"
    loader = str(getattr(bundle, "loader", ""))
    if loader and loader != "the built-in loader":
        return loader
    if pm is not None and "(unknown)" not in (named := implementers(pm, "popaudit_live_model")):
        return named
    return f"the code of the live model {type(live).__qualname__!r} (module {module})"


__all__ = ["ArrayWatch", "lend", "named_arrays", "lend_result", "live_author", "live_model_hook", "unchanged_tensors"]
