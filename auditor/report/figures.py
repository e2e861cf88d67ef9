"""Which figures an audit report has: each one a :class:`~auditor.report.document.Figure`
with its title and text alternative, drawn by :mod:`auditor.report.plots` only when a
walker asks for its PNG (building a report never loads matplotlib).

Frequency–norm figures need ``plot_data.norms`` and ``frequencies``; retrieval figures
need the retrieval section (Lorenz curves also ``plot_data.exposure``); the trade-off
figure needs accuracy judged at a measured K; the update-angle histogram needs probe
angles (raw, or the reported histogram); the training figure needs a trace's records
(``check --trace``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from auditor.report import accuracy as accuracy_view
from auditor.report.content import quoted_cutoffs
from auditor.report.document import Figure
from auditor.report.plot_data import norm_scale
from auditor.report.training import training_figure
from auditor.result import AuditResult, DecileRow, Retrieval

FIGURE_NAMES = ("norm_vs_frequency", "norm_by_decile", "exposure_lorenz", "head_share", "tradeoff", "update_angles",
                "training", "exposure_gain")
"""Every figure an audit report can have, in report order; each is ``<name>.png``
beside a Markdown report (:func:`auditor.report.markdown.figure_paths`)."""


def audit_figures(result: AuditResult) -> list[Figure]:
    """The figures ``result`` supports, in report order, none of them drawn."""
    return [
        *_frequency_figures(result),
        *_retrieval_figures(result),
        *_accuracy_figures(result),
        *_shift_figures(result),
        *_probe_figures(result),
        *_training_figures(result),
    ]


def _frequency_figures(result: AuditResult) -> list[Figure]:
    data, fn = result.plot_data, result.frequency_norm
    norms, freq = data.norms, data.frequencies
    if norms is None or freq is None or len(norms) != len(freq):
        return []
    deciles: Sequence[DecileRow] | None = fn.deciles if fn is not None else None
    slope = fn.loglog_slope if fn is not None and _is_finite(fn.loglog_slope) else None

    def scatter() -> Any:
        from auditor.report.drawing import norm_vs_frequency_figure

        return norm_vs_frequency_figure(norms, freq, deciles, slope)

    def boxes() -> Any:
        from auditor.report.drawing import norm_by_decile_figure

        return norm_by_decile_figure(norms, freq, deciles)

    fit = f" (slope {slope:.3f})." if slope is not None else "."
    axis = _norm_axis_caption(np.asarray(norms, dtype=np.float64))
    return [
        Figure("norm_vs_frequency", "frequency_norm", "Item norm vs training frequency",
               "Scatter of item embedding norm against training frequency on a log axis, with the "
               "median norm of each popularity decile and the fitted log–log line" + fit + axis, scatter),
        Figure("norm_by_decile", "frequency_norm", "Norm distribution by popularity decile",
               "Box plots of item embedding norm for each popularity decile, least frequent first." + axis,
               boxes),
    ]  # fmt: skip


def _norm_axis_caption(norms: np.ndarray) -> str:
    """What the norm axis of both plots is, when it is not a plain linear one."""
    scale = norm_scale(norms[np.isfinite(norms)])
    if not scale.log:
        return ""
    if not scale.zeros:
        return " Norm axis: log scale."
    plural = "s" if scale.zeros != 1 else ""
    return (f" Norm axis: log scale over the positive norms; {scale.zeros:,} zero-norm item{plural} "
            "drawn on a dotted floor line below them.")


def _retrieval_figures(result: AuditResult) -> list[Figure]:
    retrieval, exposure = result.retrieval, result.plot_data.exposure
    if retrieval is None or not retrieval.at:
        return []
    figures = []
    if exposure:
        gini = {s: {k: getattr(cut, s).number("gini") for k, cut in retrieval.at.items()}
                for s in ("dot", "cosine", "popular")}
        figures.append(Figure(
            "exposure_lorenz", "retrieval", "Exposure Lorenz curves",
            "Lorenz curves of how recommended slots are spread over the catalogue, for "
            "dot-product, cosine and most-popular retrieval, one panel per K.",
            lambda: _lorenz(exposure, gini),
        ))  # fmt: skip
    figures.append(Figure(
        "head_share", "retrieval", "Head share per K",
        "Bars of the share of recommended slots taken by the top 1% and top 10% most frequent "
        "items, for dot-product, cosine and most-popular retrieval at each K.",
        lambda: _head_share(retrieval),
    ))  # fmt: skip
    return figures


def _lorenz(exposure: Mapping[str, Mapping[int, np.ndarray]], gini: Mapping[str, Mapping[int, float]]) -> Any:
    from auditor.report.drawing import exposure_lorenz_figure

    return exposure_lorenz_figure(exposure, gini)


def _head_share(retrieval: Retrieval) -> Any:
    from auditor.report.drawing import head_share_figure

    return head_share_figure(retrieval)


def _accuracy_figures(result: AuditResult) -> list[Figure]:
    if not accuracy_view.has_figure(result):
        return []

    return [Figure(
        "tradeoff", "accuracy", "Accuracy against exposure",
        "Held-out NDCG of each scoring (dot, cosine, norm-aware, most popular) against the top-1% "
        "head share and the Gini index of its lists, the Pareto front dashed and the recommended "
        "scoring ringed.",
        lambda: accuracy_view.tradeoff_figure(result),
    )]  # fmt: skip


def _shift_figures(result: AuditResult) -> list[Figure]:
    """The exposure gain against frequency at the quoted K: needs the per-item exposure and
    frequencies (a live result) and the gain/lose table."""
    retrieval, data = result.retrieval, result.plot_data
    k = quoted_cutoffs(result)[0]
    if retrieval is None or k is None or k not in retrieval.exposure_shift or data.frequencies is None:
        return []
    dot, cosine = data.exposure.get("dot", {}).get(k), data.exposure.get("cosine", {}).get(k)
    if dot is None or cosine is None or len(dot) != len(data.frequencies):
        return []
    gain = np.asarray(dot, dtype=np.int64) - np.asarray(cosine, dtype=np.int64)
    shift = retrieval.exposure_shift[k]
    listed = [int(item["row"]) for key in ("gained", "lost") for item in shift.get(key) or ()]
    frequencies = data.frequencies

    def draw() -> Any:
        from auditor.report.shift_plot import exposure_gain_figure

        return exposure_gain_figure(gain, frequencies, k, listed)

    return [Figure(
        "exposure_gain", "exposure_shift", f"Exposure gain against frequency, top-{k}",
        f"Scatter of each item's exposure gain under dot-product serving over cosine (lists holding it at "
        f"top-{k}) against its training frequency on a log axis; items served more by dot in one colour, "
        "more by cosine in another, the items of the tables ringed.",
        draw,
    )]  # fmt: skip


def _probe_figures(result: AuditResult) -> list[Figure]:
    update = result.probes.update if result.probes is not None else None
    summary = update.angle_summary if update is not None else None
    histogram = None if summary is None else {"edges": summary.edges, "counts": summary.counts}
    angles = result.plot_data.update_angles
    raw = angles if angles is not None and len(angles) else None
    if raw is None and histogram is None:
        return []
    share = None if summary is None else summary.share_90pm1

    def draw() -> Any:
        from auditor.report.drawing import update_angle_figure

        return update_angle_figure(raw, None if raw is not None else histogram, share)

    return [Figure(
        "update_angles", "probes", "Update-angle histogram",
        "Histogram of the angle between each item embedding and its one-step update; "
        "a spike at 90 degrees means updates only grow norms.",
        draw,
    )]  # fmt: skip


def _training_figures(result: AuditResult) -> list[Figure]:
    training = result.training
    return [] if training is None or not training.points else [training_figure(training)]


def _is_finite(value: object) -> bool:
    return isinstance(value, (int, float, np.floating)) and math.isfinite(float(value))
