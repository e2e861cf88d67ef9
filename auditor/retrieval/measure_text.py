"""The retrieval section's words: its warnings about approximate lists, the scorings an
index left out, the definitions the report prints and its statement of who was queried."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from auditor.alpha import alpha_scoring
from auditor.errors import setting
from auditor.metrics.exposure import OVERLAP_DEFINITION
from auditor.model import QueryPopulation
from auditor.protocol import UNKNOWN, other_protocol
from auditor.result import Population
from auditor.retrieval.approximate import sampled_head_error
from auditor.retrieval.lists import RetrievalSettings, ScoringLists
from auditor.sections import APPROXIMATE_ERROR, RECALL_FLOOR

if TYPE_CHECKING:
    from auditor.hookspecs import ListMeasure


def low_recall_warning(index_kind: str, recall: dict[int, float] | None) -> list[str]:
    """The warning of an approximate index whose recall@K falls below :data:`RECALL_FLOOR`."""
    low = {k: value for k, value in (recall or {}).items() if value < RECALL_FLOOR}
    if not low:
        return []
    figures = ", ".join(f"recall@{k} {value:.3f}" for k, value in sorted(low.items()))
    return [
        f"the {index_kind} index's lists are approximate and miss much of exact search ({figures}, below "
        f"{RECALL_FLOOR:g}), so their figures can be far off: {APPROXIMATE_ERROR}; {setting('index')} exact "
        "measures it"
    ]


def sampled_error_warning(index_kind: str, found: ScoringLists, popularity: np.ndarray, ks: list[int]) -> list[str]:
    """Which way an approximate index erred where its recall check can tell ([] for exact lists)."""
    return [] if found.sample_dot is None else sampled_head_error(index_kind, *found.sample_dot, popularity, ks)


def alphas_unmeasured(settings: RetrievalSettings, index_kind: str) -> dict[str, str]:
    """Each norm-aware scoring an approximate index left out, with the reason: its indexes
    rank by dot and cosine only (an α ranking is neither's), and re-ranking their
    candidates would be a third approximation whose recall nothing measures."""
    if index_kind == "exact":
        return {}
    why = (f"the approximate index ({setting('index')} {index_kind}) ranks by dot and cosine only; "
           f"{setting('index')} exact measures the norm-aware scorings")
    return {alpha_scoring(a): why for a in settings.alphas if a not in (0.0, 1.0)}


def retrieval_definitions(list_measures: Sequence[ListMeasure], settings: RetrievalSettings, population: QueryPopulation,
                 ) -> dict[str, str]:
    kind = "distinct training users" if settings.popularity == "users" else "training interactions"
    seen = {
        "excluded": "each query's training items are never served (as a deployed recommender serves)",
        "kept": f"training items stay among the candidates ({setting('keep_seen')}), so PopRSP and PopREO count "
                "them in their denominators (no − T_u)",
    }.get(population.seen_items) or f"training items could not be excluded: {other_protocol(UNKNOWN, population.source)}"
    definitions = {m.name: m.definition for m in list_measures}
    definitions.update(
        overlap_dot_cosine=OVERLAP_DEFINITION,
        popularity=f"popularity: {kind} per item (head share, arp, aplt, most-popular list)",
        queries=f"queries: {population.description}",
        seen_items=f"seen items: {seen}",
        ties="ties: higher score first, then lower item row; popular list: by popularity, then raw item id",
        zero_vectors="zero vectors: a query zero as served (not a bias model's [0, 1]) is served nothing by the model's "
                     "scorings (kept in their group, a miss with a holdout; popular serves them); zero-norm items never by cosine",
    )
    return definitions


def population_section(population: QueryPopulation) -> Population:
    """The report's statement of who was queried."""
    return Population(
        source=population.source,
        n_queries=population.n_queries,
        n_eligible=population.n_eligible,
        sampled=population.sampled,
        seed=population.seed,
        n_zero_queries=population.n_zero,
        seen_items=population.seen_items,
        n_user_rows=population.n_user_rows,
        n_untrained_user_rows=population.n_untrained_rows,
        n_unmatched_log_users=population.n_unmatched_users,
        description=population.description,
    )
