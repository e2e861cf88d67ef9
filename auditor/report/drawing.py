"""How the report's figures are drawn, with matplotlib's Agg canvas (never a display, never pyplot).

Every figure is a plain :class:`matplotlib.figure.Figure` attached to an Agg canvas, so
rendering works on headless machines and never touches pyplot's global state (safe in
threads and worker processes). Reusable pieces for other reports (experiments, batch):

* :func:`new_figure` - an Agg-backed figure with the report's style.
* :func:`figure_png` / :func:`png_data_uri` - a figure as PNG bytes, and PNG bytes as a
  ``data:image/png;base64,...`` URI for self-contained HTML.
* :mod:`auditor.report.plot_data` - what the figures plot (Lorenz curves, popularity groups).
* :mod:`auditor.report.plot_text` - titles that fit their figure, bar labels that show small values.
* :class:`Plot` - a named PNG with a title and a text alternative.

Which figures a report has is :mod:`auditor.report.figures`' call; :mod:`auditor.report.plots`
is the public face of both (drawing and planning).
"""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from auditor.report.plot_text import bar_labels, fit_title, share_labels
from auditor.report.plot_data import (
    FLAT_SPAN, ZERO_FLOOR, NormScale, lorenz_curve, norm_scale, popularity_groups,
)
from auditor.result import DecileRow, Retrieval

COLORS = {"dot": "#D55E00", "cosine": "#0072B2", "popular": "#7F7F7F"}
"""One colour per scoring (Okabe–Ito, readable by colour-blind readers)."""
LABELS = {"dot": "dot product", "cosine": "cosine", "popular": "most popular"}
DPI = 120
MAX_SCATTER_POINTS = 20_000
"""The scatter shows a seeded sample of at most this many items (all items feed the fit)."""


@dataclass(frozen=True)
class Plot:
    """One rendered figure.

    ``name`` is a file stem (``norm_vs_frequency``), ``section`` the report section it
    belongs to (``frequency_norm``, ``retrieval``, ``probes``), ``alt`` a text
    alternative saying what the figure shows, ``png`` the image.
    """

    name: str
    section: str
    title: str
    alt: str
    png: bytes


def new_figure(width: float = 7.5, height: float = 4.2) -> Figure:
    """A figure on an Agg canvas (no display, no pyplot), in inches."""
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def figure_png(fig: Figure, *, dpi: int = DPI) -> bytes:
    """Render ``fig`` to PNG bytes (without the software/date metadata, so output is stable)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, metadata={"Software": None}, facecolor="white")
    return buffer.getvalue()


def png_data_uri(png: bytes) -> str:
    """PNG bytes as a ``data:image/png;base64,...`` URI."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def style_axes(ax: Axes) -> None:
    ax.grid(True, color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def _loglog_intercept(log_f: np.ndarray, log_n: np.ndarray, slope: float | None) -> tuple[float, float]:
    """Least-squares line of log norm on log frequency; the slope may be given (the result's)."""
    if slope is None:
        slope, intercept = np.polyfit(log_f, log_n, 1)
        return float(slope), float(intercept)
    return float(slope), float(np.mean(log_n - slope * log_f))


def norm_vs_frequency_figure(
    norms: np.ndarray,
    frequencies: np.ndarray,
    deciles: Sequence[DecileRow] | None = None,
    slope: float | None = None,
    *,
    max_points: int = MAX_SCATTER_POINTS,
    seed: int = 0,
) -> Figure:
    """Item norm against training frequency (log x) with decile medians and the log–log fit.

    Cold items (frequency 0) cannot sit on a log axis: their median norm is a dashed
    line. Zero norms on a log norm axis sit on its floor (:func:`norm_scale`). The fitted
    line uses ``slope`` (the reported log–log slope; fitted here when None) with the
    least-squares intercept over the items seen in training.
    """
    norms = np.asarray(norms, dtype=np.float64).ravel()
    freq = np.asarray(frequencies, dtype=np.float64).ravel()
    ok = np.isfinite(norms) & np.isfinite(freq)
    warm = ok & (freq > 0)
    cold = ok & (freq == 0)
    fig = new_figure()
    ax = fig.add_subplot()
    style_axes(ax)
    scale = norm_scale(norms[np.isfinite(norms)])  # the same axis as the by-decile boxes
    idx = np.flatnonzero(warm)
    shown = idx
    if idx.size > max_points:
        shown = np.sort(np.random.default_rng(seed).choice(idx, max_points, replace=False))
    label = f"items ({shown.size:,} of {idx.size:,} shown)" if shown.size < idx.size else "items"
    ax.scatter(freq[shown], scale.drawn(norms[shown]), s=4, alpha=0.35, color="#555555", linewidths=0,
               rasterized=True, label=label)
    # Each decile's marker sits at its median frequency and median norm (the same
    # grouping as the by-decile figure and, when it matches, the decile table).
    groups, _labels = popularity_groups(freq, deciles)
    medians = [
        (float(np.median(freq[m])), float(np.median(norms[m])))
        for g in range(int(groups.max(initial=-1)) + 1)
        if np.any(m := warm & (groups == g))
    ]
    if medians:
        x, y = np.array(medians).T
        ax.plot(x, scale.drawn(y), "o-", color=COLORS["cosine"], markersize=5, linewidth=1.5, label="decile medians")
    positive = warm & (norms > 0)
    if np.count_nonzero(positive) >= 2 and np.ptp(freq[positive]) > 0:
        log_f, log_n = np.log10(freq[positive]), np.log10(norms[positive])
        b, a = _loglog_intercept(log_f, log_n, slope)
        grid = np.logspace(log_f.min(), log_f.max(), 100)
        ax.plot(grid, 10**a * grid**b, color=COLORS["dot"], linewidth=2,
                label=f"log–log fit, slope {b:.3f}")
    n_cold = int(np.count_nonzero(cold))
    if n_cold:
        plural = "s" if n_cold != 1 else ""
        ax.axhline(float(scale.drawn(np.median(norms[cold]))), color="#999999", linestyle="--", linewidth=1,
                   label=f"median of {n_cold:,} cold item{plural} (frequency 0)")
    if idx.size:
        ax.set_xscale("log")
    ax.set_xlabel("training frequency (interactions per item, log scale)")
    norm_axis(ax, scale)
    fit_title(ax, "Item norm vs training frequency")
    ax.legend(loc="best", fontsize=8, frameon=False)
    return fig


def norm_by_decile_figure(
    norms: np.ndarray, frequencies: np.ndarray, deciles: Sequence[DecileRow] | None = None
) -> Figure:
    """Box plots of item norm per popularity decile (1 = least frequent), cold items apart."""
    norms = np.asarray(norms, dtype=np.float64).ravel()
    groups, labels = popularity_groups(frequencies, deciles)
    ok = np.isfinite(norms)
    data, names = [], []
    if np.any(ok & (groups == -1)):
        data.append(norms[ok & (groups == -1)])
        names.append("cold\n0")
    for g, label in enumerate(labels):
        data.append(norms[ok & (groups == g)])
        names.append(label)
    fig = new_figure(7.5, 4.0)
    ax = fig.add_subplot()
    style_axes(ax)
    keep = [i for i, d in enumerate(data) if d.size]
    scale = norm_scale(norms[ok])
    # Fliers drawn: the items beyond the whiskers are often the head items whose norms the
    # audit is about (the most frequent ones of a biased model).
    ax.boxplot([scale.drawn(data[i]) for i in keep], showfliers=True, widths=0.6, patch_artist=True,
               boxprops={"facecolor": "#cfe3f3", "edgecolor": COLORS["cosine"]},
               medianprops={"color": COLORS["dot"], "linewidth": 2},
               flierprops={"marker": "o", "markersize": 3, "markerfacecolor": COLORS["dot"],
                           "markeredgecolor": "none", "alpha": 0.7})
    ax.set_xticks(range(1, len(keep) + 1), [names[i] for i in keep], fontsize=7)
    ax.set_xlabel("popularity decile (1 = least frequent) and its frequency range")
    if norm_axis(ax, scale) and scale.floor is not None:
        ax.legend(loc="best", fontsize=8, frameon=False)  # says what the floor line is
    fit_title(ax, "Norm distribution by popularity decile (boxes: quartiles; whiskers: 1.5 IQR; "
                  "points: items beyond the whiskers)")
    return fig


NORM_LABEL = "item embedding norm ‖q‖"


def norm_axis(ax: Axes, scale: NormScale) -> bool:
    """Set ``scale`` on ``ax`` (scale, limits, label and the zero-norm floor), once everything
    is drawn with :meth:`NormScale.drawn`; True when it is logarithmic (labelled so)."""
    ax.ticklabel_format(axis="y", useOffset=False)  # norms read as they are, never as "1e-8+1"
    level = max(abs(scale.low), abs(scale.high))
    if scale.log:
        ax.set_yscale("log")
        if scale.floor is not None:
            plural = "s" if scale.zeros != 1 else ""
            ax.axhline(scale.floor, color="#999999", linestyle=":", linewidth=1,
                       label=f"{scale.zeros:,} zero-norm item{plural} (‖q‖ = 0), drawn on this floor")
            ax.set_ylim(bottom=scale.floor * ZERO_FLOOR**0.5)
    elif scale.count and scale.high - scale.low <= FLAT_SPAN * level:
        margin = 0.05 * level if level > 0 else 1.0
        ax.set_ylim(scale.low - margin, scale.high + margin)
    ax.set_ylabel(NORM_LABEL + (" (log scale)" if scale.log else ""))
    return scale.log


def exposure_lorenz_figure(
    exposure: Mapping[str, Mapping[int, np.ndarray]],
    gini: Mapping[str, Mapping[int, float]] | None = None,
) -> Figure:
    """Exposure Lorenz curves, one panel per K, one curve per scoring (dot, cosine, popular).

    ``gini[scoring][k]`` (the reported values) labels each curve when given.
    """
    ks = sorted({k for per_k in exposure.values() for k in per_k})
    fig = new_figure(min(max(3.6 * len(ks) + 0.6, 6.0), 11.0), 3.9)
    axes = fig.subplots(1, max(len(ks), 1), squeeze=False)[0]
    for ax, k in zip(axes, ks):
        style_axes(ax)
        ax.plot([0, 1], [0, 1], color="#bbbbbb", linewidth=1, linestyle=":", label="equal exposure")
        for scoring in ("dot", "cosine", "popular"):
            counts = exposure.get(scoring, {}).get(k)
            if counts is None:
                continue
            x, y = lorenz_curve(counts)
            g = (gini or {}).get(scoring, {}).get(k)
            label = LABELS.get(scoring, scoring)
            if g is not None and np.isfinite(g):
                label += f" (Gini {g:.2f})"
            ax.plot(x, y, color=COLORS.get(scoring), linewidth=2, label=label)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        fit_title(ax, f"top-{k} lists")
        ax.set_xlabel("share of catalogue (least exposed first)")
        ax.legend(loc="upper left", fontsize=7.5, frameon=False)
    axes[0].set_ylabel("share of recommended slots")
    fit_title(fig, "Exposure Lorenz curves: the further below the diagonal, the more concentrated")
    return fig


def head_share_figure(retrieval: Retrieval) -> Figure:
    """Grouped bars per K: share of slots taken by the top 1% and top 10% items."""
    ks = sorted(retrieval.at)
    fig = new_figure(7.5, 3.8)
    axes = fig.subplots(1, 2, sharey=False)
    x = np.arange(len(ks))
    width = 0.26
    # Labels such as "100.0%" are wider than the bars from three cut-offs on: turn them.
    rotate = len(ks) > 2
    for ax, (metric, title) in zip(axes, (("head_share_1pct", "top 1% of items"),
                                          ("head_share_10pct", "top 10% of items"))):
        style_axes(ax)
        top = 0.0
        scorings = ("dot", "cosine", "popular")
        shares = np.array([[getattr(retrieval.at[k], s).number(metric) for s in scorings] for k in ks], dtype=float)
        labels = share_labels([[float(v) if np.isfinite(v) else None for v in row] for row in shares])
        for i, scoring in enumerate(scorings):
            values = np.where(np.isfinite(shares[:, i]), shares[:, i], 0.0) * 100
            top = max(top, float(values.max(initial=0.0)))
            bars = ax.bar(x + (i - 1) * width, values, width, color=COLORS[scoring],
                          label=LABELS[scoring])
            bar_labels(ax, bars, labels[i], rotate=rotate)  # the table's cells, by its row rule
        ax.set_xticks(x, [f"K={k}" for k in ks])
        # Head room for the value labels above the tallest bar (more when they stand upright).
        ax.set_ylim(0, top * (1.3 if rotate else 1.12) + 2)
        ax.set_yticks([t for t in ax.get_yticks() if 0 <= t <= 100])
        ax.set_ylabel("% of recommended slots")
        fit_title(ax, f"Head share: {title}")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside upper center", ncols=3, fontsize=8, frameon=False)
    return fig


def update_angle_figure(
    angles: np.ndarray | None = None,
    histogram: Mapping[str, Sequence[float]] | None = None,
    share_90pm1: float | None = None,
) -> Figure:
    """Histogram of one-step update angles (degrees) with 90° marked.

    Draws ``angles`` (1° bins over 0–180°) when given, else a precomputed
    ``histogram`` ({edges, counts}, as in the JSON report).
    """
    fig = new_figure(7.5, 3.6)
    ax = fig.add_subplot()
    style_axes(ax)
    if angles is not None:
        values = np.asarray(angles, dtype=np.float64).ravel()
        values = values[np.isfinite(values)]
        counts, edges = np.histogram(values, bins=np.arange(0.0, 181.0, 1.0))
        if share_90pm1 is None and values.size:
            share_90pm1 = float(np.mean(np.abs(values - 90.0) <= 1.0))
    elif histogram is not None:
        edges = np.asarray(histogram["edges"], dtype=np.float64)
        counts = np.asarray(histogram["counts"], dtype=np.float64)
    else:
        raise ValueError("update_angle_figure needs angles or a histogram")
    ax.stairs(counts, edges, fill=True, color=COLORS["cosine"], alpha=0.8)
    ax.axvline(90.0, color=COLORS["dot"], linestyle="--", linewidth=1.2, zorder=3,
               label="90° (update orthogonal to q: norm can only grow)")
    positive = counts[counts > 0]
    # A spike at 90° would flatten every other bin to nothing on a linear axis.
    log_y = positive.size > 0 and positive.max() > 20 * np.median(positive)
    if log_y:
        ax.set_yscale("log")
    ax.set_xlim(0, 180)
    ax.set_xticks(range(0, 181, 30))
    ax.set_xlabel("angle between q and its update Δq (degrees)")
    ax.set_ylabel("items (log scale)" if log_y else "items")
    share = f"; {share_90pm1 * 100:.1f}% within 90° ± 1°" if share_90pm1 is not None else ""
    fit_title(ax, f"Update angles in one probe step{share}")
    ax.legend(loc="upper left", fontsize=8, frameon=False)
    return fig
