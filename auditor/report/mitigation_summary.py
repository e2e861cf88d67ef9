"""The report of ``popaudit experiment mitigations``: one document (accuracy against
exposure per mitigation), written as results.json and results.md, and
accuracy_vs_head_share.png."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from auditor.io import write_atomic
from auditor.plugin_api import RenderContext
from auditor.report.console import renderables
from auditor.report.document import Document, Paragraph
from auditor.report.experiment_summary import data_text, fmt_count, grid_block, mean_pm, write_document
from auditor.report.formatting import MISSING, fmt_pct
from auditor.report.markdown import MarkdownRenderer
from auditor.report.plot_text import fit_title
from auditor.report.drawing import figure_png, new_figure
from auditor.result import json_safe
from auditor.summaries import SERVED_LISTS, MitigationResult

if TYPE_CHECKING:
    from rich.console import RenderableType

_KIND = {"reference": "none (reference)", "training": "training", "serving": "serving", "baseline": "baseline"}
_RIGHT = {3, 4, 5, 6, 7, 8}


def mitigation_table(result: MitigationResult) -> tuple[list[str], list[list[str]]]:
    """Header and text rows: one per mitigation."""
    k, n = result.k, len(result.seeds)
    header = ["mitigation", "side", "model", f"NDCG@{k}", f"recall@{k}", f"head share 1%@{k}", f"Gini@{k}",
              "ρ (model)", "NDCG vs reference"]
    ref = next((r for r in result.rows if r["name"] == "reference"), None)
    ref_ndcg = ref["summary"]["ndcg"]["mean"] if ref else float("nan")
    rows = []
    for row in result.rows:
        s = row["summary"]
        share = s["ndcg"]["mean"] / ref_ndcg if ref_ndcg and not math.isnan(ref_ndcg) else float("nan")
        rows.append([
            row["label"], _KIND[row["kind"]], "–" if row["kind"] == "baseline" else row["model"],
            mean_pm(s, "ndcg", seeds=n), mean_pm(s, "recall", seeds=n), mean_pm(s, "head_share_1pct", fmt_pct, seeds=n),
            mean_pm(s, "gini", seeds=n), "–" if row["kind"] == "baseline" else mean_pm(s, "spearman", seeds=n),
            MISSING if math.isnan(share) else f"{share:.1%}",
        ])
    return header, rows


def split_text(run: dict[str, Any]) -> str:
    """One seed's split in words: interactions trained on and held out (these two make
    the whole log), and the held-out pairs evaluated (repeats of a training pair left out)."""
    if not run:
        return ""
    trained, held = fmt_count(run.get("n_train_interactions")), run.get("n_holdout_interactions")
    pairs, users = fmt_count(run.get("n_holdout_pairs")), fmt_count(run.get("n_holdout_users"))
    if held is None:  # results written before the split recorded what it held out
        return f" (seed {run['seed']}: {trained} interactions trained on; {pairs} held-out interactions of {users} users)"
    repeats = int(run.get("n_repeats_dropped") or 0)
    evaluated = f"{pairs} distinct held-out (user, item) pairs of {users} users evaluated"
    if repeats:
        evaluated += f", {repeats:,} repeats of a training pair left out"
    return f" (seed {run['seed']}: {trained} interactions trained on, {fmt_count(held)} held out; {evaluated})"


def _intro(result: MitigationResult) -> str:
    sz, k = result.sizes, result.k
    first = result.rows[0]["runs"][0] if result.rows else {}
    how = "the latest" if result.split == "time" else "a seeded random"
    return (
        f"{data_text(result.data, result.seeds, sz.epochs)} Holdout: {how} {result.fraction:g} of each user's "
        f"interactions, never trained on{split_text(first)}. Every model: two-tower, dim {sz.dim}, batch size "
        f"{sz.batch_size}, temperature {sz.temperature:g}, reference lr {sz.lr:g}. Accuracy over the held-out "
        f"users (RecBole's NDCG and recall, candidates without each user's training items); exposure over "
        f"the top-{k} lists served to {SERVED_LISTS}: head = top 1% of items by training frequency, Gini of item "
        "exposure. "
        "Training-side rows are separate models; serving-side rows rank the reference model's vectors."
    )


def mitigation_document(result: MitigationResult) -> Document:
    """The mitigations as a report document: the data and split, and one row per
    mitigation (the plot is a file of its own, :func:`write_results`)."""
    header, rows = mitigation_table(result)
    title = "popaudit experiment mitigations"
    intro, table = Paragraph(_intro(result)), grid_block(header, rows, _RIGHT)
    return Document(
        kind="mitigation", title=title, lead=(intro, table), brief=(intro, replace(table, title=title)),
        payload=lambda: json_safe(result.to_dict()),
    )  # fmt: skip


def to_markdown(result: MitigationResult) -> str:
    return MarkdownRenderer().render_document(mitigation_document(result), RenderContext())


def to_console(result: MitigationResult) -> list[RenderableType]:
    return renderables(mitigation_document(result))


def write_results(result: MitigationResult, out_dir: Path) -> list[Path]:
    """Write results.json, results.md and the plot into ``out_dir`` (atomically each)."""
    out_dir = Path(out_dir)
    written = write_document(mitigation_document(result), out_dir)
    png = out_dir / "accuracy_vs_head_share.png"
    write_atomic(png, _plot(result))
    return [*written, png]


_COLOURS = {"reference": "black", "training": "tab:orange", "serving": "tab:blue", "baseline": "tab:grey"}


def _plot(result: MitigationResult) -> bytes:
    """NDCG@K against head_share_1pct@K, one point per mitigation (mean over seeds, std bars)."""
    k = result.k
    fig = new_figure(6.0, 4.2)
    ax = fig.add_subplot()
    for row in result.rows:
        s = row["summary"]
        x, y = s["head_share_1pct"], s["ndcg"]
        if math.isnan(x["mean"]) or math.isnan(y["mean"]):
            continue
        colour = _COLOURS[row["kind"]]
        ax.errorbar(x["mean"], y["mean"], xerr=x["std"] or None, yerr=y["std"] or None, marker="o", color=colour,
                    capsize=3, ls="none")
        ax.annotate(row["name"], (x["mean"], y["mean"]), textcoords="offset points", xytext=(5, 4), fontsize=8)
    for kind, colour in _COLOURS.items():
        if any(r["kind"] == kind for r in result.rows):
            ax.plot([], [], marker="o", ls="none", color=colour, label=kind)
    ax.set_xlabel(f"head_share_1pct@{k} (share of top-{k} slots taken by the top 1% of items)")
    ax.set_ylabel(f"NDCG@{k} (held out)")
    ax.legend(fontsize=8, loc="best")
    fit_title(ax, "Accuracy against exposure, per mitigation", fontsize=10)
    ax.margins(x=0.15, y=0.1)
    return figure_png(fig)
