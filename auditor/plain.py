"""Dataclasses as plain dicts: what :func:`dataclasses.asdict` returns, at a fraction of its cost.

A batch builds one JSON report per row, and ``dataclasses.asdict`` spent most of that
time on its generic machinery (a field list and a ``copy.deepcopy`` dispatch per value,
even for numbers and strings, which deep-copy to themselves). :func:`asdict` builds the
same structure: dataclasses become dicts (fields in declaration order), lists, tuples,
named tuples and dicts are rebuilt with their own types, immutable scalars are kept as
they are, and any other value is deep-copied as ``dataclasses.asdict`` does.
"""

from __future__ import annotations

import copy
from dataclasses import fields, is_dataclass
from typing import Any

_ATOMIC: frozenset[type] = frozenset({str, int, float, bool, type(None), bytes, complex})
"""Types whose deep copy is the value itself."""
_FIELDS: dict[type, tuple[str, ...]] = {}
"""Field names of each dataclass met (``fields()`` filters pseudo-fields on every call)."""


def asdict(obj: Any) -> dict[str, Any]:
    """``dataclasses.asdict(obj)``, the same dicts, lists and values (see the module docstring)."""
    if not is_dataclass(obj) or isinstance(obj, type):
        raise TypeError("asdict() should be called on dataclass instances")
    out: dict[str, Any] = _plain(obj)
    return out


def _plain(obj: Any) -> Any:
    kind = type(obj)
    if kind in _ATOMIC:
        return obj
    if hasattr(kind, "__dataclass_fields__"):
        names = _FIELDS.get(kind)
        if names is None:
            names = _FIELDS[kind] = tuple(f.name for f in fields(obj))
        return {name: _plain(getattr(obj, name)) for name in names}
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a named tuple: positional fields
        return kind(*[_plain(v) for v in obj])
    if isinstance(obj, (list, tuple)):
        return kind(_plain(v) for v in obj)
    if isinstance(obj, dict):
        return kind((_plain(k), _plain(v)) for k, v in obj.items())
    return copy.deepcopy(obj)


__all__ = ["asdict"]
