"""How figures are worded in sentences (verdict, trade-off, mitigation): a change is never
stated between two numbers that print the same."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from auditor.errors import setting
from auditor.sections import EDGE_SLACK, HARM_BANDS, Retrieval

MAX_DECIMALS = 3


def plural(n: int, noun: str) -> str:
    """``1 epoch``, ``5 epochs``, ``2,003 interactions``."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def pct(x: float | None, decimals: int = 1) -> str:
    """``x`` (a share) as a percentage: ``n/a`` when unknown."""
    return "n/a" if x is None or not math.isfinite(x) else f"{100 * x:.{decimals}f}%"


def pct_pair(before: float | None, after: float | None, edges: Iterable[float] = ()) -> tuple[str, str]:
    """Both shares as percentages, each with two significant digits (one decimal at least:
    0.66%, 4.1%, 0.050%), more up to :data:`MAX_DECIMALS` while they print alike: never
    "from 0.8% to 0.8%" between shares that differ. With ``edges`` (differences of shares
    a band is judged on, :data:`SKEW_EDGES`), more too while the printed difference
    ``before - after`` falls on or across an edge the true one does not reach: 9.98% vs
    7.99% (+1.99 points, under 2) reads "9.98% vs 7.99%", never "10.0% vs 8.0%"."""
    first = [_decimals(x) for x in (before, after)]
    if before == after:
        return pct(before, first[0]), pct(after, first[1])
    limits = tuple(edges)
    cap = MAX_DECIMALS + 3 if limits else MAX_DECIMALS  # an edge within rounding may need 6 decimals
    for extra in range(cap):
        a, b = (pct(x, min(cap, d + extra)) for x, d in zip((before, after), first))
        if a != b and _same_side(before, after, a, b, limits):
            break
    return a, b


def _same_side(before: float | None, after: float | None, a: str, b: str, edges: tuple[float, ...]) -> bool:
    """Whether the printed difference of two shares (``a``, ``b``, percentages) reaches
    each of ``edges`` exactly when the true one does (with the bands' :data:`EDGE_SLACK`)."""
    if not edges or before is None or after is None or not (math.isfinite(before) and math.isfinite(after)):
        return True
    shown = (float(a.rstrip("%")) - float(b.rstrip("%"))) / 100
    return all((shown >= e * (1 - EDGE_SLACK)) == (before - after >= e * (1 - EDGE_SLACK)) for e in edges)


SKEW_EDGES = tuple(excess for _name, _ratio, excess in HARM_BANDS)
"""The excess shares (dot minus cosine) the harm bands are judged on, for :func:`pct_pair`."""
RATIO_EDGES = tuple(ratio for _name, ratio, _excess in HARM_BANDS)
"""The dot/cosine ratios the harm bands are judged on, for :func:`ratio_figure`."""


def percent_text(percent: float) -> str:
    """``percent`` (already in %) with the decimals its size needs: one from 1% (``34.1%``),
    two below (``0.42%``), and two significant digits below 0.1% (``0.036%``), so a small
    share never reads as 0."""
    magnitude = abs(percent)
    if magnitude == 0 or magnitude >= 1:
        return f"{percent:.1f}%"
    # Decimals for two significant digits, at least two (0.42%), at most eight.
    decimals = min(8, max(2, 1 - math.floor(math.log10(magnitude))))
    return f"{percent:.{decimals}f}%"


def share_row(shares: Sequence[float | None]) -> list[str]:
    """Head shares of one K, dot's and cosine's first, as every table and the trade-off's
    sentence print them: dot's and cosine's as :func:`pct_pair` writes them against
    :data:`SKEW_EDGES` (their difference on its side of every harm band's edge, as the
    verdict quotes them), every other (norm-aware, most-popular) as :func:`percent_text`
    with at least as many decimals, so one row reads in one precision (3.37%, never 3.4%
    beside a dot share of 4.13%); ``n/a`` where unknown."""
    known = [x if x is not None and math.isfinite(x) else None for x in shares]
    cells = ["n/a" if x is None else percent_text(100.0 * x) for x in known]
    if len(known) < 2:
        return cells
    if known[0] is not None and known[1] is not None:
        cells[:2] = pct_pair(known[0], known[1], SKEW_EDGES)
    places = max((len(text.rstrip("%").partition(".")[2]) for text in cells[:2] if text != "n/a"), default=0)
    for i, x in enumerate(known[2:], start=2):
        if x is not None and len(cells[i].rstrip("%").partition(".")[2]) < places:
            cells[i] = f"{100.0 * x:.{places}f}%"
    return cells


def _decimals(x: float | None) -> int:
    """Decimals that give a share two significant digits as a percentage (1 to 3)."""
    if x is None or not math.isfinite(x) or x == 0:
        return 1
    return min(MAX_DECIMALS, max(1, 1 - math.floor(math.log10(abs(100 * x)))))


def tolerance_pct(tolerance: float) -> str:
    """An accuracy tolerance as given, in percent (0.9046 is ``90.46%``, not a rounded 90%)."""
    return f"{round(tolerance * 100, 6):g}%"


def kept_share(share: float, tolerance: float, below: bool) -> str:
    """The share of dot's NDCG a scoring keeps, in percent with one decimal, more (up to 6)
    where one would put it on the other side of the printed ``tolerance`` than ``below``
    (the decision) says: 0.951835 against 0.952 is ``95.18%``, never "keeps 95.2% ... below
    the 95.2% tolerance"."""
    limit = round(tolerance * 100, 6)
    for decimals in range(1, 7):
        shown = round(100 * share, decimals)
        if (shown < limit) == below:
            return f"{100 * share:.{decimals}f}%"
    return f"{100 * share:.6f}%"


def moves(before: float | None, after: float | None, what: str) -> str:
    """``what`` goes from one share to the other, or stays where it is when they print alike."""
    if before is not None and after is not None and before == after:
        return f"{what} stays at {pct(before)}"
    a, b = pct_pair(before, after)
    return f"{what} stays at {a}" if a == b else f"{what} goes from {a} to {b}"


def points(delta: float) -> str:
    """A change of shares in percentage points, signed: ``-1.25 points``."""
    return f"{100 * delta:+.2f} points"


def interval(ci: tuple[float, float] | None, scale: float = 1.0, decimals: int = 4) -> str:
    """A 95% CI as ``[lo, hi]`` (``scale`` 100 for points), or nothing without one; more
    decimals where ``decimals`` print bounds that differ alike (:func:`interval_decimals`)."""
    if ci is None:
        return ""
    return f", 95% CI {interval_bounds(scale * ci[0], scale * ci[1], decimals, sign='+')}"


def interval_bounds(low: float, high: float, decimals: int, *, sign: str = "") -> str:
    """An interval's bounds as ``[lo, hi]`` in one precision, ``decimals`` or more
    (:func:`interval_decimals`): every bracketed interval of a sentence or table (``sign``
    "+" for changes), so [-0.000121, -0.000117] never prints as "[-0.0001, -0.0001]"."""
    places = interval_decimals(low, high, decimals)
    return f"[{low:{sign}.{places}f}, {high:{sign}.{places}f}]"


def ratio_figure(ratio: float) -> str:
    """A dot/cosine ratio's number: ``4.16``, or ``∞`` where only the divisor was 0
    (:func:`auditor.sections.share_ratio`); the caller adds its sign (``×``). Two decimals,
    more where two would print it on a band's edge it does not reach
    (:data:`RATIO_EDGES`, by :func:`compared_figures`): 1.249 reads "1.249", never "1.25"
    beside a moderate band that starts at 1.25."""
    if ratio == float("inf"):
        return "∞"
    if not math.isfinite(ratio):
        return f"{ratio:.2f}"
    on_edge = [edge for edge in RATIO_EDGES if math.isclose(ratio, edge, rel_tol=EDGE_SLACK, abs_tol=0.0)]
    if on_edge:  # graded as on the edge (float rounding of a quotient of slot counts): printed so
        return f"{on_edge[0]:.2f}"
    return max((compared_figures(ratio, edge, 2)[0] for edge in RATIO_EDGES), key=len)


MAX_INTERVAL_DECIMALS = 6
"""The most decimals an interval's bounds or a correlation get to print apart."""


def bounds_apart(low: float, high: float, decimals: int) -> bool:
    """Whether an interval's bounds print apart to ``decimals`` decimals, or are equal: the
    one rule for every printed interval, since a collapsed "[0.99, 0.99]" between bounds
    that differ reads as an exact interval."""
    return low == high or f"{low:.{decimals}f}" != f"{high:.{decimals}f}"


def interval_decimals(low: float, high: float, decimals: int) -> int:
    """The fewest decimals, from ``decimals`` up to :data:`MAX_INTERVAL_DECIMALS`, at which
    the bounds print apart (:func:`bounds_apart`): 0.99155 to 0.99462 needs three."""
    return next((places for places in range(decimals, MAX_INTERVAL_DECIMALS + 1)
                 if bounds_apart(low, high, places)), MAX_INTERVAL_DECIMALS)


def correlation_figures(*values: float) -> list[str]:
    """Correlations (a ρ, then its CI bounds) for a sentence, to two decimals, more (up to
    six) while one that is not ±1 would print as ±1 or the bounds that differ would print
    alike (:func:`bounds_apart`), all in one precision: a ρ of 0.998 [0.997, 0.999] reads
    "0.998 [0.997, 0.999]", never as a perfect "1.00 [1.00, 1.00]", and 0.993 [0.992,
    0.995] never as "0.99 [0.99, 0.99]"."""
    bounds = values[1:3] if len(values) == 3 else ()
    for decimals in range(2, MAX_INTERVAL_DECIMALS + 1):
        shown = [f"{v:.{decimals}f}" for v in values]
        perfect = any(abs(v) != 1 and abs(float(text)) == 1 for v, text in zip(values, shown))
        if not perfect and (not bounds or bounds_apart(*bounds, decimals)):
            break
    return shown


def training_rho(rho: float) -> str:
    """A training epoch's frequency-norm ρ, signed to three decimals; undefined (never
    "+nan") where every item was trained equally often or every norm is equal."""
    return f"{rho:+.3f}" if math.isfinite(rho) else "undefined (equal frequencies or equal norms)"


CHANGE_WORDS: dict[str, tuple[str, str]] = {
    "bias": ("less bias", "more bias"),
    "accuracy": ("more accuracy", "less accuracy"),
    "gap": ("smaller gap", "larger gap"),
    "fit": ("better fit", "worse fit"),
    "spread": ("less concentrated", "more concentrated"),
}
"""How ``popaudit diff`` words a change for the better and for the worse, per kind of
figure (``auditor/diff/directions.py`` says which kind each measure is): "more bias" only
for figures whose one direction is popularity (head shares, ARP, APLT, ACLT, novelty, the
correlations); a gap between short head and long tail (PopRSP, PopREO), a fit of lists to
profiles (ΔGAP, miscalibration) and how concentrated exposure is (Gini, coverage) grow
alike for lists that favour the head or the tail, so they are worded as what they measure."""
BETTER_WORDS = tuple(words[0] for words in CHANGE_WORDS.values())
WORSE_WORDS = tuple(words[1] for words in CHANGE_WORDS.values())


def compared_figures(value: float, bound: float, decimals: int = 3) -> tuple[str, str]:
    """A figure and the bound it is compared with, to ``decimals`` decimals, more (up to
    nine) while two that differ would print alike: 1.1209 against 1.125 reads "1.121"
    against "1.125", never "1.121" below "1.12"."""
    for places in range(decimals, 10):
        shown = f"{value:.{places}f}", f"{bound:.{places}f}"
        if value == bound or shown[0] != shown[1]:
            return shown
    return shown


def export_served_vectors(model_format: str) -> str:
    """What to do with a model ``popaudit mitigate`` does not write back because a plugin's
    loader built it (a custom tower): its served item vectors are the encoder's outputs, so
    the rescaling applies to those. One sentence for check's advice and mitigate's refusal."""
    return (
        f"popaudit mitigate does not write back a {model_format!r} model (its item vectors are the encoder's "
        "outputs, not a stored table): export the served item vectors as .npy or Parquet and run popaudit "
        "mitigate on that file, or multiply each item vector by ‖k‖^(α−1) where the index is built"
    )


SATURATED = "K reaches the catalogue: every list holds every candidate"
"""Why a K that reaches every query's candidate count (``Retrieval.saturated``) measures no
harm, where K reaches the catalogue itself: every scoring serves the same items there by
construction, so dot and cosine cannot differ in head share, Gini or coverage; such a K never
grades (nor clears) the harm (:func:`auditor.harm.measured_cutoffs`), and every format says
so (:func:`saturated_reason`: the reason where K is below the catalogue)."""

SATURATED_CANDIDATES = "K holds every candidate of every query: every list holds them all"
"""The reason where the catalogue's size or the cause is not known (a table's title)."""


def saturated_reason(k: int, catalogue: int | None, seen_excluded: bool) -> str:
    """Why K (saturating every query) measures no harm, as it happened: K reaches the
    catalogue; or, below it, each query's unseen candidates number K or fewer (said as that
    bound) because the users have seen the rest (seen-item filtering: ``keep_seen`` measures it); else
    :data:`SATURATED_CANDIDATES`."""
    if catalogue is not None and k >= catalogue:
        return SATURATED
    if catalogue is None or not seen_excluded:
        return SATURATED_CANDIDATES
    # A bound, not a figure of the log: the retrieval keeps no per-query candidate counts.
    return (f"K holds every unseen candidate: seen items are not served, and each user has {k:,} or fewer of the "
            f"{catalogue:,} items unseen; {setting('keep_seen')} measures it")


def saturated_said_at(retrieval: Retrieval | None, ks: list[int], catalogue: int | None) -> str:
    """:func:`saturated_said` of a retrieval section, its reason told from the catalogue's
    size (``catalogue``: the item table's rows) and whether seen items are excluded."""
    if retrieval is None:
        return ""
    seen = retrieval.population is not None and retrieval.population.seen_items == "excluded"
    return saturated_said(ks, retrieval.n_saturated, retrieval.n_queries, retrieval.n_no_candidates, catalogue, seen)


def partly_saturated(k: int, n_saturated: int, n_queries: int, n_no_candidates: int = 0) -> str:
    """How many of the queries with a candidate (``n_queries`` less ``n_no_candidates``, those
    trained on every item) a K saturates (it holds every candidate of theirs), in words."""
    having = f" with a candidate left ({n_no_candidates:,} have none)" if n_no_candidates else ""
    return f"K={k} holds every candidate for {n_saturated:,} of {n_queries - n_no_candidates:,} queries{having}"


def saturated_said(ks: list[int], n_saturated: dict[int, int] | None = None, n_queries: int = 0,
                   n_no_candidates: int = 0, catalogue: int | None = None, seen_excluded: bool = False) -> str:
    """The harm not measured at the saturated ``ks``, in words ("" when there is none): a K
    that saturates some queries with a candidate but not all (``n_saturated``) says how many;
    the reason of those that saturate every such query is :func:`saturated_reason` of the
    smallest (the tightest bound on what the users have seen)."""
    counts = n_saturated or {}
    full = [k for k in ks if counts.get(k, n_queries) >= n_queries - n_no_candidates]
    reason = saturated_reason(min(full), catalogue, seen_excluded) if full else ""
    pieces = [f"K={', '.join(map(str, full))} ({reason})"] if full else []
    pieces += [f"K={k} ({partly_saturated(k, counts[k], n_queries, n_no_candidates).removeprefix(f'K={k} ')}, at "
               "least half: their lists are the same under any scoring)" for k in ks if k not in full]
    return f"the harm is not measured at {' and '.join(pieces)}" if ks else ""


def no_list_served(retrieval: Retrieval | None) -> str:
    """Where no queried user has a candidate left (each trained on every item, and training
    items are not served: ``Retrieval.n_no_candidates`` is every query), why every list is
    empty, in words ("" where some query has one): the harm has no slot to grade at any K."""
    if retrieval is None or not 0 < retrieval.n_queries <= retrieval.n_no_candidates:
        return ""
    who = "the one queried user" if retrieval.n_queries == 1 else f"all {retrieval.n_queries:,} queried users"
    return (f"no queried user has an unseen item left ({who} trained on every item, and training items are not "
            f"served; {setting('keep_seen')} measures it): no list is served")
