"""Reports: one structured document per result, walked into each format.

* Documents (:mod:`auditor.report.document`): title, lead, sections of blocks, the
  terminal's brief view and, for JSON, the data. One builder per kind:
  :func:`~auditor.report.audit_doc.audit_document` (an audit),
  :func:`~auditor.report.batch_summary.batch_document`,
  :func:`~auditor.report.experiment_summary.experiment_document` and
  :func:`~auditor.report.mitigation_summary.mitigation_document` (the summaries). A new
  kind (the comparison of two audits, a training trace) is one more builder function.
* Walkers, one module per format, registered through ``popaudit_renderers`` like a
  plugin's (:mod:`auditor.report.builtin`): :mod:`~auditor.report.console`,
  :mod:`~auditor.report.markdown`, :mod:`~auditor.report.html`, :mod:`~auditor.report.json`.
  A new format is one module with a renderer that has ``render_document``.
* Shared pieces: :mod:`~auditor.report.content` (the headline and the section tables),
  :mod:`~auditor.report.formatting` (numbers and :class:`~auditor.report.formatting.Table`),
  :mod:`~auditor.report.figures` and :mod:`~auditor.report.plots` (figures, drawn on demand).

This package imports only popaudit's values and result types; the registry that calls
plugins' renderers is :mod:`auditor.plugins.renderers`.
"""

from auditor.environment import import_rich
from auditor.plugin_api import RenderContext, Renderer

import_rich()  # before the walkers import it: its first import draws from the global `random`

__all__ = ["RenderContext", "Renderer"]
