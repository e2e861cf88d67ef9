"""The types plugins implement and receive, in one module at the bottom of the import graph.

A plugin (``plugins/README.md``) implements hooks of :mod:`auditor.hookspecs` that return
or take these: a :class:`Renderer` (one report format) rendering with a
:class:`RenderContext`; a :class:`Measure` (one value per audit) or a :class:`ListMeasure`
(measured on every scoring's top-K lists, bound once to a :class:`ListContext`, called on
:class:`Slots`); a loader's :class:`~auditor.model.ModelBundle` and a
:class:`~auditor.model.LiveModel`. Nothing here imports the rest of popaudit but the
value types of :mod:`auditor.model` and the results of :mod:`auditor.result`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from auditor.config import GroupPolicy
from auditor.model import ItemStats, LiveModel, LogIdRule, ModelBundle

if TYPE_CHECKING:
    from auditor.result import AuditResult, MeasuredSections


# ---------------------------------------------------------------- reports


@dataclass(frozen=True)
class RenderContext:
    """Where and how a report is rendered."""

    destination: Path | None = None
    """The file being written (None: the terminal); renderers that write images put
    them beside it."""
    color: bool = False
    width: int = 100
    attachments: dict[Path, bytes] = field(default_factory=dict)
    """Files a renderer produces beside ``destination`` (e.g. Markdown's images): put
    here rather than written, so that every output of a run is written only once all
    of them rendered (a failing renderer leaves nothing behind)."""


class Renderer(Protocol):
    """One output format.

    A renderer may also have ``render_document(document, context)``
    (:class:`auditor.report.document.DocumentRenderer`): then it renders every report
    document, the batch and experiment summaries included; without it, audits only.
    """

    name: str
    """The ``--format`` value."""
    suffix: str
    """Default file extension, with the dot."""
    description: str

    def render(self, result: AuditResult, context: RenderContext) -> str | bytes:
        """The report as text (or bytes), ready to print or write."""
        ...


# ---------------------------------------------------------------- measures


@dataclass(frozen=True)
class ListContext:
    """What a list measure is built from, once per audit (``ListMeasure.bind``)."""

    popularity: np.ndarray
    """Popularity per item row: training interactions, or distinct users (``popularity``)."""
    user_counts: np.ndarray | None = None
    """Distinct training users per item row (None: the log has no user column)."""
    n_users: int | None = None
    """Distinct users of the whole training log (None: unknown)."""
    item_table: np.ndarray | None = None
    """The audited item table (rows as in the lists), e.g. for norm-based measures."""
    item_ids: np.ndarray | None = None
    """Raw item id of each row (None: row = id), to join the measure's own item data."""
    profiles: tuple[np.ndarray, np.ndarray] | None = None
    """CSR ``(indptr, item_rows)`` of each list row's training items, aligned with the
    rows of every scoring's lists (the query population's ``seen_indptr``/``seen_rows``);
    None: unknown (a query file), and the user-side measures are null."""
    relevant: tuple[np.ndarray, np.ndarray] | None = None
    """CSR ``(indptr, item_rows)`` of each list row's held-out items, aligned like
    ``profiles`` (a row without held-out items is empty); None: no holdout."""
    groups: GroupPolicy | None = None
    """The popularity groups' cut-offs (None: the defaults, :class:`~auditor.config.GroupPolicy`)."""

    @property
    def n_items(self) -> int:
        return int(np.shape(self.popularity)[0])


@dataclass
class Slots:
    """A list matrix prepared once for several measures (validity mask, safe rows)."""

    lists: np.ndarray
    n_items: int
    valid: np.ndarray = field(init=False)
    safe: np.ndarray = field(init=False)
    _counts: np.ndarray | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        lists = np.asarray(self.lists)
        if lists.ndim != 2:
            raise ValueError(f"lists must be a (n_queries, K) matrix, got shape {lists.shape}")
        if not np.issubdtype(lists.dtype, np.integer):
            raise ValueError(f"lists must hold integer item rows, got dtype {lists.dtype}")
        if lists.size and (lists.max() >= self.n_items or lists.min() < -1):
            raise ValueError(f"item rows must lie in [0, {self.n_items}) or be -1 (empty)")
        self.lists = lists
        self.valid = lists >= 0
        # Empty slots gather row 0 and are masked out by ``valid`` afterwards.
        self.safe = np.where(self.valid, lists, 0)

    @property
    def counts(self) -> np.ndarray:
        """Exposure count per item row (int64, length n_items)."""
        if self._counts is None:
            self._counts = exposure_counts(self.lists, self.n_items)
        return self._counts

    def per_list_mean(self, values: np.ndarray, include: np.ndarray | None = None) -> np.ndarray:
        """Per-query mean of ``values[item]`` over the filled (and included) slots; NaN if none."""
        mask = self.valid if include is None else self.valid & include[self.safe]
        total = np.where(mask, values[self.safe], 0.0).sum(axis=1, dtype=np.float64)
        n = mask.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(n > 0, total / np.maximum(n, 1), np.nan)


def as_slots(lists: np.ndarray | Slots, n_items: int) -> Slots:
    """``lists`` as :class:`Slots` (a no-op when it already is one)."""
    return lists if isinstance(lists, Slots) else Slots(np.asarray(lists), n_items)


def exposure_counts(lists: np.ndarray, n_items: int) -> np.ndarray:
    """How many slots of ``lists`` each item row fills (int64, length ``n_items``)."""
    lists = np.asarray(lists)
    return np.bincount(lists[lists >= 0], minlength=n_items).astype(np.int64)


Scorer = Callable[[Slots], "float | None"]
"""A bound list measure: one scoring's lists at one K -> a value (None: not measurable)."""


class Measure(Protocol):
    """An extra measure: a name, a description and ``compute``.

    ``compute`` returns a float (also a flat metric usable by ``--fail-on``) or any
    JSON-serialisable value; it is stored under ``measures[name]`` in the report.
    """

    name: str
    description: str

    def compute(self, bundle: ModelBundle, stats: ItemStats | None, result: MeasuredSections) -> Any:
        """The measure's value for one audit; ``result`` holds every measured section
        (the verdict is decided after the measures)."""
        ...


class ListMeasure(Protocol):
    """A measure of top-K lists, measured for every scoring (dot, cosine, popular,
    alpha_<a>) at every K like the built-in exposure measures.

    Its flat metrics are ``<name>_<scoring>@K`` and ``<name>_ratio@K`` (dot / cosine),
    usable by ``--fail-on`` and written as batch columns; the report lists it under
    ``label`` in every K's table and its ``definition`` under ``retrieval.definitions``.
    """

    name: str
    """An identifier (letters, digits, underscores), unique among all measures."""
    label: str
    """How report tables name it, e.g. ``"head share, top 1% of items"``."""
    display: str
    """``"pct"`` (a share shown as a percentage) or ``"numN"`` (N decimals, N 0-9)."""
    definition: str
    """What it measures, in words, starting with ``"<name>: "``."""

    def bind(self, context: ListContext) -> Scorer | None:
        """Build the measure from one audit's statistics, once; the returned callable
        measures one scoring's lists at one K (a :class:`Slots`: ``lists`` is the
        (n_queries, K) matrix of item rows, -1 for an empty slot). Return None when the
        audit lacks what the measure needs (its values are null)."""
        ...


__all__ = [
    "ItemStats", "ListContext", "ListMeasure", "LiveModel", "LogIdRule", "Measure", "ModelBundle", "RenderContext",
    "Renderer", "Scorer", "Slots", "as_slots", "exposure_counts",
]  # fmt: skip
