"""How figures are worded in sentences (verdict, trade-off, mitigation): a change is never
stated between two numbers that print the same."""

from __future__ import annotations

import math

MAX_DECIMALS = 3


def pct(x: float | None, decimals: int = 1) -> str:
    """``x`` (a share) as a percentage: ``n/a`` when unknown."""
    return "n/a" if x is None or not math.isfinite(x) else f"{100 * x:.{decimals}f}%"


def pct_pair(before: float | None, after: float | None) -> tuple[str, str]:
    """Both shares as percentages, each with two significant digits at least (one decimal
    at least), and more up to :data:`MAX_DECIMALS` until they differ: 0.66% and 0.56%,
    not 0.7% and 0.6%; never "from 0.8% to 0.8%" when they are not equal."""
    values = [abs(100 * x) for x in (before, after) if x is not None and math.isfinite(x) and x != 0]
    smallest = min(values, default=10.0)
    first = min(MAX_DECIMALS, max(1, 1 - math.floor(math.log10(smallest))))
    for decimals in range(first, MAX_DECIMALS + 1):
        a, b = pct(before, decimals), pct(after, decimals)
        if a != b:
            return a, b
    return pct(before, MAX_DECIMALS), pct(after, MAX_DECIMALS)


def moves(before: float | None, after: float | None, what: str) -> str:
    """``what`` goes from one share to the other, or stays where it is when they print alike."""
    if before is not None and after is not None and before == after:
        return f"{what} stays at {pct(before)}"
    a, b = pct_pair(before, after)
    return f"{what} stays at {a}" if a == b else f"{what} goes from {a} to {b}"


def points(delta: float) -> str:
    """A change of shares in percentage points, signed: ``-1.25 points``."""
    return f"{100 * delta:+.2f} points"


def interval(ci: tuple[float, float] | None, scale: float = 1.0, decimals: int = 4) -> str:
    """A 95% CI as ``[lo, hi]`` (``scale`` 100 for points), or nothing without one."""
    if ci is None:
        return ""
    lo, hi = (scale * v for v in ci)
    return f", 95% CI [{lo:+.{decimals}f}, {hi:+.{decimals}f}]"
