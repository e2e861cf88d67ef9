"""The served lists' section of a report (``served``) and its JSON: a file of recommendation lists given
as ``recommendations``, how it was read, and, for a lists-only audit, its measures per K
(docs/served-lists.md)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from auditor.errors import setting
from auditor.sections import ListMeasureInfo, ListMeasures, builtin_list_measures


@dataclass
class ServedCutoff:
    """The served lists at one cut-off K of a lists-only audit: their measures, the
    most-popular list's, and the share of the popular top-K the served top-K hold."""

    served: ListMeasures
    popular: ListMeasures
    overlap_popular: float
    n_short_lists: int = 0
    """Lists holding fewer than K items (their empty slots are not counted)."""


LISTS_ONLY_FORMAT = "served lists"


def with_the_model() -> str:
    """The remedy for what a lists-only audit cannot measure (the flags as spelled now)."""
    return f"pass the model with {setting('recommendations')} to measure it beside the served lists"
"""The report's ``inputs.format`` of a lists-only audit (served lists, no model): its verdict
follows the lists' rule (served vs the training log), not a model's (dot vs cosine)."""


@dataclass
class ServedSection:
    """The served lists given as ``recommendations`` (docs/served-lists.md): the file, how
    it was read, and (lists-only audits) the measures per K."""

    source: str
    n_users: int
    """Users with a list in the file."""
    n_rows: int
    longest: int
    """Items in the longest list."""
    shortest: int
    """Items in the shortest list."""
    order: str
    """``rank column 'rank'`` or ``score column 'score'``."""
    n_catalogue: int
    """Items measured over: the model's rows, or the catalogue of the log and the lists."""
    at: dict[int, ServedCutoff] = field(default_factory=dict)
    """K -> measures (lists-only audits; with a model the lists are the ``served`` scoring of retrieval)."""
    head_share_log: float | None = None
    """The grade's top-1% items' share of the training popularity (the lists' grade's reference), the head counted
    over the grade's catalogue, the same with a model or without (:func:`auditor.retrieval.served.graded_head`)."""
    n_queried_without_list: int | None = None
    """With a model: queried users the file has no list for (served an empty list)."""
    n_unknown_users: int | None = None
    n_cold_items: int = 0
    n_unknown_items: int = 0
    definitions: dict[str, str] = field(default_factory=dict)
    list_measures: dict[str, ListMeasureInfo] = field(default_factory=builtin_list_measures)
    """The list measures measured, in report order, with their labels (not in the JSON)."""
    short_lists: dict[int, int] = field(default_factory=dict)
    """Beside a model: K -> the queried users' lists holding fewer than K items (lists alone: each
    cut-off's ``n_short_lists``); JSON ``short_lists`` either way."""
    n_training_slots: int | None = None
    """Lists alone: served slots holding an item of the user's own training log (the served lists
    are measured as served: nothing is excluded from them); None without each user's training items."""
    n_slots: int | None = None
    """Lists alone: filled served slots (the denominator of ``n_training_slots``)."""
    cold_slot_share: float | None = None
    """Share of the served slots naming items the training log never saw, with a table row or not (None: no log given);
    lists alone refuse above :data:`~auditor.loading.served_ids.UNMATCHED_SLOTS_FLOOR` (beside a model, above it of
    slots naming items neither the log nor the model's item table knows)."""
    head_share_every_list: dict[int, float | None] = field(default_factory=dict)
    """The served lists' grade, with a model or without (:func:`auditor.retrieval.served.graded_shares`): K -> the
    top-1% share of the top-K slots of every list of the file, each K asked at most the lists' length."""
    head_share_popular: dict[int, float | None] = field(default_factory=dict)
    """K -> the most-popular list's share of the grade's head (:func:`auditor.retrieval.served.popular_reference`),
    the reference the summary quotes beside the grade: over every list alone, over the queried users with a list
    beside a model; ``{}`` where nobody is queried."""
    n_graded_apart: int = 0
    """Beside a model: the file's lists in none of the served scoring's per-K figures, which the grade covers
    (users the log lacks, sampled out, not queried; every list where retrieval is not measured); ``diff``
    compares served figures only between reports where it agrees (:func:`auditor.protocol.served_lists_measured`)."""


UNTRAINED_SERVED = (
    "the served scoring scores the list the file holds for each of them, and counts one without a list as a miss "
    "(how many had one: the warnings)"
)
"""The accuracy protocol's clause for served lists beside RecBole's untrained test users (no count: how many had a
list depends on the file). It concerns the served scoring alone, so ``popaudit diff`` leaves it out of the protocol
it compares for the other scorings (:func:`auditor.diff.rules.accuracy_flags`)."""


def served_dict(served: ServedSection) -> dict[str, Any]:
    """The ``served`` section's JSON: the file as read; a lists-only audit's figures are
    its ``retrieval`` section (:func:`served_retrieval_dict`), here only the short lists per K."""
    out = asdict(served)
    del out["list_measures"], out["at"], out["definitions"]  # presentation; the figures are retrieval's
    shorts = {k: cut.n_short_lists for k, cut in served.at.items()} or served.short_lists
    out["short_lists"] = {str(k): n for k, n in shorts.items()}
    return out


def served_retrieval_dict(served: ServedSection, popularity: str) -> dict[str, Any]:
    """A lists-only audit's ``retrieval`` JSON: the served lists are the scoring ``served``
    beside ``popular`` at each K, under the keys of a model's retrieval section."""
    return {
        "n_queries": served.n_users,
        "index": "none (served lists)",
        "at": {str(k): {"served": dict(cut.served), "popular": dict(cut.popular),
                        "overlap_served_popular": cut.overlap_popular} for k, cut in served.at.items()},
        "recall": None,
        "queries": f"served lists: the {served.n_users:,} users of {served.source}",
        "popularity": popularity,
        "n_zero_queries": 0,
        "definitions": dict(served.definitions),
        "population": None,
    }
