"""A package's public names imported on first use (a PEP 562 module ``__getattr__``), so
that importing the package stays light when its names live in heavy modules."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def imported_on_first_use(
    package: str, names: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``, whose globals are ``namespace``:
    each of ``names`` (public name -> the module that defines it) is imported on first
    use and kept in ``namespace``, so later look-ups skip the hook."""

    def attribute(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def listing() -> list[str]:
        return sorted(set(namespace) | set(names))

    return attribute, listing
