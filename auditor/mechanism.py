"""The frequency–norm correlation the verdict grades the mechanism by (docs/report.md,
"Severity"): the served item vectors' where the model serves other vectors than its stored
item table and popaudit rebuilt them (a graph model's propagation or its checkpoint's
cache: ``served_vectors.as_served``), since those are what dot serving sees; else the
stored table's. A model that adds an item bias keeps its factors' correlation: the bias is
a channel of its own, graded by ``item_bias_spearman``, and a norm of [i, b_i] mixes it in.
The verdict, its summary and advice, the reports' headlines and the severity gate all read
this one choice."""

from __future__ import annotations

from dataclasses import dataclass

from auditor.result import FrequencyNorm, MeasuredSections
from auditor.wording import correlation_figures


@dataclass(frozen=True)
class GradedCorrelation:
    """The correlation the verdict rests on, and whose vectors it is of."""

    figures: FrequencyNorm | None
    """The statistics graded (None: not measured)."""
    served_by: str | None = None
    """The model whose served item vectors they are of (None: the stored item table's)."""
    stored_rho: float | None = None
    """Where they are the served vectors': the stored table's Spearman ρ, quoted beside."""

    def whose(self) -> str:
        """After the statistic, which vectors it is of (empty for the stored table, the
        only one there is)."""
        if self.served_by is None:
            return ""
        rho = self.stored_rho
        stored = "" if rho is None else f", against ρ = {correlation_figures(rho)[0]} for its stored item table"
        return f", of the item vectors {self.served_by} serves{stored}"


def graded_correlation(result: MeasuredSections) -> GradedCorrelation:
    """The frequency–norm statistics the severity falls back on, and whose they are."""
    served, stored = result.served_vectors, result.frequency_norm
    if served is None or not served.as_served or served.frequency_norm is None or served.source == "bias":
        return GradedCorrelation(stored)
    rho = stored.spearman if stored is not None and stored.spearman == stored.spearman else None  # NaN: undefined
    return GradedCorrelation(served.frequency_norm, served.model, rho)
