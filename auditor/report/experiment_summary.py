"""The report of ``popaudit experiment`` (conditions, lr-sweep): one document, written as
results.json and results.md, and the plots (angle histograms per setting, ρ and the
head-share ratio against the learning rate)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from auditor.io import write_atomic
from auditor.plugin_api import RenderContext
from auditor.report.console import renderables
from auditor.report.document import Document, Paragraph, Table
from auditor.report.formatting import MISSING, finite, fmt_pct, fmt_ratio, text_or_missing
from auditor.report.json import JsonRenderer
from auditor.report.markdown import MarkdownRenderer
from auditor.report.plot_text import fit_title
from auditor.report.drawing import figure_png, new_figure
from auditor.result import json_safe
from auditor.summaries import ANGLE_EDGES, SERVED_LISTS, ExperimentResult
from auditor.wording import interval_bounds, plural

if TYPE_CHECKING:
    from rich.console import RenderableType


def mean_pm(summary: dict[str, dict[str, float]], key: str, fmt: str | Callable[[float], str] = "{:.3f}",
            seeds: int = 2) -> str:
    """mean ± std over seeds; the value alone for one seed (no "± 0.000"); ``n/a`` when
    no seed measured it. ``fmt``: a format string, or a function (``fmt_pct`` for shares)."""
    s = summary.get(key)
    mean, std = (finite(s.get("mean")), finite(s.get("std"))) if s is not None else (None, None)
    if mean is None:
        return MISSING
    show = fmt.format if isinstance(fmt, str) else fmt
    if seeds < 2 or std is None:
        return show(mean)
    return f"{show(mean)} ± {show(std)}"


def mean_ratio(summary: dict[str, dict[str, float]], key: str, seeds: int = 2) -> str:
    """A ratio's mean ± std over seeds (:func:`mean_pm`); ``∞×`` as the audit prints it
    (:func:`~auditor.report.formatting.fmt_ratio`) when a seed's ratio is +inf (only the
    divisor 0), with the lowest seed's ratio when not every seed's is infinite."""
    s = summary.get(key) or {}
    if s.get("mean") != math.inf:
        return mean_pm(summary, key, "{:.2f}", seeds)
    low = finite(s.get("min"))
    return fmt_ratio(math.inf) + ("" if low is None else f" (min {low:.2f})")


def seeds_text(seeds: list[int]) -> str:
    """"seed 0; values of that one run" or "seeds 0, 1, 2; mean ± standard deviation"."""
    if len(seeds) == 1:
        return f"Seed {seeds[0]} (one run per setting)"
    return f"Seeds {', '.join(map(str, seeds))}; values are mean ± standard deviation over seeds"


def data_text(data: dict[str, Any], seeds: list[int], epochs: int) -> str:
    """What the runs trained on, its sizes, the seeds and the epochs, in one sentence."""
    if data.get("kind") == "file":
        cols = f", columns {data.get('user_col')}/{text_or_missing(data.get('item_col'))}" if data.get("user_col") else ""
        source = f"Data: {text_or_missing(data.get('path'))} ({text_or_missing(data.get('format'))}{cols})"
        same = "the same interactions for every seed"
    else:
        zipf = finite(data.get("zipf"))
        source = f"Data: synthetic (Zipf exponent {MISSING if zipf is None else format(zipf, 'g')}, regenerated for each seed)"
        same = ""
    sizes = (
        f"{fmt_count(data.get('n_users'))} users, {fmt_count(data.get('n_items'))} items, "
        f"{fmt_count(data.get('n_interactions'))} interactions"
    )
    return f"{source}: {sizes}{', ' + same if same else ''}. {seeds_text(seeds)}; {plural(epochs, 'epoch')} per run."


def fmt_count(value: Any) -> str:
    """A count with thousands separators (``n/a`` when absent)."""
    number = finite(value)
    return MISSING if number is None else f"{int(number):,}"


def _data(result: ExperimentResult) -> dict[str, Any]:
    """The result's data description (older results: the synthetic sizes)."""
    sz = result.sizes
    return result.data or {"kind": "synthetic", "n_users": sz.n_users, "n_items": sz.n_items,
                           "n_interactions": sz.n_interactions, "zipf": sz.zipf}


def _user_tower(c: dict[str, Any]) -> str:
    user = str(c.get("user_encoder", "embedding"))
    if c.get("user_optimizer", c["optimizer"]) != c["optimizer"]:
        user += f" ({c['user_optimizer']}, lr {c['user_lr']:g})"
    return user


def grid_table(result: ExperimentResult) -> tuple[list[str], list[list[str]]]:
    """The grid as a header and rows of text (one per setting), for any rendering."""
    k = result.k
    n = len(result.seeds)
    header = [
        "setting", "violates", "optimizer", "lr", "item encoder", "user encoder", "loss", "90°±1°", "90°±10°",
        "ρ", "ρ 95% CI", f"head@{k} dot, seen excluded", f"head@{k} cos, seen excluded", "ratio",
    ]
    rows = []
    for row in result.rows:
        s, c = row["summary"], row["config"]
        opt = c["optimizer"] + (f" (wd {c['weight_decay']:g})" if c["weight_decay"] else "")
        bounds = np.array([r["spearman_ci"] for r in row["runs"]], dtype=np.float64)
        bounds = bounds[~np.isnan(bounds).any(axis=1)]
        ci = interval_bounds(bounds[:, 0].mean(), bounds[:, 1].mean(), 3) if len(bounds) else MISSING
        rows.append([
            row["label"], row["violates"], opt, f"{c['lr']:g}", c["item_encoder"], _user_tower(c), c["loss"],
            mean_pm(s, "share_90pm1", seeds=n), mean_pm(s, "share_90pm10", seeds=n), mean_pm(s, "spearman", seeds=n), ci,
            # Shares as check prints them (fmt_pct: the decimals a share needs), so the ratio beside them reads.
            mean_pm(s, f"head_share_1pct_dot@{k}", fmt_pct, seeds=n),
            mean_pm(s, f"head_share_1pct_cosine@{k}", fmt_pct, seeds=n),
            mean_ratio(s, f"head_share_1pct_ratio@{k}", seeds=n),
        ])
    return header, rows


def _intro(result: ExperimentResult) -> str:
    sz = result.sizes
    k = result.k
    return (
        f"{data_text(_data(result), result.seeds, sz.epochs)} Two-tower model, dim {sz.dim}, init std "
        f"{sz.init_std:g}, batch size {sz.batch_size}, temperature {sz.temperature:g}. \"violates\": the "
        f"conditions among C1–C4 the run's settings violate, as check finds them, then C5 as check grades each run "
        f"(C5 where every seed's run violates it, 'C5 (n of m seeds)' where some do); with neither, none where C5 "
        f"holds for every seed, else unknown. "
        f"Update angles from one training step after training (float64), over the items of that step's own "
        f"batch only: popaudit check of the same checkpoint steps another batch (its probe batch) and counts "
        f"every item the step moved, also those moved only by momentum, Adam's state or weight decay, so its "
        f"angle figures differ from these (compare a run with a run, a check with a check); "
        f"ρ = Spearman frequency–norm correlation {_ci_words(sz.n_bootstrap)}; C5 reads ρ's significance from its "
        f"p-value (Spearman's t-test), never from the CI, so the bootstrap (0 included) changes no grade and no "
        f"label; head = top 1% of items by frequency, "
        f"share of the top-{k} slots of the lists served to {SERVED_LISTS}." + _k_note(result)
    )


def _ci_words(n_bootstrap: int) -> str:
    """How ρ's interval was drawn: a percentile bootstrap, or none at all (0 resamples: the
    CI column reads n/a, and the sentence must not describe an interval never computed)."""
    if n_bootstrap == 0:
        return "(bootstrap 0: no CI was computed, the ρ 95% CI column reads n/a)"
    return f"with a {n_bootstrap}-resample percentile bootstrap 95% CI (mean of the per-seed bounds)"


def _k_note(result: ExperimentResult) -> str:
    """Why K is not the one asked: capped at 10% of the catalogue, the verdict's rule."""
    k, asked = result.k, result.sizes.k
    n_items = int(_data(result).get("n_items", result.sizes.n_items))
    if k >= min(asked, n_items):  # as asked, or the whole catalogue (results written before the cap)
        return ""
    return (f" K = {k}, not the {asked} asked: a K above 10% of the {n_items:,}-item catalogue covers much of it "
            f"and shows little skew, so popaudit check never quotes it.")


_RIGHT = {3, 7, 8, 9, 11, 12, 13}


def grid_block(header: list[str], rows: list[list[str]], right: set[int]) -> Table:
    """A grid as a table block (columns in ``right`` hold numbers). Every column may
    wrap: a terminal narrower than the grid folds cells rather than cutting them."""
    n = len(header)
    return Table(tuple(header), tuple(map(tuple, rows)), tuple(i in right for i in range(n)), wrap=tuple(range(n)))


def experiment_document(result: ExperimentResult) -> Document:
    """The grid as a report document: what it trained on, and one row per setting
    (the figures are files of their own, :func:`write_results`)."""
    header, rows = grid_table(result)
    title = f"popaudit experiment {result.name}"
    intro, table = Paragraph(_intro(result)), grid_block(header, rows, _RIGHT)
    return Document(
        kind="experiment", title=title, lead=(intro, table), brief=(intro, replace(table, title=title)),
        payload=lambda: json_safe(result.to_dict()),
    )  # fmt: skip


def to_markdown(result: ExperimentResult) -> str:
    """The grid as GitHub-flavoured Markdown, with the data and settings used."""
    return MarkdownRenderer().render_document(experiment_document(result), RenderContext())


def to_console(result: ExperimentResult) -> list[RenderableType]:
    """What the console shows: the data sentence and the grid."""
    return renderables(experiment_document(result))


def write_document(document: Document, out_dir: Path) -> list[Path]:
    """``document`` as results.json and results.md in ``out_dir`` (atomically each)."""
    json_path, md_path = out_dir / "results.json", out_dir / "results.md"
    write_atomic(json_path, JsonRenderer().render_document(document, RenderContext()))
    write_atomic(md_path, MarkdownRenderer().render_document(document, RenderContext(destination=md_path)))
    return [json_path, md_path]


def write_results(result: ExperimentResult, out_dir: Path) -> list[Path]:
    """Write results.json, results.md and the plots into ``out_dir`` (atomically each)."""
    out_dir = Path(out_dir)
    written = write_document(experiment_document(result), out_dir)
    if result.name == "conditions":
        written.append(_plot_angles(result, out_dir / "angle_histograms.png"))
    written.append(_plot_rho(result, out_dir / "rho_vs_lr.png"))
    return written


def _breaks_orthogonality(row: dict[str, Any]) -> bool:
    """Whether a grid row's runs violate one of C1–C4 (its "violates" names one): its angle
    histogram is coloured apart, and the ρ-against-lr plot leaves it out."""
    return any(c in str(row["violates"]) for c in ("C1", "C2", "C3", "C4"))


def _plot_angles(result: ExperimentResult, path: Path) -> Path:
    """One angle histogram per setting (counts pooled over seeds), log-scaled counts."""
    n = len(result.rows)
    cols = min(3, n)
    nrows = math.ceil(n / cols)
    fig = new_figure(4.2 * cols, 2.8 * nrows)
    axes = fig.subplots(nrows, cols, squeeze=False, sharex=True)
    centres = (ANGLE_EDGES[:-1] + ANGLE_EDGES[1:]) / 2
    for ax, row in zip(axes.flat, result.rows):
        counts = np.asarray(row["angle_histogram"])
        ax.bar(centres, counts, width=1.0, color="tab:orange" if _breaks_orthogonality(row) else "tab:blue")
        ax.set_yscale("symlog", linthresh=1)
        share = row["summary"].get("share_90pm1", {}).get("mean")
        fit_title(ax, f"{row['label']}\n90°±1°: {fmt_pct(share)}", fontsize=9)
        ax.axvline(90, color="grey", lw=0.6, ls="--")
        ax.set_xlim(0, 180)
        ax.set_xticks([0, 45, 90, 135, 180])
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel("angle between q and Δq (degrees)")
    fit_title(fig, "Update angles in one training step", fontsize=11)
    write_atomic(path, figure_png(fig))
    return path


def _plot_rho(result: ExperimentResult, path: Path) -> Path:
    """Spearman rho (and the dot/cosine head-share ratio) against the learning rate."""
    k = result.k
    # conditions: only rows that differ from the reference in their lr alone
    rows = [r for r in result.rows if result.name == "lr-sweep"
            or not _breaks_orthogonality(r) and r["config"].get("user_encoder", "embedding") == "embedding"]
    rows.sort(key=lambda r: r["config"]["lr"])
    lrs = np.array([r["config"]["lr"] for r in rows])
    rho = np.array([r["summary"]["spearman"]["mean"] for r in rows])
    rho_sd = np.array([r["summary"]["spearman"]["std"] for r in rows])
    ratio_key = f"head_share_1pct_ratio@{k}"
    ratio = np.array([r["summary"].get(ratio_key, {"mean": np.nan})["mean"] for r in rows])
    fig = new_figure(5.5, 3.6)
    ax = fig.add_subplot()
    ax.errorbar(lrs, rho, yerr=rho_sd, marker="o", color="tab:blue", capsize=3, label="Spearman ρ")
    ax.set_xscale("log")
    ax.set_xlabel("learning rate")
    ax.set_ylabel("frequency–norm Spearman ρ", color="tab:blue")
    ax.axhline(0, color="grey", lw=0.6)
    ax2 = ax.twinx()
    ax2.plot(lrs, ratio, marker="s", color="tab:red", ls="--", label=f"head share ratio @{k}")
    ax2.set_ylabel(f"head_share_1pct dot / cosine @{k}", color="tab:red")
    fit_title(ax, "Where the popularity bias appears (C5)", fontsize=10)
    write_atomic(path, figure_png(fig))
    return path
