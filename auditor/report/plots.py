"""The report's figures: how each is drawn (:mod:`auditor.report.drawing`, matplotlib's
Agg canvas, never pyplot) and which ones an :class:`~auditor.result.AuditResult` has
(:mod:`auditor.report.figures`), in one public place.

* :func:`audit_plots` / :func:`plot_specs` - every figure a result supports, drawn, or
  planned and drawn on demand.
"""

from __future__ import annotations

from auditor.report import document
from auditor.report.drawing import (
    COLORS,
    DPI,
    LABELS,
    MAX_SCATTER_POINTS,
    Plot,
    exposure_lorenz_figure,
    figure_png,
    head_share_figure,
    new_figure,
    norm_by_decile_figure,
    norm_vs_frequency_figure,
    png_data_uri,
    style_axes,
    update_angle_figure,
)
from auditor.report.figures import audit_figures
from auditor.result import AuditResult

PlotSpec = document.Figure
"""A figure a result supports, not drawn yet (:meth:`~auditor.report.document.Figure.render` draws it)."""


def audit_plots(result: AuditResult) -> list[Plot]:
    """Every figure ``result`` supports, drawn, in report order (empty without plot data)."""
    return [spec.render() for spec in plot_specs(result)]


def plot_specs(result: AuditResult) -> list[document.Figure]:
    """The figures ``result`` supports, in report order, without drawing them
    (:func:`auditor.report.figures.audit_figures`)."""
    return audit_figures(result)


__all__ = [
    "COLORS", "DPI", "LABELS", "MAX_SCATTER_POINTS", "Plot", "PlotSpec", "audit_plots", "exposure_lorenz_figure",
    "figure_png", "head_share_figure", "new_figure", "norm_by_decile_figure", "norm_vs_frequency_figure",
    "plot_specs", "png_data_uri", "style_axes", "update_angle_figure",
]  # fmt: skip
