"""Who pays and which items gain, as format-neutral tables (docs/report.md): the per-user-group
table and the items dot serving raises and lowers most over cosine, at one K, read from
the retrieval section's ``user_groups`` and ``exposure_shift`` (JSON-ready rows)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from auditor.errors import setting
from auditor.report.formatting import MISSING, Table, finite, fmt_num, fmt_pct
from auditor.result import Retrieval
from auditor.wording import partly_saturated, saturated_reason

_GROUPS_INTRO = (
    "Users grouped by the share of popular items in their training profiles (niche: the lowest, blockbuster: "
    "the highest; cut-offs under 'popularity_groups' in the definitions). GAP is the mean popularity of a "
    "user's items, averaged over the group: ΔGAP = (lists − profiles) / profiles is the lists' popularity lift "
    "over what the users trained on (negative: less popular). "
)
_GROUPS_READING = (
    "Read it beside cosine's for the same group: 'ΔGAP dot − cosine' is how "
    "much more popular dot's lists are than cosine's, as a share of the profiles' GAP, and the group with the "
    "largest is the one dot's popularity bias pushes furthest toward popular items. Miscalibration (JS) is the "
    "Jensen–Shannon divergence (bits) between the head/mid/tail shares of profile and list."
)
PROTOCOL_NOTES = {
    "excluded": "Training items are never served, so even lists blind to popularity have a ΔGAP below 0, lowest "
                "for the most head-heavy profiles: a group's ΔGAP alone does not say who is served worst. ",
    "kept": "Training items stay among the candidates here ({keep_seen}): a list may re-serve its user's own "
            "items, so ΔGAP lacks the pull below 0 that excluding them gives and may be positive; a group's ΔGAP "
            "alone still does not say who is served worst. ",
}
"""The note's sentence on the run's protocol (``retrieval.population.seen_items``)."""
GROUPS_NOTE = _GROUPS_INTRO + PROTOCOL_NOTES["excluded"] + _GROUPS_READING
"""The note under the default protocol (training items excluded)."""


def groups_note(retrieval: Retrieval) -> str:
    """The Who-pays note for the run's protocol: why ΔGAP sits below 0 holds only when
    training items were excluded (``seen_items``); under ``keep_seen`` it says the opposite."""
    seen = None if retrieval.population is None else retrieval.population.seen_items
    protocol = PROTOCOL_NOTES.get(seen or "", "A group's ΔGAP alone does not say who is served worst. ")
    return _GROUPS_INTRO + protocol.format(keep_seen=setting("keep_seen")) + _GROUPS_READING


SHIFT_NOTE = (
    "Exposure = the number of the queried users' top-K lists that hold the item. The gain is dot's exposure "
    "minus cosine's: the first table lists the items dot product serves most more often than cosine, the "
    "second those it serves most less often. Norm percentile: share of the catalogue whose norm is at most "
    "the item's."
)
GROUP_SCORINGS = ("dot", "cosine")
"""The scorings the per-group table sets side by side (the JSON holds every scoring)."""


def group_table(retrieval: Retrieval, k: int) -> Table | None:
    """One row per user group at ``k``: users, profile GAP, then ΔGAP, miscalibration and
    (with a holdout) NDCG under dot and cosine. None without training profiles."""
    by_scoring = retrieval.user_groups.get(k) or {}
    scorings = [s for s in GROUP_SCORINGS if by_scoring.get(s)]
    if not scorings:
        return None
    first = by_scoring[scorings[0]]
    has_ndcg = any(row.get("ndcg") is not None for s in scorings for row in by_scoring[s])
    headers = ["user group", "users", "profile GAP"]
    for scoring in scorings:
        headers += [f"ΔGAP {scoring}", f"JS {scoring}"] + ([f"NDCG {scoring}"] if has_ndcg else [])
    lift = scorings == list(GROUP_SCORINGS)  # dot's lift over cosine, the popularity-blind reference
    headers += ["ΔGAP dot − cosine"] if lift else []
    rows = []
    for i, base in enumerate(first):
        cells = [str(base["group"]), fmt_num(base.get("n_users")), fmt_num(base.get("gap_profile"), 1)]
        for scoring in scorings:
            row = by_scoring[scoring][i]
            cells += [fmt_pct(row.get("gap_delta")), fmt_num(row.get("miscalibration"))]
            cells += [fmt_num(row.get("ndcg"))] if has_ndcg else []
        if lift:
            cells.append(_points(by_scoring["dot"][i].get("gap_delta"), by_scoring["cosine"][i].get("gap_delta")))
        rows.append(tuple(cells))
    caption = f"{cutoff_title(retrieval, k)} lists; ΔGAP as a change of the profiles' GAP; JS: popularity miscalibration (bits)."
    if lift:
        caption += " ΔGAP dot − cosine: dot's popularity lift over cosine's for the same users (higher: dot pushes them further toward popular items)."
    if has_ndcg:
        caption += " NDCG over each group's users with held-out items."
    if retrieval.tied_ratio is not None:  # recorded where measured, never guessed from the rows' sizes
        caption += (" No user is niche or blockbuster: every user shares one popular ratio, so there is no contrast "
                    "and the groups are undefined (the diverse row holds every user).")
    # The group's name never breaks: a table too wide for a terminal narrows the figures' columns ("blockbus…").
    return Table(tuple(headers), tuple(rows), (False, *[True] * (len(headers) - 1)), caption, nowrap=(0,))


def _points(dot: Any, cosine: Any) -> str:
    """Dot's ΔGAP minus cosine's, signed, in points of the profiles' GAP ("n/a", unsigned,
    where either is null or NaN: an empty group)."""
    dot_lift, cosine_lift = finite(dot), finite(cosine)
    if dot_lift is None or cosine_lift is None:
        return MISSING
    text = fmt_pct(dot_lift - cosine_lift)
    return text if text.startswith("-") else f"+{text}"


def shift_tables(retrieval: Retrieval, k: int) -> list[Table]:
    """The gained and the lost items at ``k`` (empty when the table was not built)."""
    shift = retrieval.exposure_shift.get(k)
    if not shift:
        return []
    tables = []
    for key, what in (("gained", "raises most"), ("lost", "lowers most")):
        items: Sequence[Mapping[str, Any]] = shift.get(key) or []
        caption = f"{cutoff_title(retrieval, k)}: the {len(items)} items whose exposure dot serving {what} over cosine."
        tables.append(_items_table(items, shift.get("n_queries"), caption, key))
    return tables


def _items_table(items: Sequence[Mapping[str, Any]], n_queries: Any, caption: str, key: str) -> Table:
    headers = ("item", "frequency", "norm", "norm pct.", "exposure dot", "exposure cosine", "exposure popular",
               "gain")  # fmt: skip
    rows: tuple[tuple[str, ...], ...] = tuple(
        (str(item.get("item_id")), fmt_num(item.get("frequency")), fmt_num(item.get("norm")),
         f"{fmt_num(item.get('norm_percentile'), 1)}%", _exposure(item.get("exposure_dot"), n_queries),
         _exposure(item.get("exposure_cosine"), n_queries), _exposure(item.get("exposure_popular"), n_queries),
         f"{int(item.get('gain') or 0):+,}")
        for item in items
    )  # fmt: skip
    if not rows:
        caption += f" None: no item's exposure {'rose' if key == 'gained' else 'fell'}."
        rows = (("—", *[""] * 7),)
    return Table(headers, rows, (False, *[True] * 7), caption)


def _exposure(count: Any, n_queries: Any) -> str:
    """A count of lists, with the share of lists it is when the number of lists is known."""
    if count is None:
        return fmt_num(None)
    if isinstance(n_queries, int) and n_queries > 0:
        return f"{int(count):,} ({fmt_pct(count / n_queries)})"
    return f"{int(count):,}"


def cutoff_title(retrieval: Retrieval | None, k: int, catalogue: int | None = None) -> str:
    """``Top-K``, said approximate (the index and its recall@K) when an approximate index
    found the lists, saturated where the harm is not measured (``Retrieval.saturated``), and
    with the count of queries K saturates where it saturates some: every table of figures
    from them is titled so, in every format (``catalogue``: the item table's rows, which tell
    why K saturates: :func:`~auditor.wording.saturated_reason`)."""
    said = "" if retrieval is None else retrieval.approximate(k)
    full = retrieval is not None and retrieval.saturated.get(k, False)  # the harm is not measured there
    n = 0 if retrieval is None else retrieval.n_saturated.get(k, 0)
    some = ("" if retrieval is None or n == 0 or n == retrieval.n_queries - retrieval.n_no_candidates  # none or all
            else partly_saturated(k, n, retrieval.n_queries, retrieval.n_no_candidates).removeprefix(f"K={k} "))
    note = f" ({some})" if some else ""
    if full and retrieval is not None:
        seen = retrieval.population is not None and retrieval.population.seen_items == "excluded"
        note = f" ({some or saturated_reason(k, catalogue, seen)}: the harm is not measured here)"
    return f"Top-{k}" + (f", {said}" if said else "") + note
