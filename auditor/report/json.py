"""The JSON format: a document's data, indented and stable; for an audit the schema of
docs/report.md (schema_version 1), :meth:`AuditResult.to_dict <auditor.result.AuditResult.to_dict>`."""

from __future__ import annotations

import json

from auditor.errors import InputError
from auditor.plugin_api import RenderContext
from auditor.report.document import Document
from auditor.result import AuditResult


class JsonRenderer:
    """``--format json``: the document's data, indented, NaN refused (strict JSON)."""

    name = "json"
    suffix = ".json"
    description = "machine-readable report (docs/report.md, schema_version 1)"

    def render(self, result: AuditResult, context: RenderContext) -> str:
        """The audit's JSON report, newline-terminated (``context`` is not needed): the
        data of the audit's document, ``result.to_dict()``, without building the rest of
        it (its sections and figures are for the other formats)."""
        return _dumps(result.to_dict())

    def render_document(self, document: Document, context: RenderContext) -> str:
        """``document``'s data as JSON, newline-terminated; a document without data is an
        :class:`~auditor.errors.InputError`."""
        if document.payload is None:
            raise InputError(f"the json format cannot render the {document.kind} report: it carries no data")
        return _dumps(document.payload())


def _dumps(data: object) -> str:
    return json.dumps(data, indent=2, allow_nan=False) + "\n"
