"""Built-in extra measures, registered through ``popaudit_measures`` like any plugin's.

* ``item_bias_spearman``: Spearman ρ between a model's per-item bias term and training
  frequency. Matrix-factorisation models (LightFM, cornac, implicit BPR) add a bias to
  every score, a second channel for popularity that norms do not show; None when the
  model has no bias term or no frequencies were counted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from auditor.hookspecs import hookimpl

if TYPE_CHECKING:
    from auditor.hookspecs import Measure
    from auditor.model import ItemStats, ModelBundle
    from auditor.result import MeasuredSections


class ItemBiasSpearman:
    """Spearman ρ of item bias vs training frequency (a bias is a second popularity channel)."""

    name = "item_bias_spearman"
    description = (
        "Spearman rho between the model's per-item bias term and training frequency "
        "(null without a bias term): popularity served through the bias, not the norm"
    )

    def compute(self, bundle: ModelBundle, stats: ItemStats | None, result: MeasuredSections) -> float | None:
        from scipy.stats import spearmanr

        biases = getattr(bundle, "item_biases", None)
        if biases is None or stats is None or biases.shape[0] != stats.frequencies.shape[0]:
            return None
        values = np.asarray(biases, dtype=np.float64)
        frequencies = np.asarray(stats.frequencies, dtype=np.float64)
        if np.ptp(values) == 0 or np.ptp(frequencies) == 0:  # ρ is undefined for a constant
            return None
        rho = float(spearmanr(values, frequencies).statistic)
        return rho if np.isfinite(rho) else None


@hookimpl
def popaudit_measures() -> list[Measure]:
    """The built-in extra measures."""
    return [ItemBiasSpearman()]
