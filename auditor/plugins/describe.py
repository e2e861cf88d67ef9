"""The registered plugins as ``popaudit plugins`` lists them."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Literal

import pluggy

from auditor.plugins.manager import BUILTIN_PREFIX, FILE_PREFIX

PluginKind = Literal["builtin", "entrypoint", "file"]


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


def _class_file(plugin: object) -> str | None:
    try:
        return inspect.getsourcefile(type(plugin))
    except TypeError:
        return None
