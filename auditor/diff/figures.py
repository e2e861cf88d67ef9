"""A report's figures are finite numbers or null (docs/diff.md, "Inputs"): popaudit writes
null for a figure it has no value for, so any other value (text, a list, true, 1e400) or a
section of the wrong kind is a corrupt report, refused with the field named rather than read
as "not measured" (by the one reader of report figures, :func:`auditor.flat.flat_entries`). Sections popaudit writes
in every report (``null`` where not measured) must be there too, and the verdict's severity
one of none, low, moderate, high (never read as "none", which would be a verdict improvement)."""

from __future__ import annotations

import re
from typing import Any

from auditor.errors import ReportError
from auditor.flat import flat_entries
from auditor.report_reader import shown_json
from auditor.result import SCHEMA_VERSION
from auditor.sections import SEVERITIES

SECTIONS = ("inputs", "retrieval", "verdict")
"""Keys every JSON report popaudit writes holds (``retrieval`` null when not measured)."""
FINGERPRINT = re.compile(r"sha256:[0-9a-f]{64}")
"""``accuracy.holdout_fingerprint`` and ``inputs.item_id_fingerprint`` / ``user_id_fingerprint``
as auditor/loading/fingerprint.py writes them."""


def check_tagged(report: Any, named: str) -> None:
    """ReportError unless ``report`` is an object with an integer ``schema_version`` and
    ``tool.name`` popaudit; a version present but of another kind (true, "1", 1.0) is quoted."""
    if not isinstance(report, dict) or "schema_version" not in report:
        raise ReportError(f"{named} is not a popaudit JSON report (no schema_version)")
    version = report["schema_version"]
    if isinstance(version, bool) or not isinstance(version, int):  # true is no version, though True == 1
        raise ReportError(f"{named}: schema_version is {shown_json(version)}, not an integer such as "
                          f"{SCHEMA_VERSION}: not a popaudit JSON report (a corrupt or edited one)")
    tool = report.get("tool")
    if not isinstance(tool, dict) or tool.get("name") != "popaudit":
        raise ReportError(f"{named} was not written by popaudit (tool.name is not 'popaudit')")


def check_figures(report: dict[str, Any], named: str) -> None:
    """ReportError naming ``named`` (the report, or its file) and the first field whose
    figure is neither a finite number nor null (or whose section is of the wrong kind), or
    the first section popaudit always writes that is missing."""
    for section in SECTIONS:
        if section not in report:
            raise ReportError(f"{named} has no {section!r} section, which every popaudit JSON report holds (null "
                              "where not measured): not a report popaudit wrote, or one cut short")
    verdict = report["verdict"]
    severity = verdict.get("severity") if isinstance(verdict, dict) else None
    if not isinstance(verdict, dict):
        raise ReportError(f"{named}: verdict is {shown_json(verdict)}, not an object holding verdict.severity: not a "
                          "verdict popaudit writes (a corrupt or edited report)")
    if severity not in SEVERITIES:  # a verdict improvement must never come from an unknown or missing grade
        found = "missing" if "severity" not in verdict else shown_json(severity)
        raise ReportError(f"{named}: verdict.severity is {found}, not one of {', '.join(SEVERITIES)}: not a verdict "
                          "popaudit writes (a corrupt or edited report)")
    flat_entries(report, named)  # refuses the first figure or section it cannot read
    accuracy, inputs = (report.get(section) for section in ("accuracy", "inputs"))
    for section, key, values in (("accuracy", "holdout_fingerprint", accuracy), ("inputs", "item_id_fingerprint", inputs),
                                 ("inputs", "user_id_fingerprint", inputs)):
        fingerprint = values.get(key) if isinstance(values, dict) else None
        if fingerprint is not None and not (isinstance(fingerprint, str) and FINGERPRINT.fullmatch(fingerprint)):
            # it decides what is compared: never read as "not recorded"
            raise ReportError(f"{named}: {section}.{key} is {shown_json(fingerprint)}, not sha256: and 64 hex "
                              "digits or null: not a fingerprint popaudit writes (a corrupt or edited report)")


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
