"""The training section of an audit report (``check --trace``): what the trace showed, as
format-neutral tables, and its figure (ρ, log–log slope and the 90° ± 1° share over
optimizer steps, the learning rate where known, a line at each alert's step).

Reads only :class:`~auditor.trace_section.TrainingSection` (a value at the bottom); the
figure is drawn with matplotlib only when a walker asks for it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from auditor.report.document import Block, Bullets, Figure, Heading, KeyValues, Paragraph
from auditor.report.formatting import MISSING, Table, fmt_num, fmt_pct, fmt_ratio
from auditor.trace_schema import RATIO_FIGURES
from auditor.trace_section import ORTHOGONAL_SHARE, TrainingAlert, TrainingPoint, TrainingSection

TITLE = "While it trained"
MAX_ROWS = 12
"""Records the table shows: evenly spaced over the trace, the first and last always."""
NOTE = (
    "Figures the training monitor recorded while the model trained (docs/monitor.md): Spearman ρ of item "
    "counts against norms, the log–log slope, and the share of update angles within 90° ± 1° (orthogonal "
    "updates only grow norms)."
)


def training_blocks(training: TrainingSection, audited_rho: float | None) -> list[Block]:
    """The section's blocks before its figure: a summary, the mismatch if any, the records, the alerts."""
    blocks: list[Block] = [Paragraph(NOTE, "note")]
    if training.mismatch is not None:
        blocks.append(Paragraph(f"This trace is of another model: {training.mismatch}. Its figures are shown; its "
                                "update angles are not used as evidence for C1, C4 or C5.", "missing"))
    blocks.append(summary_table(training, audited_rho))
    if training.points:
        blocks += [Heading(f"Over training ({training.point_kind} records)"), records_table(training)]
    if training.alerts:
        blocks += [Heading("Alerts"), Bullets(tuple(
            f"{a.alert} fired at step {a.step}" + (f" (epoch {a.epoch})" if a.epoch is not None else "")
            + f": {a.metric} = {alert_value(a)}; action {a.action}"
            for a in training.alerts
        ))]  # fmt: skip
    return blocks


def training_brief(training: TrainingSection, audited_rho: float | None) -> list[Block]:
    """The terminal's view: the summary's rows and one line per alert."""
    rows = summary_table(training, audited_rho).rows
    blocks: list[Block] = [KeyValues(tuple((str(r[0]), str(r[1])) for r in rows), TITLE)]
    if training.mismatch is not None:
        blocks.append(Paragraph(f"The trace is of another model: {training.mismatch}", "warning"))
    blocks += [Paragraph(f"Alert {a.alert} fired at step {a.step}: {a.metric} = {alert_value(a)} ({a.action})",
                         "note") for a in training.alerts]
    return blocks


def alert_value(alert: TrainingAlert) -> str:
    """The value an alert fired on: a ratio as the audit prints one (``∞×`` when only
    cosine's share was 0), any other figure as a number."""
    return fmt_ratio(alert.value) if alert.metric in RATIO_FIGURES else fmt_num(alert.value)


def _trace_rho(training: TrainingSection, last: TrainingPoint | None) -> tuple[str, str]:
    """The trace's ρ beside the audit's: the model's at the end of training where the trace
    shows it (the finished run the checkpoint holds), else its last record's, with its step."""
    if training.end_spearman is not None:
        return f"Spearman ρ at the end of training (step {training.end_step})", fmt_num(training.end_spearman)
    where = "" if last is None else f" (step {last.step})"
    return f"last Spearman ρ in the trace{where}", fmt_num(None if last is None else last.spearman)


def summary_table(training: TrainingSection, audited_rho: float | None) -> Table:
    """Where the trace came from, how training ended, its last ρ beside this audit's."""
    last = training.last
    how = training.end_reason if training.complete else "no end record: training died or is still running"
    rows = [
        ("trace", training.trace),
        ("written by", training.source + (f" (optimizer {training.optimizer})" if training.optimizer else "")),
        ("items watched", fmt_num(training.n_items)),
        ("records", f"{len(training.points)} {training.point_kind} records" + (
            f", every {training.interval} steps" if training.point_kind == "step" and training.interval else "")),
        ("ended", str(how) + (" (its last line was cut mid-write and dropped)" if training.truncated else "")),
        _trace_rho(training, last),
        ("Spearman ρ of this audit", fmt_num(audited_rho)),
    ]
    angles = training.angles
    if angles is not None:
        verdict = {True: "orthogonal", False: "not orthogonal", None: "neither clearly"}[angles.orthogonal]
        rows += [
            ("update angles measured", f"{fmt_num(angles.n)} over {angles.n_records} records"),
            ("within 90° ± 1° (pooled)", f"{fmt_pct(angles.share_90_1)} ({verdict}; orthogonal at ≥ "
                                         f"{fmt_pct(ORTHOGONAL_SHARE)})"),
            ("within 90° ± 10° (pooled)", fmt_pct(angles.share_90_10)),
            ("growth per update c/s² (median)",
             MISSING if angles.growth_per_update is None else f"{angles.growth_per_update:.3g}"),
        ]
    return Table(("", "value"), tuple(rows), (False, False), wrap=(1,))


def records_table(training: TrainingSection) -> Table:
    """A few records spread over training (the figure shows them all)."""
    points = training.points
    index = np.unique(np.linspace(0, len(points) - 1, min(MAX_ROWS, len(points))).round().astype(int))
    rows = tuple(
        (fmt_num(p.step), "" if p.epoch is None else str(p.epoch), fmt_num(p.spearman), fmt_num(p.loglog_slope),
         fmt_pct(p.angle_share_90_1), fmt_num(p.lr))
        for p in (points[i] for i in index)
    )
    return Table(("step", "epoch", "Spearman ρ", "log–log slope", "within 90° ± 1°", "learning rate"), rows,
                 (True, True, True, True, True, True))


def training_figure(training: TrainingSection) -> Figure:
    """The section's figure, planned (drawn by :func:`draw_training` on demand)."""
    alerts = f"; dotted lines mark the step of each alert ({len(training.alerts)})" if training.alerts else ""
    return Figure(
        "training", "training", "Bias over training steps",
        "Lines of Spearman ρ (counts vs norms), the log–log slope and the share of update angles within "
        f"90° ± 1° against the optimizer step, with the learning rate below where the trace knows it{alerts}.",
        lambda: draw_training(training),
    )


def draw_training(training: TrainingSection) -> Any:
    """ρ and slope (top), the 90° ± 1° share (middle), the learning rate (bottom, when known)."""
    from auditor.report.drawing import COLORS, new_figure, style_axes

    def column(name: str) -> np.ndarray:
        return np.array([np.nan if (v := getattr(p, name)) is None else v for p in training.points], dtype=float)

    steps = np.array([p.step for p in training.points], dtype=float)
    lr = column("lr")
    panels = 3 if np.isfinite(lr).any() else 2
    fig = new_figure(7.5, 2.0 + 1.6 * panels)
    axes = fig.subplots(panels, 1, sharex=True)
    series: tuple[tuple[int, str, str, str], ...] = ((0, "spearman", "Spearman ρ", COLORS["dot"]), (0, "loglog_slope", "log–log slope", COLORS["popular"]),
              (1, "angle_share_90_1", "share within 90° ± 1°", COLORS["cosine"]))
    if panels == 3:
        series += ((2, "lr", "learning rate", "#009E73"),)
    for row, name, label, color in series:
        values = column(name)
        axes[row].plot(steps, values, marker="o", markersize=3, color=color, label=label)
    axes[1].set_ylim(-0.02, 1.02)
    axes[0].set_ylabel("ρ, slope")
    axes[1].set_ylabel("share at 90°")
    if panels == 3:
        axes[2].set_ylabel("learning rate")
    for ax in axes:
        style_axes(ax)
        for alert in training.alerts:
            ax.axvline(alert.step, color="#CC79A7", linestyle=":", linewidth=1.2)
        ax.legend(loc="best", fontsize=8, frameon=False)
    axes[-1].set_xlabel("optimizer step")
    axes[0].set_title(f"Training trace ({training.source})", fontsize=10)
    return fig
