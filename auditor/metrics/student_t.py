"""Tail probabilities of Student's t and the normal quantile, for the audit's tests.

Written out here rather than imported from ``scipy.special`` (``stdtr``, ``ndtri``):
importing scipy costs a small audit more than half a second, about as long as the audit
itself, for two scalar functions. The t tail is the regularised incomplete beta function
by its continued fraction (Lentz's method, as in Numerical Recipes §6.4), which agrees
with scipy's ``stdtr`` to about 1e-12 relative up to ten thousand items and 1e-11 up to
ten million (the fraction's terms, about sqrt(degrees of freedom) of them, add rounding;
scipy's Boost code switches to a series there), far below any digit a report shows;
the normal quantile is the standard library's (Wichura's AS241), within a few ulps of
``ndtri``. ``tests/test_correlations.py`` checks both against scipy.
"""

from __future__ import annotations

import math
from statistics import NormalDist

_TINY = 1e-300
"""Lentz's guard against a zero denominator."""
_EPS = 1e-16
"""The continued fraction stops when a step changes it by less than this (relative)."""
_STIRLING_FROM = 10.0
"""From this argument on, log-gamma differences come from Stirling's series."""


def t_two_sided_p(t: float, dof: float) -> float:
    """Two-sided p-value of a t statistic: P(|T| >= |t|) for T ~ Student's t with ``dof``
    degrees of freedom (scipy's ``2 * stdtr(dof, -|t|)``). NaN for NaN t; 0 for
    infinite t."""
    if math.isnan(t) or math.isnan(dof) or dof <= 0:
        return float("nan")
    if math.isinf(t):
        return 0.0
    t2 = t * t
    # P(|T| >= |t|) = I_x(dof/2, 1/2) with x = dof/(dof + t²); 1 - x is computed
    # directly (not as 1 - x) so that small t keeps its digits.
    return regularized_beta(dof / (dof + t2), dof / 2.0, 0.5, one_minus_x=t2 / (dof + t2))


def regularized_beta(x: float, a: float, b: float, *, one_minus_x: float | None = None) -> float:
    """The regularised incomplete beta function I_x(a, b) for a, b > 0 and 0 <= x <= 1.

    The continued fraction converges fast for x < (a + 1)/(a + b + 2); above that the
    symmetry I_x(a, b) = 1 - I_{1-x}(b, a) is used. ``one_minus_x``: 1 - x when the
    caller has it more exactly than the subtraction would give.
    """
    y = 1.0 - x if one_minus_x is None else one_minus_x
    if x <= 0.0:
        return 0.0
    if y <= 0.0:
        return 1.0
    if x < (a + 1.0) / (a + b + 2.0):
        return _front(x, y, a, b) * _continued_fraction(x, a, b) / a
    return 1.0 - _front(y, x, b, a) * _continued_fraction(y, b, a) / b


def _front(x: float, y: float, a: float, b: float) -> float:
    """x^a (1-x)^b / B(a, b), in logarithms so that large a neither overflows nor
    underflows before the end; log(x) through log1p(-y) where x is near 1."""
    log_x = math.log1p(-y) if y < 0.5 else math.log(x)
    log_y = math.log1p(-x) if x < 0.5 else math.log(y)
    return math.exp(a * log_x + b * log_y - _log_beta(a, b))


def _log_beta(a: float, b: float) -> float:
    """log B(a, b). With the larger argument past :data:`_STIRLING_FROM`, log Γ(big) -
    log Γ(big + small) comes from Stirling's series, whose terms stay of the size of
    the result: the difference of two large ``lgamma`` values would lose about
    log10(big · log big) digits (10 at a million degrees of freedom)."""
    small, big = min(a, b), max(a, b)
    if big < _STIRLING_FROM:
        return math.lgamma(small) + math.lgamma(big) - math.lgamma(small + big)
    total = small + big
    # log Γ(z) = (z - 1/2) log z - z + log(2π)/2 + s(z), so
    # log Γ(big) - log Γ(total) = -(big - 1/2) log1p(small/big) - small log(total) + small + s(big) - s(total).
    difference = -(big - 0.5) * math.log1p(small / big) - small * math.log(total) + small
    return math.lgamma(small) + difference + _stirling_tail(big) - _stirling_tail(total)


def _stirling_tail(z: float) -> float:
    """Stirling's series of log Γ(z) past its leading terms (z >= 10: the next term is
    below 1e-17 of the whole)."""
    w = 1.0 / (z * z)
    return (1.0 / 12.0 - w * (1.0 / 360.0 - w * (1.0 / 1260.0 - w * (1.0 / 1680.0 - w / 1188.0)))) / z


def _continued_fraction(x: float, a: float, b: float) -> float:
    """The continued fraction of I_x(a, b) (Numerical Recipes' ``betacf``), evaluated by
    the modified Lentz method. It needs O(sqrt(max(a, b))) terms near the switch point."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) >= _TINY else _TINY)
    h = d
    for m in range(1, 20 * int(math.sqrt(a + b)) + 200):
        m2 = 2 * m
        for numerator in (m * (b - m) * x / ((qam + m2) * (a + m2)),
                          -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) >= _TINY else _TINY)
            c = 1.0 + numerator / c
            c = c if abs(c) >= _TINY else _TINY
            step = c * d
            h *= step
        if abs(step - 1.0) < _EPS:
            break
    return h


def normal_quantile(p: float) -> float:
    """The standard normal quantile Φ⁻¹(p), 0 < p < 1 (scipy's ``norm.ppf``)."""
    return NormalDist().inv_cdf(p)
