"""What the cure costs: the accuracy/exposure trade-off of the serving scorings, and the
one policy that picks a scoring from it (docs/report.md, "Trade-off").

Each scoring (dot, cosine, popular, alpha_<a>) is a point: held-out NDCG@K against the
head share of its lists at the same K, of the head that graded the severity
(:func:`auditor.harm.graded_head`: the top 10% where they graded it, else the top 1%), so
that the advice judges the share the verdict quotes. Against dot, each other scoring's change
of both gets a paired bootstrap 95% interval over users (the same seeded resamples for
every scoring; NDCG over the evaluated users, head share over every queried user, both
resampled in the order of their raw user ids, so that a holdout, user table or log stored in
another row order gives the same intervals: :func:`auditor.evaluation.evaluate` orders the
first, :func:`head_slots` the second).

Policy: the model's own scoring (the incumbent: dot, or cosine for a model that scores by
cosine, such as SimpleX or a ``Dot(normalize=True)`` score layer) stays unless another
personalised scoring is *clearly* better: it keeps at least ``tolerance`` of the
incumbent's NDCG@K and its head-share reduction's interval excludes 0 (the point
estimate alone when no bootstrap ran, or when one user leaves nothing to resample:
:data:`MIN_RESAMPLED_USERS`). Among those, the lowest head share wins (ties:
higher NDCG, then the scoring listed first). Otherwise the sentence says no serving
change is clearly better, with the best alternative's numbers. ``popular`` is a
reference point, never recommended. The report's changes stay against dot.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from auditor.metrics.exposure import canonical_rows
from auditor.metrics.popularity_sets import head_mask
from auditor.metrics.resampling import percentile_intervals
from auditor.result import Accuracy, CutoffMeasures, RankingAccuracy, ScoringChange
from auditor.wording import interval, kept_share, moves, points as point_change, share_row, tolerance_pct

REFERENCE_SCORINGS = ("popular", "served")
"""Scorings shown on the trade-off but never recommended (not a way to serve a model; served: lists given as input)."""
HEAD_PERCENT = 1
"""The trade-off's default exposure axis: the top-1% head share (``judge_tradeoff``'s ``head``)."""
CONFIDENCE = 0.95
MIN_RESAMPLED_USERS = 2
"""Users a paired bootstrap needs: every resample of one user is that user, so its
"interval" is undefined (NaN) and measures no uncertainty. With fewer, the interval is
null, the point estimates decide (as with ``--bootstrap 0``) and the sentence says why."""


@dataclass(frozen=True)
class Point:
    """One scoring on the trade-off at one K."""

    scoring: str
    ndcg: float
    head_share: float
    gini: float


@dataclass(frozen=True)
class UserValues:
    """The per-user values behind the trade-off's intervals at one K."""

    ndcg: Mapping[str, np.ndarray]
    """Scoring -> NDCG@K of each evaluated user."""
    head_slots: Mapping[str, tuple[np.ndarray, np.ndarray]]
    """Scoring -> (head slots, filled slots) of each queried user's top-K list (the trade-off's head)."""


def head_slots(lists: Mapping[str, np.ndarray], popularity: np.ndarray, k: int,
               percent: int = HEAD_PERCENT, raw_ids: np.ndarray | None = None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per query, the top-K slots held by the top-``percent``% head (ties at the cut in) and
    the filled slots, for every scoring's lists (-1: empty); queries in the order of their
    raw user ids ``raw_ids`` where given (the bootstrap's resamples then draw the same users
    whatever order the user table or the log stores them in; ids that do not sort: as given)."""
    head = head_mask(popularity, percent)
    order = canonical_rows(raw_ids)
    out = {}
    for name, rows in lists.items():
        top = np.asarray(rows[:, :k] if order is None else rows[order, :k])
        filled = top >= 0
        out[name] = ((head[np.where(filled, top, 0)] & filled).sum(axis=1), filled.sum(axis=1))
    return out


def points(accuracy: Mapping[str, RankingAccuracy], cut: CutoffMeasures, head: int = HEAD_PERCENT) -> list[Point]:
    """The scorings measured both ways (accuracy and the top-``head``% share), in report order."""
    exposure, share = cut.scorings(), f"head_share_{head}pct"
    return [
        Point(name, acc.ndcg, exposure[name].number(share), exposure[name].number("gini"))
        for name, acc in accuracy.items()
        if name in exposure and math.isfinite(acc.ndcg) and math.isfinite(exposure[name].number(share))
    ]


def pareto_front(candidates: list[Point]) -> list[str]:
    """Scorings no other scoring beats on both axes (higher NDCG, lower head share)."""

    def dominated(p: Point) -> bool:
        return any(
            q.ndcg >= p.ndcg and q.head_share <= p.head_share and (q.ndcg > p.ndcg or q.head_share < p.head_share)
            for q in candidates
        )

    return [p.scoring for p in candidates if not dominated(p)]


def paired_changes(
    candidates: list[Point], values: UserValues | None, n_bootstrap: int, seed: int, base: str = "dot"
) -> dict[str, ScoringChange]:
    """Every other scoring's NDCG and head share minus ``base``'s (dot's), with paired
    bootstrap 95% intervals over users when ``values`` and ``n_bootstrap`` > 0 allow."""
    by_name = {p.scoring: p for p in candidates}
    dot = by_name.get(base)
    if dot is None:
        return {}
    others = [p.scoring for p in candidates if p.scoring != base]
    ndcg_ci = head_ci = None
    if values is not None and n_bootstrap > 0 and others:
        if values.ndcg[base].shape[0] >= MIN_RESAMPLED_USERS:
            ndcg_ci = _ndcg_intervals(values, others, n_bootstrap, seed, base)
        if values.head_slots[base][0].shape[0] >= MIN_RESAMPLED_USERS:
            head_ci = _head_intervals(values, others, n_bootstrap, seed, base)
    return {
        name: ScoringChange(
            ndcg_delta=by_name[name].ndcg - dot.ndcg,
            head_share_delta=by_name[name].head_share - dot.head_share,
            ndcg_delta_ci=None if ndcg_ci is None else _measured(ndcg_ci[i]),
            head_share_delta_ci=None if head_ci is None else _measured(head_ci[i]),
        )
        for i, name in enumerate(others)
    }


def _measured(ci: tuple[float, float]) -> tuple[float, float] | None:
    """An interval, or None where no resample defined it (NaN ends): never compared nor printed."""
    return ci if math.isfinite(ci[0]) and math.isfinite(ci[1]) else None


def unresampled(values: UserValues | None, n_bootstrap: int, base: str = "dot") -> str | None:
    """Why a bootstrap that was asked for gave the trade-off no interval (too few users to
    resample: :data:`MIN_RESAMPLED_USERS`), or None."""
    if values is None or n_bootstrap == 0 or base not in values.ndcg:
        return None
    n_queried, n_evaluated = int(_served_rows(values, base).sum()), values.ndcg[base].shape[0]
    if n_queried < MIN_RESAMPLED_USERS:
        return "one queried user: a bootstrap over users cannot measure the uncertainty, so the point estimates decide"
    if n_evaluated < MIN_RESAMPLED_USERS:
        return "one evaluated user: the NDCG changes have no bootstrap interval"
    return None


def _served_rows(values: UserValues, base: str) -> np.ndarray:
    """The queried users ``base`` served a list: not a user whose zero query vector is served
    nothing (docs/measures.md), who has no head share to resample."""
    return np.asarray(values.head_slots[base][1]) > 0


def _ndcg_intervals(values: UserValues, others: list[str], n_bootstrap: int, seed: int,
                    base: str) -> list[tuple[float, float]]:
    """Intervals of each scoring's mean NDCG minus ``base``'s, over the evaluated users."""
    dot = values.ndcg[base]
    deltas = np.stack([values.ndcg[name] - dot for name in others], axis=1)
    n = deltas.shape[0]
    return percentile_intervals(deltas, lambda sums: sums / n, n_bootstrap, seed, CONFIDENCE)


def _head_intervals(values: UserValues, others: list[str], n_bootstrap: int, seed: int,
                    base: str) -> list[tuple[float, float]]:
    """Intervals of each scoring's head share (head slots / filled slots) minus ``base``'s,
    over every queried user."""
    s = len(others)
    columns = [values.head_slots[name][0] for name in others] + [values.head_slots[name][1] for name in others]
    columns += list(values.head_slots[base])
    table = np.stack(columns, axis=1).astype(np.float64)[_served_rows(values, base)]

    def change(sums: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return sums[..., :s] / sums[..., s : 2 * s] - (sums[..., 2 * s] / sums[..., 2 * s + 1])[..., None]

    return percentile_intervals(table, change, n_bootstrap, seed, CONFIDENCE)


def choose_scoring(
    candidates: list[Point], tolerance: float, changes: Mapping[str, ScoringChange] | None = None, base: str = "dot",
    gap: str | None = None, shown: Mapping[str, str] | None = None, head: int = HEAD_PERCENT,
    carried: float | None = None,
) -> tuple[str | None, str, str | None]:
    """The recommended scoring, the sentence that says why (quoting the numbers and their
    intervals), and the best alternative to the incumbent ``base`` (recommended or not);
    ``gap``: why a bootstrap asked for gave no interval (:func:`unresampled`); ``shown``:
    each scoring's head share as the K's tables print it (:func:`shown_shares`), which the
    sentence quotes (by default, from ``candidates``); ``head``: the head the shares are of;
    ``carried``: the α a mitigate output already carries (its pick is named, not served with)."""
    by_name = {p.scoring: p for p in candidates}
    if shown is None:
        ordered = sorted(candidates, key=lambda p: {"dot": 0, "cosine": 1}.get(p.scoring, 2))
        shown = dict(zip((p.scoring for p in ordered), share_row([p.head_share for p in ordered])))
    dot = by_name.get(base)
    if dot is None:
        return None, f"{_name(base)} accuracy was not measured, so no scoring can be compared with it", None
    changes = changes if changes is not None else {
        p.scoring: ScoringChange(p.ndcg - dot.ndcg, p.head_share - dot.head_share) for p in candidates
    }
    served = [p for p in candidates if p.scoring not in REFERENCE_SCORINGS and p.scoring != base and p.scoring in changes]
    if dot.ndcg <= 0 and all(p.ndcg <= 0 for p in served):  # one that finds held-out items is judged against dot's 0
        return None, (
            "no personalised scoring finds a held-out item (NDCG 0), so the trade-off cannot be judged; "
            "check that the held-out log matches the model's ids and users"
        ), None
    # Where dot finds nothing, keeping a share of its 0 is no accuracy: a scoring must find something.
    within = [p for p in served if p.ndcg >= tolerance * dot.ndcg and (p.ndcg > 0 or dot.ndcg > 0)]
    better = [p for p in within if changes[p.scoring].clearly_less_head]
    rank = {p.scoring: i for i, p in enumerate(served)}
    if better:
        best = min(better, key=lambda p: (p.head_share, -p.ndcg, rank[p.scoring]))
        cosine = by_name.get("cosine") if base != "cosine" else None
        return (best.scoring, _serve_with(best, dot, changes[best.scoring], cosine, tolerance, gap, shown, head,
                                          carried), best.scoring)
    pool = within or served
    if not pool:
        return base, f"no other scoring was measured, so {base} stays", None
    alternative = (min(pool, key=lambda p: (p.head_share, -p.ndcg, rank[p.scoring])) if within
                   else max(pool, key=lambda p: (p.ndcg, -p.head_share)))
    return (base, _keep_dot(alternative, dot, changes[alternative.scoring], tolerance, gap, shown, head),
            alternative.scoring)


def _name(base: str) -> str:
    return "dot-product" if base == "dot" else base


def shown_shares(cut: CutoffMeasures, head: int = HEAD_PERCENT) -> dict[str, str]:
    """Each scoring's top-``head``% share at ``cut`` as the K's retrieval table (and the trade-off
    table, which takes its cells from that row) prints it: :func:`share_row` over the row."""
    exposure = cut.scorings()
    return dict(zip(exposure, share_row([m.number(f"head_share_{head}pct") for m in exposure.values()])))


def _head_moves(dot: Point, p: Point, shown: Mapping[str, str], head: int = HEAD_PERCENT) -> str:
    """The head share from ``dot`` to ``p`` in the tables' figures (3.37%, as the tables
    print it, never 3.4% beside them), both to the finer cell's decimals (dot's 4.1% cell
    reads 4.13% beside 3.37%, so the two subtract in one precision); more decimals only
    where those print alike."""
    # A wider head than the top 1% judges only where it graded the severity: the sentence says so.
    what = f"the top-{head}% head share" + (" (the head that graded the severity)" if head != HEAD_PERCENT else "")
    cells = [shown.get(dot.scoring), shown.get(p.scoring)]
    if None in cells or "n/a" in cells:
        return moves(dot.head_share, p.head_share, what)
    places = [len(str(cell).rstrip("%").partition(".")[2]) for cell in cells]
    a, b = (cell if n == max(places) else f"{100 * share:.{max(places)}f}%"
            for cell, n, share in zip(cells, places, (dot.head_share, p.head_share)))
    if a == b and dot.head_share != p.head_share:
        return moves(dot.head_share, p.head_share, what)
    return f"{what} stays at {a}" if a == b else f"{what} goes from {a} to {b}"


def _figures(p: Point, dot: Point, change: ScoringChange, tolerance: float, shown: Mapping[str, str],
             head: int = HEAD_PERCENT) -> str:
    base = dot.scoring
    below = p.ndcg < tolerance * dot.ndcg  # the choice's own test, which the printed share must agree with
    kept = (f"keeps {kept_share(p.ndcg / dot.ndcg, tolerance, below)} of {base}'s NDCG" if dot.ndcg > 0 else
            f"finds held-out items {base}'s lists miss" if p.ndcg > 0 else "finds no held-out item either")
    return (
        f"{kept} ({p.ndcg:.4f} vs {dot.ndcg:.4f}; "
        f"{change.ndcg_delta:+.4f}{interval(change.ndcg_delta_ci)}), and {_head_moves(dot, p, shown, head)} "
        f"({point_change(change.head_share_delta)}{interval(change.head_share_delta_ci, 100, 2)})"
    )


def _serve_with(best: Point, dot: Point, change: ScoringChange, cosine: Point | None, tolerance: float,
                gap: str | None, shown: Mapping[str, str], head: int = HEAD_PERCENT, carried: float | None = None) -> str:
    lead = f"serve with {best.scoring}" if carried is None else (
        f"against this output's own {dot.scoring} serving the trade-off picks {best.scoring}, which is no "
        f"recommendation (the output already carries alpha {carried:g}, so serving it with {best.scoring} would "
        "rescale the original twice: the original's audit decides)")
    text = f"{lead}: it {_figures(best, dot, change, tolerance, shown, head)}{_unmeasured(change, gap)}"
    if best.scoring != "cosine" and cosine is not None and cosine.ndcg >= dot.ndcg:
        text += f"; cosine costs no accuracy either (NDCG {cosine.ndcg:.4f})"
    return text


def _keep_dot(alternative: Point, dot: Point, change: ScoringChange, tolerance: float, gap: str | None,
              shown: Mapping[str, str], head: int = HEAD_PERCENT) -> str:
    """Why dot stays, naming every reason that held ``alternative`` back (loosening the
    tolerance alone admits nothing when its head-share change is not clear either), with
    the tolerance as given (0.9046 is 90.46%, not a rounded 90%)."""
    why = []
    if alternative.ndcg < tolerance * dot.ndcg:
        why.append(f"it is below the {tolerance_pct(tolerance)} accuracy tolerance")
    if not change.clearly_less_head:
        ci = change.head_share_delta_ci
        inside = ci is not None and ci[0] <= 0.0 <= ci[1]
        why.append("the interval of its head-share change includes 0" if inside else "it does not lower the head share")
    if not why:  # within the tolerance and clearly lower: only a list that finds nothing is held back
        why.append(f"neither it nor {dot.scoring} finds a held-out item")
    own = "" if dot.scoring == "dot" else f" (the model's own scoring, which it keeps)"
    return (
        f"no serving change is clearly better than {dot.scoring}{own}: the best alternative, {alternative.scoring}, "
        f"{_figures(alternative, dot, change, tolerance, shown, head)}, but {' and '.join(why)}{_unmeasured(change, gap)}"
    )


def _unmeasured(change: ScoringChange, gap: str | None) -> str:
    """Said of every trade-off sentence decided on point estimates (``bootstrap`` 0, or
    ``gap``: too few users to resample) or quoting an NDCG change without its interval."""
    if gap is not None:
        return f" ({gap})"
    return " (no bootstrap ran: the uncertainty was not measured)" if change.head_share_delta_ci is None else ""


def judge_tradeoff(
    accuracy: Accuracy, cut: CutoffMeasures, k: int, values: UserValues | None = None, n_bootstrap: int = 0,
    seed: int = 0, incumbent: str = "dot", head: int = HEAD_PERCENT, carried: float | None = None,
) -> Accuracy:
    """``accuracy`` with the trade-off at cut-off ``k`` decided (front, changes against dot
    with their intervals, choice against ``incumbent``, the model's own scoring, sentence),
    on the top-``head``% share (``values``' head slots must be of the same head).

    ``carried``: the α the audited table already carries (a ``popaudit mitigate`` output,
    ``inputs.rescaled_alpha``). Its trade-off is measured against its own, already rescaled
    dot, so it recommends nothing (``recommended`` None): the choice is ``picked_on_output``
    and the sentence names it as that, never as a scoring to serve with."""
    if k not in accuracy.at or accuracy.tolerance is None:  # no tolerance: no dot to keep a share of (lists alone)
        return accuracy
    candidates = points(accuracy.at[k], cut, head)
    changes = paired_changes(candidates, values, n_bootstrap, seed)
    if incumbent not in {p.scoring for p in candidates}:
        incumbent = "dot"
    judged = changes if incumbent == "dot" else paired_changes(candidates, values, n_bootstrap, seed, incumbent)
    gap = unresampled(values, n_bootstrap) if changes else None
    picked, sentence, alternative = choose_scoring(candidates, accuracy.tolerance, judged, incumbent, gap,
                                                   shown_shares(cut, head), head, carried)
    resampled = values is not None and bool(changes) and any(
        c.ndcg_delta_ci is not None or c.head_share_delta_ci is not None for c in changes.values())
    return replace(
        accuracy,
        quoted_k=k,
        head_percent=head,
        recommended=picked if carried is None else None,
        picked_on_output=None if carried is None else picked,
        recommendation=f"At K={k}, {sentence}.",
        pareto=pareto_front(candidates),
        changes=changes,
        n_bootstrap=n_bootstrap if resampled else 0,
        ci_undefined_reason=gap,
        best_alternative=alternative,
        incumbent=incumbent,
    )
