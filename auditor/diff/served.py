"""Comparability of the vectors two audits served (docs/diff.md): figures of a model
served as it serves (propagated, with its bias, cached) and of its stored tables standing
in for them (``served_vectors.as_served`` false) are of other vectors, so a change between
them is no change of the model's bias. ``served_vectors.source`` or ``as_served`` that
differ flag every figure of the model's own lists (not of served lists given to popaudit) and the served frequency–norm figures
(``served_spearman``, ``served_loglog_slope``); a report without the section (a plain
table) counts as the stored tables served as they are."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from auditor.protocol import of_model_lists
from auditor.flat import FlatEntry

EFFECT = "figures of the model's own lists and served figures are not compared: the two audits served other vectors"


def _of_served(entry: FlatEntry) -> bool:
    return of_model_lists(entry) or entry.measure.startswith("served_")


def served_vector_flags(base: dict[str, Any], new: dict[str, Any],
                        differs: Callable[[str, Any, Any, Callable[[FlatEntry], bool], str], None]) -> None:
    """Call ``differs`` (the comparability rule's recorder) for each served-vector setting."""
    sb, sn = base.get("served_vectors") or {}, new.get("served_vectors") or {}
    for key, default in (("source", "tables"), ("as_served", True)):
        differs(f"served_vectors.{key}", sb.get(key, default), sn.get(key, default), _of_served, EFFECT)


__all__ = ["served_vector_flags"]
