"""Whether a report's retrieval figures were measured under the training log's protocol,
said once for every format, gate line and the JSON (docs/measures.md, "Query population").

The log's protocol queries the training users and serves each the items they have not
trained on (``retrieval.population.seen_items`` ``excluded``; ``kept`` with ``keep_seen``,
which the user asked for). Without each user's training items (``seen_items``
``unknown``: counts from ``frequencies`` stand in for the log, a query file, a framework's
user numbering) every user-table row (or file row) is queried and training items stay
among the candidates: the lists, and every figure of them, are measured under another
protocol, while the frequency-norm figures, the popularity weights and the head and tail
sets stay the log's. ``seen_items`` is the one record of it.

Which figures two audits can compare is one rule (:data:`POPULATION_KEYS`,
:func:`of_model_lists`, :func:`population_apart`): the figures of the model's own lists
are comparable only between audits whose ``retrieval.population`` has the same ``source``
and ``seen_items``; the figures of the served lists given (:func:`of_served_lists`) only
between audits whose served figures cover the same lists (:func:`served_lists_measured`). ``diff`` flags them (docs/diff.md, "Comparability"), and the ``batch``
summary marks a change or a trend between rows measured differently as not comparable
(docs/report.md, "Batch summary"), where each row's population is also a column.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from auditor.errors import setting
from auditor.flat import FlatEntry

RECORDED_SPLIT_REPEATS = "held-out repeats of a training pair dropped by the recorded split, not evaluated"
"""``accuracy.repeats`` (and the end of ``accuracy.protocol``) of a popaudit checkpoint's
recorded split, whose stored pairs hold no repeat of a training pair
(:func:`auditor.evaluation.repeats_convention`; ``diff`` reads it: auditor/diff/rules.py)."""
UNKNOWN = "unknown"
"""The ``seen_items`` of a population measured under another protocol than the log's."""


def other_protocol(seen_items: str | None, source: str | None) -> str | None:
    """The sentence that says the retrieval figures are not the training log's (None when
    they are: ``seen_items`` is ``excluded`` or ``kept``), for a population from ``source``."""
    if seen_items != UNKNOWN:
        return None
    if source == "file":
        why = "the query file's vectors carry no user identity, so nothing could be excluded"
    else:
        why = (f"the training users are unknown (counts from {setting('frequencies')}, or user rows that cannot be "
               "matched to the log): every user-table row was queried and each user's training items stayed among "
               f"the candidates, where {setting('interactions')} queries the log's users only and excludes their "
               "training items")
    return (f"not the training log's protocol: {why}. The retrieval figures (head shares, Gini, coverage, ARP, "
            "overlap, the popular baseline) differ from such a run's: compare them, and set gates on them, only "
            "against runs measured the same way; the frequency-norm figures, popularity and head and tail sets are "
            "the log's")


def protocol_clause(seen_items: str | None) -> str | None:
    """What a gate line adds for a figure of the model's lists measured under another
    protocol (None: the log's)."""
    if seen_items != UNKNOWN:
        return None
    return "not the training log's protocol (training items not excluded, see retrieval.population)"


def protocol_lead(seen_items: str | None, graded: bool) -> str:
    """The verdict's first words when its severity is graded from the model's lists measured
    under another protocol ("" when they are the log's, or when no skew was graded)."""
    if not graded or seen_items != UNKNOWN:
        return ""
    return ("The severity is graded from lists measured under another protocol than the training log's (every user "
            "row queried, training items not excluded; see retrieval.population): compare it, and gate on it, only "
            "against runs measured the same way. ")


POPULATION = "retrieval.population"
POPULATION_KEYS = ("source", "seen_items")
"""What a report's ``retrieval.population`` records of the protocol its model's lists were
measured under: who was queried (``users``, ``history``, ``file``) and whether their
training items were excluded (``excluded``, ``kept``, ``unknown``)."""


def of_model_lists(entry: FlatEntry) -> bool:
    """A figure of the lists popaudit retrieves itself (the model's scorings, the most-popular
    list, their accuracy), not of served lists given to it (``served`` scoring): what another
    population (:func:`population_apart`) makes incomparable."""
    return entry.section in ("retrieval", "accuracy") and entry.scoring != "served"


def report_population(report: Any) -> dict[str, Any]:
    """The :data:`POPULATION_KEYS` of a JSON report's ``retrieval.population`` (each None
    where the report records none: no retrieval, a lists-only audit, not a report)."""
    retrieval = report.get("retrieval") if isinstance(report, Mapping) else None
    population = retrieval.get("population") if isinstance(retrieval, Mapping) else None
    population = population if isinstance(population, Mapping) else {}
    return {key: population.get(key) for key in POPULATION_KEYS}


def population_apart(populations: Iterable[Mapping[str, Any] | None]) -> str | None:
    """Why the figures of the model's own lists of audits with these populations (of
    :func:`report_population`) are not comparable, as ``diff`` words its setting lines:
    ``retrieval.population.seen_items differs ("excluded" vs "unknown")`` (every value, in
    order of appearance, where more than two differ); None when they agree. A population
    that records nothing (no retrieval: its lists have no figures) agrees with any."""
    recorded = [p for p in populations if p and any(p.get(key) is not None for key in POPULATION_KEYS)]
    reasons = []
    for key in POPULATION_KEYS:
        values = list(dict.fromkeys(p.get(key) for p in recorded))
        if len(values) > 1:
            shown = " vs ".join(json.dumps(v, ensure_ascii=False, default=str) for v in values)
            reasons.append(f"{POPULATION}.{key} differs ({shown})")
    return "; ".join(reasons) or None


SERVED_LISTS_APART = "served.n_graded_apart"
"""Which lists of the served file a report's served-scoring figures cover (:func:`served_lists_measured`)."""


def of_served_lists(entry: FlatEntry) -> bool:
    """A figure of the served lists given to popaudit (the ``served`` scoring's list measures
    and accuracy, its overlaps with the other lists): what another list population makes incomparable."""
    return entry.section in ("retrieval", "accuracy") and (
        entry.scoring == "served" or entry.measure.startswith("overlap_served_"))


def served_lists_measured(report: Any) -> str | None:
    """The population of a report's served-scoring figures, the served lists' counterpart of
    :func:`report_population`: ``"every list of the file"`` (lists alone, or a model that queries
    every listed user), else how many lists its queried users leave out (``served.n_graded_apart``:
    users the log lacks, sampled out, not queried) and the query sample that drew them. Two reports'
    served figures compare only where these agree (QA "Served F3": the same file alone and beside a
    model that queries 30 of its 75 users moved 12.0% to 0.0% "less bias"). None: not recorded
    (no served lists, an older report), which agrees with any."""
    served = report.get("served") if isinstance(report, Mapping) else None
    apart = served.get("n_graded_apart") if isinstance(served, Mapping) else None
    if apart is None:
        return None
    if not isinstance(apart, int) or isinstance(apart, bool) or apart < 0:  # not popaudit's: agrees with no count
        return f"not a count of lists ({json.dumps(apart, ensure_ascii=False, default=str)[:40]})"
    if apart == 0:
        return "every list of the file"
    n_users = served.get("n_users") if isinstance(served, Mapping) else None
    retrieval = report.get("retrieval")
    population = retrieval.get("population") if isinstance(retrieval, Mapping) else None
    sampled = "" if not isinstance(population, Mapping) or population.get("sampled") is not True else (
        f", queries sampled: {population.get('n_queries')} with seed {population.get('seed')}")
    return f"{apart} of the {n_users} lists left out (users not queried{sampled})"


__all__ = [
    "POPULATION", "POPULATION_KEYS", "SERVED_LISTS_APART", "UNKNOWN", "of_model_lists", "of_served_lists",
    "other_protocol", "population_apart", "protocol_clause", "protocol_lead", "report_population",
    "served_lists_measured",
]
