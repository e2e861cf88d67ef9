"""Which list measures a K's table shows: one rule for a model's scorings and for served
lists audited alone (docs/measures.md, "In the report").

A user- or item-side measure the audit could not measure (no training profiles, no
holdout, an empty user group, a probability 0/0) is null under every list of the table:
its row is left out rather than shown as a row of ``n/a``. Every other measure is shown,
measured or not (an exposure measure missing for one list is news)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from auditor.report.formatting import fmt_num, fmt_pct, fmt_share_row
from auditor.sections import GROUP_LIST_MEASURES, ListMeasureInfo, finite_figure

_HEAD_SHARE = re.compile(r"head_share_\d+pct")
"""The head-share measures (``head_share_1pct``, ...): the figures the harm bands judge."""


def shown_rows(
    lists: Iterable[Mapping[str, Any]], measures: Mapping[str, ListMeasureInfo],
) -> dict[str, ListMeasureInfo]:
    """``measures`` (name -> label and display, in order) less the group measures that no
    list of ``lists`` (each list's figures by measure name) has a finite value for."""
    listed = list(lists)
    return {name: info for name, info in measures.items()
            if name not in GROUP_LIST_MEASURES or any(finite_figure(row.get(name)) is not None for row in listed)}


def format_measure(value: Any, display: str) -> str:
    """A list measure's value as its registration says: ``pct`` (a share, as a
    percentage) or ``numN`` (N decimals)."""
    return fmt_pct(value) if display == "pct" else fmt_num(value, int(display[3:]))


def measure_cells(metric: str, display: str, values: Sequence[Any]) -> list[str]:
    """One measure's cells of a K's table, ``values`` by scoring, dot and cosine first: a
    head share with the decimals that keep dot's and cosine's difference on its side of
    the harm bands' edges (:func:`~auditor.report.formatting.fmt_share_row`, as the
    verdict quotes them), every other measure as :func:`format_measure` says."""
    if display == "pct" and _HEAD_SHARE.fullmatch(metric):
        return fmt_share_row(values)
    return [format_measure(value, display) for value in values]


def scoring_cells(scorings: Mapping[str, Mapping[str, Any]], metric: str, display: str = "pct") -> dict[str, str]:
    """One measure's cell under each scoring (``scorings``: each list's figures by name, dot
    and cosine first) as the K's retrieval table prints its row (:func:`measure_cells`): every
    other table that quotes these figures (the accuracy trade-off's head share) takes its
    cells from here, so one figure reads alike in every table of a report."""
    return dict(zip(scorings, measure_cells(metric, display, [listed.get(metric) for listed in scorings.values()])))
