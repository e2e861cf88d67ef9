"""Norm-aware serving: the one α rule, at the bottom of the import graph.

A norm-aware scoring with exponent α in [0, 1] scores an item k for a query q by
‖q‖^α ‖k‖^α cos(q, k). Ranking by it is ranking by the inner product q·k weighted by
‖k‖^(α−1) (the query's own factor ‖q‖^(1−α) is the same for every item of one query),
so the same rule serves three purposes:

* names: the scoring ``alpha_<α>`` (:func:`alpha_scoring`), and back
  (:func:`scoring_alpha`: ``dot`` is α = 1, ``cosine`` α = 0); two α it names alike are
  refused, never merged (:func:`name_clash`);
* retrieval: the weight ‖k‖^(α−1) of each item's inner product (:func:`norm_weights`);
* ``popaudit mitigate``: each item row rewritten as k·‖k‖^(α−1) (:func:`rescale_rows`),
  so that plain dot-product serving of the rewritten table ranks as ``alpha_<α>``.

Norms are given by the caller (the overflow-safe ones of
:func:`auditor.metrics.frequency_norm.item_norms`); nothing here imports popaudit.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from decimal import Decimal
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy is imported where rows are weighed: settings name scorings without it
    import numpy as np

ALPHA_PREFIX = "alpha_"
"""Norm-aware scorings are named ``alpha_<a>`` (``alpha_0.5``); 1 is ``dot``, 0 ``cosine``."""

RULE = (
    "k -> k * ||k||^(alpha - 1) per item row (direction kept, norm becomes ||k||^alpha; zero rows stay "
    "zero; alpha = 1 leaves every row unchanged), computed in float64 and written in the table's dtype: "
    "dot-product scores over the result equal (q . k) * ||k||^(alpha - 1) over the original"
)
"""The rule in words, as the sidecar of ``popaudit mitigate`` records it."""


def zero_rows_at_cosine(n_zero: int) -> str | None:
    """What serving a table written at α = 0 does with its ``n_zero`` zero rows (None: none).

    Cosine never serves a zero row (it has no direction), but an inner-product index over
    the unit rows α = 0 writes scores it 0, above every candidate whose cosine is
    negative: the one place where dot over the rewritten table is not the scoring it was
    written for (for α > 0 both score it 0). Said where α = 0 is written and where a
    table with zero rows is measured, so no promised figure hides it."""
    if n_zero <= 0:
        return None
    return (
        f"{n_zero:,} item rows are zero: a table written at alpha 0 (cosine, unit rows) keeps them zero, and a "
        "dot-product index over it scores them 0, above every candidate with a negative cosine, while cosine "
        "never serves them; for users with fewer positive-cosine candidates than K its lists and figures differ "
        "from cosine's"
    )


def alpha_scoring(alpha: float) -> str:
    """The name of the norm-aware scoring with exponent ``alpha`` (``alpha_0.5``): α as
    Python's ``format(a, "g")`` writes it, in positional notation where that has an
    exponent (1e-05 is ``alpha_0.00001``), so that every name is one a gate can spell
    (the gate grammar has no ``-`` in a name)."""
    text = f"{alpha:g}"
    if "e" in text:  # the same six significant digits, without the exponent's '-'
        text = format(Decimal(text), "f")
    return f"{ALPHA_PREFIX}{text}"


def name_clash(alphas: Iterable[float]) -> str | None:
    """Why ``alphas`` cannot all be measured, or None: two different values that
    :func:`alpha_scoring` names alike (0.3 and 0.3000001 are both ``alpha_0.3``) would be
    filed, reported and gated under one name, the figures of one passing for the other's.
    Said after the setting's name by whoever asks (the option, a manifest column)."""
    seen: dict[str, float] = {}
    for alpha in alphas:
        name = seen.setdefault(alpha_scoring(alpha), alpha)
        if seen[alpha_scoring(alpha)] != alpha:
            return (f"{name!r} and {alpha!r} both name the scoring {alpha_scoring(alpha)} (a scoring's α is named to "
                    "six significant digits): give one of them, or values that differ within six digits")
    return None


_SPELLED = re.compile(rf"{ALPHA_PREFIX}(\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)(?=[_@]|$)")
"""An α in a flat name as someone may spell it (``alpha_0.30``, ``alpha_3e-1``), before its
``@K`` (or a measure's ``_`` part, or the name's end)."""


def canonical_name(name: str) -> str:
    """``name`` (a flat metric name) with each α spelled as :func:`alpha_scoring` names it:
    ``head_share_1pct_alpha_0.30@10`` and ``…alpha_3e-1@10`` are ``…alpha_0.3@10``, so
    equivalent spellings gate the same figure."""
    return _SPELLED.sub(lambda match: alpha_scoring(float(match.group(1))), name)


def scoring_alpha(scoring: str) -> float | None:
    """The exponent a scoring serves with: dot 1, cosine 0, alpha_<a> a; None otherwise."""
    if scoring == "dot":
        return 1.0
    if scoring == "cosine":
        return 0.0
    if scoring.startswith(ALPHA_PREFIX):
        try:
            return float(scoring[len(ALPHA_PREFIX) :])
        except ValueError:
            return None
    return None


def norm_weights(norms: np.ndarray, alpha: float) -> np.ndarray:
    """``‖k‖^(α − 1)`` of non-zero norms: the factor that turns an inner product into a
    score ranking like ``‖q‖^α ‖k‖^α cos`` (1 for dot, ``1/‖k‖`` for cosine)."""
    import numpy as np

    if alpha == 1.0:
        return np.ones_like(norms)
    if alpha == 0.0:
        return 1.0 / norms
    return np.power(norms, alpha - 1.0)


def query_factors(norms: np.ndarray, alpha: float) -> np.ndarray:
    """``‖q‖^(α − 1)`` per query, 0 for a zero query (whose inner products are all 0):
    what turns a query's weighted inner products into its ``alpha_<α>`` scores."""
    import numpy as np

    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return np.where(norms > 0, np.power(norms, alpha - 1.0), 0.0)


def rescale_rows(rows: np.ndarray, alpha: float, norms: np.ndarray) -> np.ndarray:
    """``rows`` (float64, with their ``norms``) rewritten as k·‖k‖^(α−1).

    Computed as (k/‖k‖)·‖k‖^α, which neither overflows nor divides by zero for a finite
    table: zero rows stay zero (for α = 0 too). α = 1 returns ``rows`` itself.
    """
    import numpy as np

    rows = np.asarray(rows, dtype=np.float64)
    if alpha == 1.0:
        return rows
    out = np.zeros_like(rows)
    nonzero = norms > 0
    np.divide(rows, norms[:, None], out=out, where=nonzero[:, None])  # unit rows: entries in [-1, 1]
    out *= np.power(norms, alpha)[:, None]
    return out


__all__ = [
    "ALPHA_PREFIX", "RULE", "alpha_scoring", "canonical_name", "name_clash", "norm_weights", "query_factors", "rescale_rows", "scoring_alpha",
    "zero_rows_at_cosine",
]  # fmt: skip
