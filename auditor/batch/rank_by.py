"""The column a batch summary ranks by (``--rank-by``): which names it takes, checked
before any row is audited.

It takes the names ``--fail-on`` accepts for the run (the flat metrics of every K and
alpha the defaults and the manifest ask for, the registered list and audit measures,
plugins' included: :func:`auditor.flat.metric_names`) and the results' numeric columns
that are not metrics (:data:`NUMERIC_COLUMNS`). A name outside them is refused with the
closest names and where the full list is, never the list itself (thousands of names at
a few K).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from typing import NamedTuple

from auditor.diff.directions import has_direction, rule_for
from auditor.errors import setting
from auditor.flat import FlatEntry
from auditor.gate_names import per_k_name

NUMERIC_COLUMNS = ("n_items", "dim", "n_interactions", "seconds")
"""The results table's numeric columns that are no flat metric (auditor/batch/results.py;
``row`` orders the manifest and ranks nothing)."""
NAMES_DOC = "docs/measures.md"
"""Where the flat metric names are listed (README's "Gating CI" gives their pattern)."""


def rank_by_problem(rank_by: str, metrics: Iterable[str], ks: Iterable[int]) -> str | None:
    """Why ``rank_by`` cannot rank this run's rows (None: it can): not among ``metrics``
    (the run's flat metric names, as :func:`auditor.flat.metric_names` lists them for cut-offs
    ``ks``) nor :data:`NUMERIC_COLUMNS`. The message suggests the closest names."""
    names = [*dict.fromkeys([*metrics, *NUMERIC_COLUMNS])]
    if rank_by in names:
        return None
    hint = did_you_mean(rank_by, names)
    cuts = ", ".join(str(k) for k in sorted(set(ks))) or "none"
    return (
        f"invalid {setting('rank_by')} {rank_by!r}: not a metric this run measures{hint}; it takes a name "
        f"{setting('fail_on')} accepts (spearman, pearson_log, kendall, loglog_slope, <measure>_<scoring>@K or "
        f"<measure>_ratio@K at K = {cuts}, plugin measures; see {NAMES_DOC}) or one of "
        f"{', '.join(NUMERIC_COLUMNS)}"
    )


def did_you_mean(name: str, names: Iterable[str]) -> str:
    """`` (did you mean 'a' or 'b'?)`` with the up to three closest of ``names``, or ``""``."""
    close = difflib.get_close_matches(name, list(names), n=3, cutoff=0.6)
    return f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""


class RankSense(NamedTuple):
    """Which way the ranking reads ``--rank-by``: ``key`` maps a value to its sort key
    (smaller first), ``words`` says the order in the summary's titles."""

    key: Callable[[float], float]
    words: str


def rank_sense(rank_by: str) -> RankSense:
    """Most biased first, in the direction the measure means more bias (the table ``diff``
    judges changes by, :mod:`auditor.diff.directions`): descending where lower is less
    bias (ΔGAP, the popularity lift, included), ascending where higher is (long-tail share,
    coverage, novelty); a column that is no bias measure (accuracy, seconds, a plugin's measure
    of unknown direction) ranks descending and the title says so."""
    parsed = per_k_name(rank_by)
    entry = (FlatEntry(None, "retrieval", parsed.measure, parsed.scoring, parsed.k) if parsed is not None
             else FlatEntry(None, "frequency_norm", rank_by))
    rule = rule_for(entry)
    if rule.aspect == "bias" and rule.better == "none":  # pearson_log: tied to popularity, no way that is better
        return RankSense(lambda v: -v, f"highest first; {rank_by} has no direction of less bias")
    if not has_direction(entry) or rule.aspect != "bias":
        return RankSense(lambda v: -v, f"highest first; {rank_by} is no bias measure")
    if rule.better == "higher":
        return RankSense(lambda v: v, "most biased first: lowest first, since a higher value is less bias")
    return RankSense(lambda v: -v, "most biased first")
