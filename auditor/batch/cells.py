"""Manifest cells as setting values: an empty cell, a path, a number read exactly.

A CSV manifest is read as text (:func:`auditor.batch.manifest.read_manifest`), so each
cell arrives as written and is converted here by the kind of its setting: an integer
from its digits (a ``seed`` of 18446744073709551615 stays that number, where a float64
column would round every cell above 2^53), a label or an id as its characters (``1.10``,
``007``), ``nan`` as the number it names (refused by the setting's range, as ``--lr nan``
is), never as an empty cell. A Parquet manifest's cells keep their column types.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import numpy as np

from auditor.config import QUERY_SOURCES, parse_memory_size


def missing(value: Any) -> bool:
    """Whether a cell is empty (keeps the batch default): a null, or text of blanks only.
    A NaN is no empty cell: a Parquet writer stores a missing value as a null."""
    return value is None or (isinstance(value, str) and not value.strip())


def text(value: Any) -> str | None:
    """A cell as text (None when empty): a CSV cell exactly as written, stripped."""
    return None if missing(value) else str(value).strip()


def resolve_path(value: str | Path, base: Path) -> Path:
    path = Path(value).expanduser()
    return path if path.is_absolute() else base / path


_BOOLS = {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False, "0": False}


def _int(value: Any) -> int:
    """An integer cell, exactly: an integer, a float that is one, or text naming one
    (``12345678901234567891``, ``1e3``, ``10.0``: the decimal value, never a float's)."""
    if isinstance(value, bool):
        raise ValueError(f"expected an integer, got {value!r}")
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, float):
        if value.is_integer():
            return int(value)
        raise ValueError(f"expected an integer, got {value!r}")
    try:
        number = Decimal(str(value).strip())
        if number.is_finite() and number == number.to_integral_value():
            return int(number)
    except InvalidOperation:
        pass
    raise ValueError(f"expected an integer, got {value!r}")


def _bool(value: Any) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    word = str(value).strip().lower()
    if word.endswith(".0"):  # CSV/float columns holding 1.0 / 0.0
        word = word[:-2]
    if word not in _BOOLS:
        raise ValueError(f"expected true or false, got {value!r}")
    return _BOOLS[word]


def _numbers(kind: str, value: Any) -> tuple[Any, ...]:
    """A list cell (``"10,100"``, ``"[5; 7]"``, a Parquet list) as ints or floats."""
    if isinstance(value, (list, tuple, np.ndarray)):
        parts: list[Any] = list(value)
    elif isinstance(value, str):
        parts = [p for p in re.split(r"[\s,;\[\]]+", value) if p]
    else:
        parts = [value]
    if not parts:
        example = "'10,100'" if kind == "ints" else "'0.25,0.5'"
        raise ValueError(f"expected a list such as {example}, got {value!r}")
    return tuple(_int(p) if kind == "ints" else float(p) for p in parts)


def convert_setting(kind: str, value: Any, base: Path) -> Any:
    """One manifest cell as an AuditConfig value of ``kind`` (path, query, bool, int,
    size, float, ints, floats or str; relative paths resolved against ``base``)."""
    if kind == "path":
        return resolve_path(str(value).strip(), base)
    if kind == "query":
        given = str(value).strip()
        return given if given in QUERY_SOURCES else str(resolve_path(given, base))
    if kind == "bool":
        return _bool(value)
    if kind == "int":
        return _int(value)
    if kind == "size":
        return parse_memory_size(value)
    if kind == "float":
        return float(value)
    if kind in ("ints", "floats"):
        return _numbers(kind, value)
    if isinstance(value, float) and value.is_integer():  # a Parquet float column: an item_key 0 read as 0.0
        return str(int(value))
    return str(value).strip()


__all__ = ["convert_setting", "missing", "resolve_path", "text"]
