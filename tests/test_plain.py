"""auditor/plain.py: the same structure as dataclasses.asdict, without its deep copies of scalars."""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

import numpy as np
import pytest

from auditor.plain import asdict


class Pair(NamedTuple):
    a: int
    b: Any


@dataclass
class Inner:
    x: float
    arr: np.ndarray
    tag: ClassVar[str] = "not a field"


@dataclass(frozen=True)
class Outer:
    name: str
    inner: Inner
    items: list[Inner] = field(default_factory=list)
    pairs: tuple[Pair, ...] = ()
    table: dict[Any, Any] = field(default_factory=dict)
    nothing: None = None


def test_same_structure_and_values_as_dataclasses_asdict() -> None:
    arr = np.arange(3.0)
    value = Outer(
        "o", Inner(1.5, arr), [Inner(float("nan"), arr)], (Pair(1, Inner(2.0, arr)),),
        OrderedDict([(1, [Inner(3.0, arr)]), ("k", (np.float64(0.5), b"raw"))]),
    )
    ours, theirs = asdict(value), dataclasses.asdict(value)
    assert repr(ours) == repr(theirs)
    assert list(ours) == ["name", "inner", "items", "pairs", "table", "nothing"]
    assert type(ours["table"]) is OrderedDict and type(ours["pairs"][0]) is Pair
    np.testing.assert_array_equal(ours["pairs"][0].b["arr"], arr)
    # Mutable leaves are copies, as dataclasses.asdict makes them.
    assert ours["inner"]["arr"] is not arr
    ours["inner"]["arr"][0] = 9.0
    assert arr[0] == 0.0
    with pytest.raises(TypeError):
        asdict(Outer)
    with pytest.raises(TypeError):
        asdict({"a": 1})
