"""The JSON report: the schema of docs/report.md (schema_version 1), indented and stable."""

from __future__ import annotations

import json

from auditor.plugin_api import RenderContext
from auditor.result import AuditResult


class JsonRenderer:
    """``--format json``: :meth:`AuditResult.to_dict`, indented, NaN refused (strict JSON)."""

    name = "json"
    suffix = ".json"
    description = "machine-readable report (docs/report.md, schema_version 1)"

    def render(self, result: AuditResult, context: RenderContext) -> str:
        """The JSON document, newline-terminated (``context`` is not needed)."""
        return json.dumps(result.to_dict(), indent=2, allow_nan=False) + "\n"
