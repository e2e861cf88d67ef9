"""How a JSON report is read where it comes in (the diff, ``flat_metrics_from_report``, a
batch row's report): the one policy of a report figure (a finite float64 or null), of a
section (an object or null), of a cut-off key (``"10"`` or the int 10, one key a K), each
corrupt value a ReportError naming the report and the field (:class:`ReportReader`,
:func:`report_as_read`)."""

from __future__ import annotations

import json
import math
import numbers
import sys
from typing import Any, NoReturn

from auditor.errors import ReportError


def shown_json(value: Any) -> str:
    """The value as the JSON file spells it (null, true, "x"), not as Python prints it, cut short."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1} digits"
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


class ReportReader:
    """How the flat names read a JSON report (one policy for the diff, gates, batch columns
    and ``flat_metrics_from_report``): a figure is a finite float64 or null, as popaudit
    writes it; a section is an object (a list where popaudit writes one) or null. Anything
    else (text, true, a list, a number beyond float range such as 1e400 or a 400-digit
    integer) is a ReportError naming the report and the field."""

    def __init__(self, named: str) -> None:
        self.named = named

    def refuse(self, path: str, value: Any, wanted: str, *, kind: str = "figure", shown: str | None = None) -> NoReturn:
        raise ReportError(f"{self.named}: {path} is {shown or shown_json(value)}, {wanted}: not a {kind} popaudit "
                          "writes (a corrupt or edited report)")

    def figure(self, holder: Any, key: str | int, where: str) -> float | None:
        """``holder[key]`` (None where the holder or the key is missing) as a float."""
        if holder is None or (isinstance(holder, dict) and key not in holder):
            return None
        value, path = holder[key], f"{where}.{key}"
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            self.refuse(path, value, "not a number or null")
        try:
            number = float(value)
        except OverflowError:  # an integer of hundreds of digits
            self.refuse(path, value, "beyond float range, not a finite number or null")
        if math.isinf(number):  # JSON's 1e400 reads as infinity
            self.refuse(path, value, "not a finite number or null", shown="a number beyond float range")
        if math.isnan(number):
            self.refuse(path, value, "not a finite number or null", shown="NaN")
        return number

    def count(self, holder: Any, key: str, where: str) -> int | None:
        """``holder[key]``, a count popaudit writes (``inputs.n_items``), as an int: a whole
        number from 0 within float range, or null (None where missing). The comparability
        rules compute with it (the head's c = max(1, floor(p/100 · n_items))), so a 400-digit
        integer is refused here, like a figure, not met as an OverflowError there."""
        value = holder.get(key) if isinstance(holder, dict) else None
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            self.refuse(f"{where}.{key}", value, "not a count (a whole number from 0) or null")
        if value > sys.float_info.max:  # an integer of hundreds of digits
            self.refuse(f"{where}.{key}", value, "beyond float range, not a count or null")
        return value

    def obj(self, value: Any, path: str, *, null: bool = True) -> Any:
        """``value``: an object, or None where it may be null."""
        if isinstance(value, dict) or (value is None and null):
            return value
        self.refuse(path, value, "not an object" + (" or null" if null else ""), kind="section")

    def listed(self, value: Any, path: str, *, length: int | None = None) -> list[Any] | None:
        """``value``: a list (of ``length`` items when given), or None."""
        if value is None or (isinstance(value, list) and (length is None or len(value) == length)):
            return value
        self.refuse(path, value, "not a list" + ("" if length is None else f" of {length}") + " or null", kind="section")

    def cutoff(self, key: Any, where: str) -> int:
        """A cut-off K as popaudit spells its key: JSON's ``"10"``, or the int 10 of a dict
        built in Python. Any other spelling (``"010"``, ``" 10"``, ``"10.0"``, ``"1e1"``,
        ``"-10"``, true) is refused: one K, one key, so no two keys of a section name it."""
        text = str(key) if isinstance(key, int) and not isinstance(key, bool) else key
        if isinstance(text, str) and text.isdecimal() and 0 < len(text) <= 9 and text == str(int(text)) != "0":
            return int(text)
        self.refuse(f"{where}.{key}", key, "a key that is not a cut-off K (a whole number such as 10, as popaudit "
                    "writes it)", kind="section")

    def verdict(self, verdict: dict[str, Any]) -> None:
        """``verdict.assessed`` true or false (missing in earlier reports: assessed) and
        ``verdict.quoted_k`` a cut-off K or null: the text "false" read as assessed, and
        "ten" as no K, silently changed the verdict's comparability (QA9 diff F5)."""
        assessed, k = verdict.get("assessed", True), verdict.get("quoted_k")
        if not isinstance(assessed, bool):
            self.refuse("verdict.assessed", assessed, "not true or false", kind="verdict")
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
            self.refuse("verdict.quoted_k", k, "not a cut-off K (a whole number such as 10) or null", kind="verdict")

    def cutoffs(self, section: Any, where: str) -> dict[str, Any]:
        """A section keyed by cut-off K (``retrieval.at``, ``retrieval.recall``, ``accuracy.at``)
        with JSON's keys, ``"10"`` for 10 or ``"10"``: the one spelling every reader sees.
        A K keyed twice (10 and ``"10"`` in a dict built in Python) is refused, never one
        figure silently chosen."""
        out: dict[str, Any] = {}
        for key, value in (self.obj(section, where) or {}).items():
            k = str(self.cutoff(key, where))
            if k in out:
                self.refuse(f"{where}.{key}", key, f"a second key for K={k}", kind="section",
                            shown=f"{shown_json(key)} ({type(key).__name__})")
            out[k] = value
        return out


_NESTED_SECTIONS = (("retrieval", "population"), ("retrieval", "definitions"), ("settings", "groups"))
"""Objects inside sections that the diff's comparability rules read (object or null)."""


def report_as_read(report: dict[str, Any], named: str = "the report") -> dict[str, Any]:
    """``report`` as every reader of it sees it, read once where it comes in (the diff,
    ``flat_metrics_from_report``): each section popaudit writes as an object is an object
    or null (``"inputs": []``, ``"conditions": "x"`` are refused naming the field, not read
    as empty), the verdict's ``assessed`` and ``quoted_k`` of their kinds, and the cut-off
    sections keyed by JSON's ``"10"``
    (:meth:`ReportReader.cutoffs`). A shallow copy; the caller's dict is left as given."""
    read, out = ReportReader(named), dict(report)
    for name, value in report.items():
        if name in OBJECT_SECTIONS:
            out[name] = read.obj(value, name)
    conditions = out.get("conditions") or {}
    for key, value in conditions.items():
        read.obj(value, f"conditions.{key}")
    for section, name in _NESTED_SECTIONS:
        read.obj((out.get(section) or {}).get(name), f"{section}.{name}")
    if isinstance(out.get("verdict"), dict):  # a verdict of another kind: refused with the report's tag (diff.figures)
        read.verdict(out["verdict"])
    for section, name in COUNTS:  # read by the comparability rules, which compute with them
        read.count(out.get(section), name, section)
    read.figure((out.get("settings") or {}).get("groups"), "popular_percent", "settings.groups")
    for name in ("ks", "alphas"):  # the cut-offs and exponents whose names a gate accepts
        read.listed((out.get("settings") or {}).get(name), f"settings.{name}")
    for section, name in (("retrieval", "at"), ("retrieval", "recall"), ("accuracy", "at")):
        if isinstance(out.get(section), dict) and name in out[section]:
            out[section] = {**out[section], name: read.cutoffs(out[section][name], f"{section}.{name}")}
    return out


COUNTS = (("inputs", "n_items"), ("inputs", "n_interactions"), ("retrieval", "n_queries"))
"""The counts the diff's comparability rules and notes read (:meth:`ReportReader.count`)."""
OBJECT_SECTIONS = ("inputs", "settings", "conditions", "frequency_norm", "served_vectors", "training", "served",
                   "retrieval", "accuracy", "measures")
"""The top-level sections popaudit writes as an object (or null where not measured); the
verdict, never null, and ``tool`` are checked with the report's tag (diff.figures)."""
