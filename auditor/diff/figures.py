"""A report's figures are numbers or null (docs/diff.md, "Inputs"): popaudit writes null for
a figure it has no value for, so any other value (text, a list, true) is a corrupt report,
refused with the field named rather than read as "not measured". Sections popaudit writes
in every report (``null`` where not measured) must be there too, and the verdict's severity
one of none, low, moderate, high (never read as "none", which would be a verdict improvement)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from auditor.errors import ReportError
from auditor.flat import CORRELATIONS
from auditor.sections import SEVERITIES

SECTIONS = ("inputs", "retrieval", "verdict")
"""Keys every JSON report popaudit writes holds (``retrieval`` null when not measured)."""


def check_figures(report: dict[str, Any], named: str) -> None:
    """ReportError naming ``named`` (the report, or its file) and the first field whose
    figure is neither a number nor null, or the first section popaudit always writes that
    is missing."""
    for section in SECTIONS:
        if section not in report:
            raise ReportError(f"{named} has no {section!r} section, which every popaudit JSON report holds (null "
                              "where not measured): not a report popaudit wrote, or one cut short")
    verdict = report["verdict"]
    severity = verdict.get("severity") if isinstance(verdict, dict) else None
    if not isinstance(verdict, dict):
        raise ReportError(f"{named}: verdict is {_shown(verdict)}, not an object holding verdict.severity: not a "
                          "verdict popaudit writes (a corrupt or edited report)")
    if severity not in SEVERITIES:  # a verdict improvement must never come from an unknown or missing grade
        found = "missing" if "severity" not in verdict else _shown(severity)
        raise ReportError(f"{named}: verdict.severity is {found}, not one of {', '.join(SEVERITIES)}: not a verdict "
                          "popaudit writes (a corrupt or edited report)")
    for path, value in _figures(report):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ReportError(f"{named}: {path} is {_shown(value)}, not a number or null: not a figure popaudit "
                              "writes (a corrupt or edited report)")


def unassessed_reason(vb: dict[str, Any], vn: dict[str, Any]) -> str | None:
    """Why two severities are not comparable: ``check`` could not assess one (``assessed``
    false: its "none" claims nothing, and its ``severity_level`` is null, so a gate on it
    says "nothing graded the severity"); None when both were assessed."""
    sides = [side for side, verdict in (("base", vb), ("new", vn)) if verdict.get("assessed") is False]
    if not sides:
        return None
    if len(sides) == 2:
        return "neither report's verdict was assessed; nothing graded a severity"
    return f"the {sides[0]} report's verdict was not assessed; nothing graded its severity"


def _shown(value: Any) -> str:
    """The value as the JSON file spells it (null, true, "x"), not as Python prints it."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def _figures(report: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """(field path, value) of every figure the flat names read (auditor/flat.py)."""
    fn = report.get("frequency_norm")
    if isinstance(fn, dict):
        for name in (*CORRELATIONS, "spearman_p"):
            yield f"frequency_norm.{name}", fn.get(name)
    served = report.get("served")
    if isinstance(served, dict):
        yield "served.head_share_log", served.get("head_share_log")
    for section in ("retrieval", "accuracy"):
        at = (report.get(section) or {}).get("at") if isinstance(report.get(section), dict) else None
        for k, cut in (at.items() if isinstance(at, dict) else ()):
            for scoring, measures in (cut.items() if isinstance(cut, dict) else ()):
                if isinstance(measures, dict):
                    yield from ((f"{section}.at.{k}.{scoring}.{m}", v) for m, v in measures.items())
                elif section == "retrieval":  # overlap_dot_cosine, overlap_served_*
                    yield f"{section}.at.{k}.{scoring}", measures
