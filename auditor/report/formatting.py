"""Format-neutral building blocks of every report for people: the :class:`Table` of
plain-string cells and consistent number formatting (each format escapes cells itself)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from auditor.wording import SKEW_EDGES, interval_decimals, pct_pair, percent_text, ratio_figure, share_row

MISSING = "n/a"
"""What a value that is absent (None, NaN) reads as."""


@dataclass(frozen=True)
class Table:
    """A table of plain-string cells; each format renders and escapes it.

    ``numeric[i]`` right-aligns column i; shorter than ``headers`` means the rest are text.
    The layout hints are format-neutral: ``badge`` is a column of statuses (holds /
    violated / unknown) a format may colour, ``wrap`` columns may break anywhere (long
    paths, long values), ``nowrap`` columns never break.
    """

    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    numeric: tuple[bool, ...] = ()
    caption: str = ""
    title: str = ""
    """Shown above the table where no heading names it (a terminal's tables)."""
    badge: int | None = None
    wrap: tuple[int, ...] = ()
    nowrap: tuple[int, ...] = ()

    def is_numeric(self, column: int) -> bool:
        """Whether column ``column`` holds numbers (right-aligned)."""
        return column < len(self.numeric) and self.numeric[column]


def finite(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def text_or_missing(value: Any) -> str:
    """A piece of text for people: ``n/a`` for None or an empty string, never ``None``."""
    return MISSING if value is None or value == "" else str(value)


def fmt_num(value: Any, digits: int = 3) -> str:
    """A number for people: ints with thousands separators, floats to ``digits`` places.

    None and NaN read as ``n/a``; tiny non-zero values (p-values) use scientific notation.
    """
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, np.integer)):
        return f"{int(value):,}"
    number = finite(value)
    if number is None:
        return MISSING
    if number == 0:
        return f"{0:.{digits}f}"
    if abs(number) < 10 ** (-digits):
        return f"{number:.2e}"
    if abs(number) >= 1000:
        return f"{number:,.1f}"
    return f"{number:.{digits}f}"


def fmt_pct(value: Any) -> str:
    """A share in [0, 1] as a percentage, with the decimals its size needs: one from 1%
    (``34.1%``), two below (``0.42%``), and two significant digits below 0.1%
    (``0.036%``, ``0.0042%``), so a small share never reads as 0."""
    number = finite(value)
    return MISSING if number is None else percent_text(100.0 * number)


def fmt_ratio(value: Any) -> str:
    """A ratio such as dot/cosine, as ``4.16×`` (``∞×``: only the divisor is 0)."""
    if isinstance(value, (int, float)) and value == math.inf:
        return f"{ratio_figure(value)}×"
    number = finite(value)
    return MISSING if number is None else f"{ratio_figure(number)}×"


def fmt_skew_pair(dot: Any, cosine: Any) -> tuple[str, str]:
    """Dot's and cosine's head share beside the severity they grade, with the decimals that
    keep their difference on its side of a harm band's edge (as the summary says them)."""
    a, b = finite(dot), finite(cosine)
    return pct_pair(a, b, SKEW_EDGES) if a is not None and b is not None else (fmt_pct(dot), fmt_pct(cosine))


def fmt_share_row(shares: Sequence[Any]) -> list[str]:
    """A table row of head shares, dot's and cosine's first, as :func:`auditor.wording.share_row`
    writes it (the recommendation sentence quotes its shares from the same rule)."""
    return share_row([finite(value) for value in shares])


def fmt_scalar(value: Any) -> str:
    """A loose scalar (a setting, a probe detail): ints with separators, floats to 4
    significant digits (``10``, ``0.007035``, ``5.684e-14``), booleans as yes/no."""
    if value is None or isinstance(value, (bool, np.bool_)):
        return MISSING if value is None else ("yes" if value else "no")
    if isinstance(value, (int, np.integer)):
        return f"{int(value):,}"
    number = finite(value)
    return MISSING if number is None else format(number, ".4g")


def fmt_value(value: Any, limit: int = 160) -> str:
    """Any JSON-like value in one line (numbers via :func:`fmt_scalar`; a list or mapping
    cut at ``limit``). Text is the audit's own sentences, whose point may come last (an id
    mapping's caveat, the part of a definition that differs), so it is never cut."""
    if isinstance(value, str):
        return " ".join(value.split())
    if value is None or isinstance(value, (bool, int, float, np.generic)):
        return fmt_scalar(value)
    elif isinstance(value, (list, tuple)) and all(isinstance(v, (int, float, str)) for v in value):
        text = ", ".join(v if isinstance(v, str) else fmt_scalar(v) for v in value)
    else:
        text = json.dumps(value, default=str, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def fmt_range(low: Any, high: Any) -> str:
    """``3–7``, or a single value when both ends are equal."""
    return fmt_num(low) if low == high else f"{fmt_num(low)}–{fmt_num(high)}"


def fmt_interval(low: Any, high: Any, joiner: str = " to ", *, resamples: int | None = None) -> str:
    """A confidence interval's bounds (``0.22 to 0.62``; more decimals where three print
    bounds that differ alike, ``0.9961 to 0.9965``); when a bound is missing (JSON
    null), ``not computed`` after 0 bootstrap ``resamples``, else ``undefined`` (a CI that
    could not be computed, its reason in the warnings)."""
    lo, hi = finite(low), finite(high)
    if lo is None or hi is None:
        return "not computed" if resamples == 0 else "undefined"
    shown = fmt_num(lo), fmt_num(hi)
    if shown[0] == shown[1] and lo != hi:  # never a collapsed "0.996 to 0.996" (wording.bounds_apart)
        places = interval_decimals(lo, hi, 3)
        shown = f"{lo:.{places}f}", f"{hi:.{places}f}"
    return joiner.join(shown)


def flatten(mapping: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """Nested mappings as ``(dotted.key, value)`` pairs, in insertion order."""
    items: list[tuple[str, Any]] = []
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            items.extend(flatten(value, f"{name}."))
        else:
            items.append((name, value))
    return items


def join_words(words: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    if len(words) <= 1:
        return "".join(words)
    return ", ".join(words[:-1]) + " and " + words[-1]
