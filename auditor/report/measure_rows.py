"""Which list measures a K's table shows: one rule for a model's scorings and for served
lists audited alone (docs/measures.md, "In the report").

A user- or item-side measure the audit could not measure (no training profiles, no
holdout, an empty user group, a probability 0/0) is null under every list of the table:
its row is left out rather than shown as a row of ``n/a``. Every other measure is shown,
measured or not (an exposure measure missing for one list is news)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from auditor.sections import GROUP_LIST_MEASURES, ListMeasureInfo, finite_figure


def shown_rows(
    lists: Iterable[Mapping[str, Any]], measures: Mapping[str, ListMeasureInfo],
) -> dict[str, ListMeasureInfo]:
    """``measures`` (name -> label and display, in order) less the group measures that no
    list of ``lists`` (each list's figures by measure name) has a finite value for."""
    listed = list(lists)
    return {name: info for name, info in measures.items()
            if name not in GROUP_LIST_MEASURES or any(finite_figure(row.get(name)) is not None for row in listed)}
