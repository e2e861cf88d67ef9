"""The accuracy section in every format: held-out accuracy beside exposure, the
trade-off table per K and its figure (accuracy against head share and Gini, Pareto front
marked). The choice itself is made in :mod:`auditor.tradeoff`; this module only shows it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, TypeVar

from auditor.errors import setting
from auditor.report.formatting import Table, fmt_num, fmt_pct
from auditor.report.measure_rows import scoring_cells
from auditor.report.served_lists import lists_only
from auditor.result import Accuracy, AuditResult
from auditor.served_section import ServedSection
from auditor.wording import interval_bounds

if TYPE_CHECKING:  # drawn on demand: a report that shows no figure never loads matplotlib
    from matplotlib.figure import Figure

T = TypeVar("T")
TITLE = "Accuracy and the trade-off"
SCORING_LABELS = {"dot": "dot product", "cosine": "cosine", "popular": "most popular"}


def scoring_label(name: str) -> str:
    """``alpha_0.5`` -> ``norm-aware α=0.5``; built-in scorings by their words."""
    if name.startswith("alpha_"):
        return f"norm-aware α={name[len('alpha_'):]}"
    return SCORING_LABELS.get(name, name)


def dropped_words(accuracy: Accuracy) -> str:
    """The held-out interactions dropped, in the section's title: every reason counted (a
    recorded split's repeats beside those without a table row), so the count agrees with
    the split's own sentence in the warnings."""
    if not accuracy.n_repeats_dropped:
        return f"{fmt_num(accuracy.n_dropped)} held-out interactions dropped"
    return (f"{fmt_num(accuracy.n_dropped_all)} of {fmt_num(accuracy.n_holdout_interactions)} held-out interactions "
            f"dropped: {fmt_num(accuracy.n_repeats_dropped)} repeating a training pair, {fmt_num(accuracy.n_dropped)} "
            "without a table row")


def summary_table(accuracy: Accuracy, result: AuditResult | None = None) -> Table:
    """How the held-out evaluation ran: protocol, users, what was dropped (``result``: a
    lists-only audit's say what was excluded from which list, and no tolerance of a dot it lacks)."""
    lists = result is not None and lists_only(result)
    rows = [
        ("held-out log", accuracy.holdout or "—"),
        ("protocol", accuracy.protocol),
        ("users evaluated", fmt_num(accuracy.n_users_evaluated)),
        ("held-out interactions read", fmt_num(accuracy.n_holdout_interactions)),
        ("held-out interactions dropped (empty id, item without a table row, or user without a user-table row)",
         fmt_num(accuracy.n_dropped)),
        *([("held-out interactions dropped by the recorded split as repeats of a training pair",
            fmt_num(accuracy.n_repeats_dropped))] if accuracy.n_repeats_dropped else []),
        ("distinct held-out pairs evaluated", fmt_num(accuracy.n_pairs_evaluated)),
        ("users dropped (no user-table row)", fmt_num(accuracy.n_dropped_users)),
        ("held-out users left out: never in the training log", fmt_num(accuracy.n_users_not_in_training)),
        (f"held-out users left out: not among the queries (sampled out by {setting('max_queries')})",
         fmt_num(accuracy.n_users_not_sampled)),
        ("training items excluded from candidates", "yes" if accuracy.seen_excluded else f"no ({setting('keep_seen')})"),
        ("tolerance (share of dot's NDCG to keep)", "—" if accuracy.tolerance is None else fmt_pct(accuracy.tolerance)),
    ]
    if lists and result is not None and result.served is not None:  # no candidates, no dot: what each list is
        rows[-2:] = [("training items excluded", _lists_seen(accuracy, result.served))]
    return Table(("evaluation setting", "value"), tuple(rows), (False, False))


def _lists_seen(accuracy: Accuracy, served: ServedSection) -> str:
    """What a lists-only evaluation excluded: from the most-popular list only; the served lists as served."""
    popular = ("from the most-popular list" if accuracy.popular_seen_excluded
               else f"from no list ({setting('keep_seen')})")
    held = ("" if served.n_training_slots is None or not served.n_slots else
            f": {fmt_num(served.n_training_slots)} of their {fmt_num(served.n_slots)} slots are the user's own "
            "training items")
    return f"{popular}; the served lists as served{held}"


def tradeoff_table(result: AuditResult, k: int) -> Table:
    """One K: every scoring's accuracy beside its exposure, with the front and the choice."""
    accuracy, retrieval = result.accuracy, result.retrieval
    assert accuracy is not None
    exposure = retrieval.at[k].scorings() if retrieval is not None and k in retrieval.at else {}
    served = result.served.at.get(k) if result.served is not None and lists_only(result) else None
    if served is not None:  # lists alone: the figures of the section "Served lists"
        exposure = {"served": served.served, "popular": served.popular}
    on_front = set(accuracy.pareto) if accuracy.quoted_k == k else set()
    # The head-share cells as the K's retrieval table prints them (served lists alone: as theirs, fmt_pct).
    share = f"head_share_{accuracy.head_percent}pct"  # the head the trade-off judged (the severity's)
    shares = ({name: fmt_pct(listed.get(share)) for name, listed in exposure.items()} if served is not None
              else scoring_cells(exposure, share))
    rows = []
    for name, acc in _ordered(accuracy.at[k]):
        listed = exposure.get(name)
        mark = _choice_tag(accuracy, name) if accuracy.quoted_k == k else ""
        if name in on_front:
            mark = ", ".join(filter(None, (mark, "Pareto front")))
        rows.append((
            scoring_label(name), fmt_num(acc.recall, 4), fmt_num(acc.ndcg, 4), fmt_num(acc.hit_rate, 4),
            fmt_num(acc.mrr, 4), shares.get(name, "—") if listed else "—",
            fmt_num(listed.get("gini"), 3) if listed else "—", mark,
        ))  # fmt: skip
    return Table(
        ("scoring", f"recall@{k}", f"NDCG@{k}", f"hit rate@{k}", f"MRR@{k}", f"head share {accuracy.head_percent}%",
         "Gini", ""),
        tuple(rows),
        (False, True, True, True, True, True, True, False),
        (f"Top-{k} lists, training items {'excluded' if accuracy.seen_excluded else 'kept'}: accuracy over the "
         "evaluated users' held-out items; head share and Gini over every queried user's list, as in the retrieval "
         "section.") if served is None else
        (f"Top-{k} lists: the served lists as served, the most-popular list "
         f"{'without' if accuracy.popular_seen_excluded else 'with'} each user's training items; accuracy over the evaluated "
         "users' held-out items; head share and Gini over every served user's list, as in the section \"Served "
         "lists\"."),
    )


def _choice_tag(accuracy: Accuracy, name: str) -> str:
    """The trade-off table's tag of the scoring ``name`` at the quoted K: "recommended"; on a
    ``mitigate`` output, its pick is named, "not recommended" only where it would change the
    serving (the output served by its own scoring, the incumbent, is how it is meant to be served)."""
    if name == accuracy.recommended:
        return "recommended"
    if name != accuracy.picked_on_output:
        return ""
    return "picked on this output" + ("" if name == (accuracy.incumbent or "dot") else ", not recommended")


def changes_table(accuracy: Accuracy) -> Table:
    """Each other scoring against dot at the trade-off's K: NDCG and head share change,
    with the paired bootstrap 95% intervals the recommendation rests on."""
    rows = []
    for name, change in _ordered(accuracy.changes):
        ndcg_ci, head_ci = change.ndcg_delta_ci, change.head_share_delta_ci
        rows.append((
            scoring_label(name), f"{change.ndcg_delta:+.4f}", _interval(ndcg_ci, 1.0, 4),
            f"{100 * change.head_share_delta:+.2f}", _interval(head_ci, 100.0, 2),
            "yes" if change.clearly_less_head else "no",
        ))  # fmt: skip
    how = (f"paired bootstrap over users, {accuracy.n_bootstrap:,} resamples" if accuracy.n_bootstrap
           else f"no bootstrap ({setting('bootstrap')} 0): point estimates only")
    if accuracy.ci_undefined_reason:
        how = (f"{how} ({accuracy.ci_undefined_reason})" if accuracy.n_bootstrap
               else f"none ({accuracy.ci_undefined_reason})")
    return Table(
        ("scoring", "NDCG − dot", "95% CI", f"head share {accuracy.head_percent}% − dot (points)", "95% CI",
         "clearly less head"),
        tuple(rows), (False, True, True, True, True, False),
        f"At K={accuracy.quoted_k}; intervals: {how}. A scoring is recommended only when its head-share "
        "interval lies below 0 and it keeps the tolerance of dot's NDCG.",
    )


def _interval(ci: tuple[float, float] | None, scale: float, decimals: int) -> str:
    """A change's interval as the recommendation sentence prints it (the one rule)."""
    return "n/a" if ci is None else interval_bounds(scale * ci[0], scale * ci[1], decimals, sign="+")


def _ordered(by_scoring: Mapping[str, T]) -> list[tuple[str, T]]:
    """dot, the norm-aware scorings from α near 1 down, cosine, then most popular."""

    def key(item: tuple[str, T]) -> tuple[int, float]:
        name = item[0]
        if name.startswith("alpha_"):
            return (1, -float(name[len("alpha_"):]))
        return ({"dot": 0, "cosine": 2, "popular": 3}.get(name, 4), 0.0)

    return sorted(by_scoring.items(), key=key)


def tradeoff_figure(result: AuditResult) -> Figure:
    """NDCG@K against head share and against Gini, one point per scoring, the Pareto
    front joined and the recommended scoring ringed (K: the trade-off's K)."""
    from auditor.report.plot_text import fit_title
    from auditor.report.drawing import COLORS, new_figure, style_axes

    accuracy, retrieval = result.accuracy, result.retrieval
    assert accuracy is not None and retrieval is not None and accuracy.quoted_k is not None
    k = accuracy.quoted_k
    exposure = retrieval.at[k].scorings()
    named = [(n, a, exposure[n]) for n, a in _ordered(accuracy.at[k]) if n in exposure]
    fig = new_figure(8.4, 3.8)
    axes = fig.subplots(1, 2, sharey=True)
    share = f"head_share_{accuracy.head_percent}pct"
    for ax, (metric, label, scale) in zip(axes, ((share, f"head share, top {accuracy.head_percent}% (%)", 100.0),
                                                 ("gini", "Gini index of exposure", 1.0))):
        style_axes(ax)
        xs = [listed.number(metric) * scale for _, _, listed in named]
        ys = [acc.ndcg for _, acc, _ in named]
        for (name, _, _), x, y in zip(named, xs, ys):
            color = COLORS.get(name, "#009E73")
            ax.scatter([x], [y], s=36, color=color, zorder=3)
            ax.annotate(scoring_label(name), (x, y), textcoords="offset points", xytext=(5, 4), fontsize=7)
            if name == accuracy.recommended:
                ax.scatter([x], [y], s=140, facecolors="none", edgecolors="black", linewidths=1.2, zorder=4)
        front = sorted((x, y) for (name, _, _), x, y in zip(named, xs, ys) if name in accuracy.pareto)
        if metric == share and len(front) > 1:
            ax.plot(*zip(*front), color="#444444", linewidth=1, linestyle="--", label="Pareto front")
            ax.legend(loc="lower right", fontsize=7.5, frameon=False)
        ax.set_xlabel(label)
    axes[0].set_ylabel(f"NDCG@{k} (held-out)")
    fit_title(fig, f"What the cure costs at K={k}: accuracy against exposure (up and left is better)")
    return fig


def has_figure(result: AuditResult) -> bool:
    """Whether the trade-off figure can be drawn (accuracy judged at a measured K)."""
    accuracy, retrieval = result.accuracy, result.retrieval
    return (
        accuracy is not None and retrieval is not None and accuracy.quoted_k is not None
        and accuracy.quoted_k in accuracy.at and accuracy.quoted_k in retrieval.at
    )
