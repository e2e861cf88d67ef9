"""The gain/lose figure (docs/report.md): each item's exposure gain under dot serving over
cosine against its training frequency (log x), the items the tables list marked; drawn
with matplotlib's Agg canvas like every report figure (:mod:`auditor.report.drawing`)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from matplotlib.figure import Figure

from auditor.report.drawing import COLORS, MAX_SCATTER_POINTS, new_figure, style_axes


def exposure_gain_figure(
    gain: np.ndarray,
    frequencies: np.ndarray,
    k: int,
    listed: Iterable[int] = (),
    *,
    max_points: int = MAX_SCATTER_POINTS,
    seed: int = 0,
) -> Figure:
    """Exposure gain (dot − cosine, in lists) against training frequency + 1 on a log axis
    (cold items sit at 1); ``listed`` item rows (the tables' items) are ringed. A seeded
    sample of at most ``max_points`` items is drawn, the listed ones always."""
    gain = np.asarray(gain, dtype=np.float64).ravel()
    x = np.asarray(frequencies, dtype=np.float64).ravel() + 1.0
    rows = np.flatnonzero(np.isfinite(gain) & np.isfinite(x))
    if rows.size > max_points:
        rows = np.sort(np.random.default_rng(seed).choice(rows, max_points, replace=False))
    marked = np.asarray(sorted(set(int(r) for r in listed)), dtype=np.int64)
    fig = new_figure()
    ax = fig.add_subplot()
    style_axes(ax)
    ax.set_xscale("log")
    up = gain[rows] > 0
    down = gain[rows] < 0
    same = ~(up | down)
    ax.scatter(x[rows][same], gain[rows][same], s=4, alpha=0.3, color="#999999", linewidths=0, rasterized=True,
               label="unchanged")
    ax.scatter(x[rows][up], gain[rows][up], s=6, alpha=0.5, color=COLORS["dot"], linewidths=0, rasterized=True,
               label="served more by dot")
    ax.scatter(x[rows][down], gain[rows][down], s=6, alpha=0.5, color=COLORS["cosine"], linewidths=0,
               rasterized=True, label="served more by cosine")
    if marked.size:
        ax.scatter(x[marked], gain[marked], s=36, facecolors="none", edgecolors="black", linewidths=0.8,
                   label="items in the tables")
    ax.axhline(0.0, color="black", linewidth=0.6)
    ax.set_xlabel("training frequency + 1 (log)")
    ax.set_ylabel(f"exposure gain, dot − cosine (top-{k} lists)")
    ax.set_title(f"Exposure gain of dot over cosine serving, top-{k}")
    ax.legend(loc="best", fontsize=8, frameon=False)
    return fig
