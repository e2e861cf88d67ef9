"""Whether a report's retrieval figures were measured under the training log's protocol,
said once for every format, gate line and the JSON (docs/measures.md, "Query population").

The log's protocol queries the training users and serves each the items they have not
trained on (``retrieval.population.seen_items`` ``excluded``; ``kept`` with ``keep_seen``,
which the user asked for). Without each user's training items (``seen_items``
``unknown``: counts from ``frequencies`` stand in for the log, a query file, a framework's
user numbering) every user-table row (or file row) is queried and training items stay
among the candidates: the lists, and every figure of them, are measured under another
protocol, while the frequency-norm figures, the popularity weights and the head and tail
sets stay the log's. ``seen_items`` is the one record of it: ``diff`` flags the model's
list figures of two reports whose ``seen_items`` differ as not comparable.
"""

from __future__ import annotations

from auditor.errors import setting

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


__all__ = ["UNKNOWN", "other_protocol", "protocol_clause", "protocol_lead"]
