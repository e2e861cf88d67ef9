"""The report's head share, ARP and APLT bound to one audit: the numbers of
:class:`~auditor.metrics.exposure.HeadShare`, :class:`~auditor.metrics.exposure.AvgRecPopularity`
and :class:`~auditor.metrics.exposure.LongTailShare` (their defaults), read from the
per-list figures every built-in measure shares (:meth:`auditor.metrics.group_state.Prepared.figures`:
one count of every kind of item per list, one mean popularity per list) instead of a
gather over the list matrix per measure.

The counts are integers, so the shares are the very floats the classes compute; ARP is
the same per-list mean the user-side measures read. ``tests/test_exposure_scorers.py``
holds them to the classes bit for bit.
"""

from __future__ import annotations

import math

import numpy as np

from auditor.metrics.exposure import HeadShare, _nanmean
from auditor.metrics.group_state import HEAD_PERCENTS, prepared
from auditor.plugin_api import ListContext, Scorer, Slots, as_slots


def head_share(context: ListContext, percent: int) -> Scorer:
    """``head_share_<percent>pct``: head slots / filled slots over every list (NaN: none filled);
    a head not among the shared masks (:data:`HEAD_PERCENTS`) is :class:`HeadShare`'s own."""
    if percent not in HEAD_PERCENTS:
        return HeadShare(context.popularity, percent).measure
    state = prepared(context)
    column = state.kinds.column(f"head_{percent}pct")

    def measure(slots: Slots) -> float:
        figures = state.figures(as_slots(slots, context.n_items))
        filled = int(figures.filled.sum())
        return math.nan if filled == 0 else float(int(figures.counts[:, column].sum()) / filled)

    return measure


def arp(context: ListContext) -> Scorer:
    """``arp``: mean over lists with a filled slot of their mean popularity (cold items 0)."""
    state = prepared(context)

    def measure(slots: Slots) -> float:
        return _nanmean(state.figures(as_slots(slots, context.n_items)).list_pop)

    return measure


def aplt(context: ListContext) -> Scorer:
    """``aplt``: mean over non-empty lists of their share of long-tail items."""
    state = prepared(context)
    column = state.kinds.column("aplt_tail")

    def measure(slots: Slots) -> float:
        figures = state.figures(as_slots(slots, context.n_items))
        tail, filled = figures.counts[:, column].astype(np.float64), figures.filled
        with np.errstate(invalid="ignore", divide="ignore"):
            return _nanmean(np.where(filled > 0, tail / np.maximum(filled, 1), np.nan))

    return measure
