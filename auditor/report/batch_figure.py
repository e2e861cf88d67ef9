"""The batch summary's figure: Spearman's rho and the head-share ratio across the manifest
order (:func:`order_figure`, drawn from an :class:`OrderSeries`, which
:func:`auditor.report.batch_summary.summary_figure` builds from a summary).

The head-share line joins two neighbouring rows only where the row-by-row table states a
change between them: between rows ``popaudit diff`` would not compare (another index,
popularity definition, head size...) the line is broken at a dotted separator and the
later point is ringed, and an approximate index's points are hollow, so a drop that is the
index's, not the model's, is never drawn as a trend. The Spearman line is broken likewise
where diff would not compare the rows' rho (another item id mapping).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

SHARE_COLOR = "#0072B2"
SPEARMAN_COLOR = "#D55E00"
BREAK_COLOR = "#555555"


@dataclass(frozen=True)
class OrderSeries:
    """What the manifest-order figure plots, one entry per audited row in manifest order."""

    ticks: list[str]
    """The x-axis names (every n-th beyond ``MAX_TICK_LABELS``, see ``tick_step``)."""
    tick_step: int
    spearman: list[float | None]
    share_metric: str | None
    """The head-share ratio's name (None: no shared K, no head-share line)."""
    share: list[float | None]
    apart: list[bool]
    """``apart[i]``: diff would not compare row i's head share with row i - 1's (line broken)."""
    approximate: list[bool]
    """``approximate[i]``: row i's lists were retrieved by an approximate index."""
    spearman_apart: list[bool]
    """``spearman_apart[i]``: diff would not compare row i's Spearman rho with row i - 1's
    (another item id mapping): the Spearman line is broken there too."""


def _finite(value: float | None) -> bool:
    return value is not None and bool(np.isfinite(value))


def comparable_runs(values: list[float | None], apart: list[bool]) -> list[list[int]]:
    """The positions a line (head share, Spearman) joins, as runs: a run ends before a missing or
    non-finite value and before a point diff would not compare with the one before it."""
    runs: list[list[int]] = []
    for i, value in enumerate(values):
        if not _finite(value):
            continue
        joined = bool(runs) and i > 0 and runs[-1][-1] == i - 1 and not apart[i]
        if joined:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def order_figure(series: OrderSeries) -> Any:
    """Spearman and the head-share ratio across manifest rows (matplotlib Agg figure)."""
    from auditor.report.plot_text import fit_title
    from auditor.report.drawing import new_figure

    fig = new_figure(7.5, 4.4)
    ax = fig.add_subplot(1, 1, 1)
    ax.grid(True, color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    rows = list(range(len(series.ticks)))  # one position per audited model, in manifest order
    # One line per run of comparable rows (none measured: an empty line keeps the legend's entry).
    spearman = [np.nan if s is None else s for s in series.spearman]
    for n, run in enumerate(comparable_runs(series.spearman, series.spearman_apart) or [[]]):
        ax.plot(run, [spearman[i] for i in run], marker="o", color=SPEARMAN_COLOR,
                label="Spearman ρ (norm vs frequency)" if n == 0 else None)
    for i, apart in enumerate(series.spearman_apart):
        if apart and _finite(series.spearman[i]):
            ax.axvline(i - 0.5, color=BREAK_COLOR, linestyle=":", linewidth=1.0)
    ax.set_xlabel("model (label, else file name), in manifest order")
    ax.set_ylabel("Spearman ρ")
    ax.axhline(0.0, color="#999999", linewidth=0.8)
    step = series.tick_step
    ax.set_xticks(rows[::step], series.ticks[::step], rotation=30, ha="right", fontsize="small")
    if series.share_metric:
        _share_line(ax.twinx(), series)
    # Below the axes, so it never hides a point.
    fig.legend(loc="outside lower center", ncols=2, fontsize="small", frameon=False)
    fit_title(ax, "Bias across the manifest order")
    return fig


def _share_line(twin: Any, series: OrderSeries) -> None:
    """The head-share ratio: one dashed line per run of comparable rows, broken (dotted
    separator, ringed point) where diff would not compare two rows; approximate rows hollow."""
    share = series.share
    for n, run in enumerate(comparable_runs(share, series.apart)):
        twin.plot(run, [share[i] for i in run], marker="s", linestyle="--", color=SHARE_COLOR,
                  label=series.share_metric if n == 0 else None)
    broken = [i for i, (value, apart) in enumerate(zip(share, series.apart)) if apart and _finite(value)]
    for i in broken:
        twin.axvline(i - 0.5, color=BREAK_COLOR, linestyle=":", linewidth=1.0)
    if broken:
        twin.scatter(broken, [share[i] for i in broken], s=150, facecolors="none", edgecolors=BREAK_COLOR,
                     linewidths=1.2, zorder=3, label="not comparable with the row before (as in popaudit diff): "
                     "line broken")
    hollow = [i for i, (value, approx) in enumerate(zip(share, series.approximate)) if approx and _finite(value)]
    if hollow:
        twin.plot(hollow, [share[i] for i in hollow], marker="s", linestyle="none", color=SHARE_COLOR,
                  markerfacecolor="white", zorder=4, label="approximate index (the index's figure)")
    twin.set_ylabel(f"{series.share_metric} (dot / cosine)")


def figure_caption(plotted: str, share_metric: str | None, pairs: list[str], approximate: list[str],
                   spearman_pairs: list[str] | None = None) -> str:
    """The figure's caption: what it plots (``plotted``), and where its head-share line is
    broken (the row ``pairs`` diff would not compare) or hollow (``approximate`` rows), and
    where its Spearman line is broken (``spearman_pairs``)."""
    said = f"{plotted} for each model, named on the x-axis, in manifest order"
    if spearman_pairs:
        said += (f"; the Spearman ρ line is broken (dotted separator) between rows popaudit diff would not "
                 f"compare ({', '.join(spearman_pairs)}): no change is drawn there")
    if not share_metric:
        return said
    if pairs:
        said += (f"; the {share_metric} line is broken (dotted separator, ringed point) between rows "
                 f"popaudit diff would not compare ({', '.join(pairs)}): no change is drawn there")
    if approximate:
        said += f"; hollow squares: approximate index (row{'s' if len(approximate) > 1 else ''} {', '.join(approximate)})"
    return said
