"""Who was queried, as every report states it: the population every exposure figure, gate
and the verdict are over (docs/measures.md, "Query population")."""

from __future__ import annotations

from auditor.errors import setting
from auditor.protocol import other_protocol
from auditor.report.formatting import fmt_num
from auditor.result import Retrieval


SEEN_ITEMS = {
    "excluded": "excluded from every scoring's candidates (as served)",
    "kept": f"kept among the candidates ({setting('keep_seen')})",
    "unknown": "could not be excluded (the queries' users or their training items are unknown)",
}
"""How reports state the population's ``seen_items``."""


def population_rows(retrieval: Retrieval) -> list[tuple[str, str]]:
    """Who was queried: the population every exposure figure, gate and the verdict are over."""
    population = retrieval.population
    if population is None:
        return []
    drawn = f"{fmt_num(population.n_queries)} of {fmt_num(population.n_eligible)}"
    rows = [
        ("queried (the population)", population.description),
        ("queries", drawn + (f" (sampled, seed {population.seed})" if population.sampled else "")),
        ("training items", SEEN_ITEMS.get(population.seen_items, population.seen_items)),
    ]
    protocol = other_protocol(population.seen_items, population.source)
    if protocol:  # the figures below are not the log's: said beside them, in every format
        rows.append(("protocol", protocol))
    if population.n_untrained_user_rows:
        rows.append(("user-table rows not queried (never in the training log)",
                     fmt_num(population.n_untrained_user_rows)))
    if population.n_unmatched_log_users:
        rows.append(("training-log users without a user-table row (served nothing, in their groups)",
                     fmt_num(population.n_unmatched_log_users)))
    return rows
