"""The user- and item-side list measures (:mod:`auditor.metrics.user_measures`,
:mod:`auditor.metrics.item_measures`) in report order, registered by
:mod:`auditor.metrics.builtin_measures` through ``popaudit_measures`` like the other
built-ins: their flat names, gates, batch columns and report rows come with them. Their
cut-offs are :class:`~auditor.metrics.popularity_groups.GroupPolicy`'s (``ListContext.groups``)."""

from __future__ import annotations

from auditor.metrics.item_measures import ITEM_MEASURES
from auditor.metrics.user_measures import USER_MEASURES
from auditor.plugin_api import DeclaredListMeasure

GROUP_MEASURES: tuple[DeclaredListMeasure, ...] = (*USER_MEASURES, *ITEM_MEASURES)
"""Every user- and item-side list measure, in report order (after the exposure measures)."""
