"""The types plugins implement and receive, in one module at the bottom of the import graph.

A plugin (``plugins/README.md``) implements hooks of :mod:`auditor.hookspecs` that return
or take these: a :class:`Renderer` (one report format) rendering with a
:class:`RenderContext`; a :class:`Measure` (one value per audit) or a :class:`ListMeasure`
(measured on every scoring's top-K lists, bound once to a :class:`ListContext`, called on
:class:`Slots`); a loader's :class:`~auditor.model.ModelBundle` and a
:class:`~auditor.model.LiveModel`; a :class:`ModelFormat` (hook ``popaudit_model_formats``:
how files of a format are told apart, read and written by ``mitigate``, with its
:class:`WriteJob` and :class:`Written`). Nothing here imports the rest of popaudit but the
value types of :mod:`auditor.model` and the results of :mod:`auditor.result`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from auditor.config import GroupPolicy, LoadOptions
from auditor.model import ItemStats, LiveModel, LogIdRule, ModelBundle
from auditor.progress import SILENT, Progress

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


def read_only(array: Any) -> Any:
    """A view of ``array`` that raises ValueError on any in-place write (anything else, None
    included, as it is): what popaudit lends plugins of the arrays its built-in figures read,
    so that a plugin cannot change them silently (it fails, named: ``plugins/README.md``)."""
    if not isinstance(array, np.ndarray) or not array.flags.writeable:
        return array
    view = array.view()
    view.flags.writeable = False
    return view


@dataclass(frozen=True)
class ListContext:
    """What a list measure is built from, once per audit (``ListMeasure.bind``).

    Every array is a read-only view (:func:`read_only`): the built-in measures and
    retrieval read the same arrays, so a measure that changes one in place fails, named."""

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
    seen_kept: bool = False
    """Each row's training items stay among its candidates (``keep_seen``): every item can be
    served to every row, so PopRSP and PopREO count training items in their denominators."""
    population: tuple[np.ndarray, np.ndarray] | None = None
    """CSR of the training profiles of every user the user groups are drawn among, when the
    list rows are only some of them (served lists alone: the training log's users, with a
    served list or not); None: the list rows themselves (a model's queried users)."""

    def __post_init__(self) -> None:
        for name in ("popularity", "user_counts", "item_table", "item_ids"):
            object.__setattr__(self, name, read_only(getattr(self, name)))
        for name in ("profiles", "relevant", "population"):
            pair = getattr(self, name)
            if pair is not None:
                object.__setattr__(self, name, tuple(read_only(part) for part in pair))

    @property
    def n_items(self) -> int:
        return int(np.shape(self.popularity)[0])


@dataclass
class Slots:
    """A list matrix prepared once for several measures (validity mask, safe rows); its
    arrays are read-only views (:func:`read_only`), as every measure reads the same ones."""

    lists: np.ndarray
    n_items: int
    valid: np.ndarray = field(init=False)
    safe: np.ndarray = field(init=False)
    all_valid: bool = field(init=False)
    """Every slot is filled (no -1): measures may skip the ``valid`` mask."""
    _counts: np.ndarray | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        lists = np.asarray(self.lists)
        if lists.ndim != 2:
            raise ValueError(f"lists must be a (n_queries, K) matrix, got shape {lists.shape}")
        if not np.issubdtype(lists.dtype, np.integer):
            raise ValueError(f"lists must hold integer item rows, got dtype {lists.dtype}")
        lowest = int(lists.min()) if lists.size else 0
        if lists.size and (lists.max() >= self.n_items or lowest < -1):
            raise ValueError(f"item rows must lie in [0, {self.n_items}) or be -1 (empty)")
        self.lists = lists = read_only(lists)
        self.valid = read_only(lists >= 0)
        self.all_valid = lowest >= 0
        # Empty slots gather row 0 and are masked out by ``valid`` afterwards.
        self.safe = lists if self.all_valid else read_only(np.where(self.valid, lists, 0))

    @property
    def counts(self) -> np.ndarray:
        """Exposure count per item row (int64, length n_items)."""
        if self._counts is None:
            filled = self.lists.ravel() if self.all_valid else self.lists[self.valid]
            self._counts = read_only(np.bincount(filled, minlength=self.n_items).astype(np.int64))
        return self._counts

    def per_list_mean(self, values: np.ndarray, include: np.ndarray | None = None) -> np.ndarray:
        """Per-query mean of ``values[item]`` over the filled (and included) slots; NaN if none."""
        if include is None and self.all_valid and self.lists.shape[1]:
            # Every slot counts: the masked sum below with nothing masked (the same array, the same sum).
            gathered = values[self.lists]
            full = gathered.astype(np.result_type(gathered.dtype, 0.0), copy=False).sum(axis=1, dtype=np.float64)
            mean: np.ndarray = full / self.lists.shape[1]
            return mean
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
        (the verdict is decided after the measures). ``bundle`` holds the vectors dot
        serving sees, as the list measures' context does: a RecBole graph model's served
        vectors in place of its stored tables (whose item norms are
        ``result.plot_data.norms``; ``result.served_vectors`` says what was served)."""
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


@dataclass
class DeclaredListMeasure:
    """A :class:`ListMeasure` as a plain record, the shape of every built-in one (and
    usable by plugins): its declaration and ``make``, which :meth:`bind` calls. Not
    frozen, as the protocol's attributes are plain ones."""

    name: str
    label: str
    display: str
    definition: str
    make: Callable[[ListContext], Scorer | None]

    def bind(self, context: ListContext) -> Scorer | None:
        """The measure for this audit (None: the audit lacks its inputs; values null)."""
        return self.make(context)


__all__ = [
    "DeclaredListMeasure", "ItemStats", "ListContext", "ListMeasure", "LiveModel", "LogIdRule", "Measure", "ModelBundle", "RenderContext",
    "Renderer", "Scorer", "Slots", "as_slots", "exposure_counts", "read_only",
]  # fmt: skip


# ---------------------------------------------------------------- model formats (loading/formats.py)

HEAD_BYTES = 16
"""How many leading bytes magic numbers and sniffs see."""

Reader = Callable[[Path, LoadOptions], ModelBundle | None]
"""``read(path, options)``: the model, or None when the file is not one after all."""
Sniff = Callable[[bytes, int], bool]
"""``sniff(head, size)``: the file's first :data:`HEAD_BYTES` bytes and its size say it is one."""


@dataclass
class RowNorms:
    """Every row's norm before and after the rescaling (float64, one per item)."""

    before: np.ndarray
    after: np.ndarray


@dataclass
class Written:
    """What a format writer wrote."""

    norms: RowNorms
    dtype: str
    """The table's dtype, kept in the output (``float32``, ``bfloat16``, ...)."""
    layout: str = "rows"
    """``rows``, or ``columns`` for a linear layer over one-hot ids (its columns are the items)."""
    notes: list[str] = field(default_factory=list)
    format: str | None = None
    """The output's format when it is not the input's (a state dict written with ``tensors_only``)."""


@dataclass(frozen=True)
class WriteJob:
    """What a writer is asked: ``source`` with its item table rescaled by ``alpha`` into
    ``target`` (a temporary file renamed into place by the caller)."""

    source: Path
    target: Path
    alpha: float
    model_format: str
    """``ModelBundle.format`` of the loaded model (``state_dict``, ``recbole``, ...)."""
    item_key: str | None
    n_items: int
    dim: int
    options: LoadOptions
    """How the model was read (``item_key``, ...), for writers that read it again."""
    output_kind: str | None = None
    """The kind the output's suffix names, when it names one (writers that may write
    another kind than the input's decide by it)."""
    item_ids: np.ndarray | None = None
    interactions: Path | None = None
    """The training log given to ``mitigate``, for writers that need it (RecBole's split)."""
    tensors_only: bool = False
    max_memory: int | None = None
    progress: Progress = SILENT
    item_bias_key: str | None = None
    """The item bias the model adds to every score (``ModelBundle.item_bias_key``), which
    ``check`` serves as one more column of the item rows: rescaled with them, so that the
    output serves ``check``'s ``alpha_<α>`` scoring; writers that cannot must refuse."""


class Writer(Protocol):
    """Writes ``job.source`` rescaled into ``job.target``; ModelLoadError (or another
    AuditError) when it cannot write this model faithfully."""

    def __call__(self, job: WriteJob) -> Written: ...


@dataclass(frozen=True)
class ModelFormat:
    """One model format (module docstring)."""

    name: str
    """The file kind (``torch``, ``npy``, ...); a plugin's format name."""
    description: str
    """What its files are, in the words of "Supported: ..." messages."""
    suffixes: tuple[str, ...] = ()
    """Lower-case suffixes with the dot (``.npy``); a suffix decides before content does."""
    magic: tuple[bytes, ...] = ()
    """Leading bytes of its files (any one of them)."""
    sniff: Sniff | None = None
    """A content test beyond leading bytes, tried after every format's magic."""
    read: Reader | None = None
    kind: str | None = None
    """For a format told apart inside files of another kind: that kind (read by its reader)."""
    pickle_free: bool = False
    """Its files hold no pickle, so no code can hide in them."""
    writes: frozenset[str] = frozenset()
    """The loaded models (``ModelBundle.format``) ``mitigate`` writes back in this format."""
    write: Writer | None = None
    output_kinds: tuple[str, ...] = ()
    """Kinds besides its own an output may be named as (RecBole graph models: a plain table)."""

    @property
    def file_kind(self) -> str:
        return self.kind or self.name

    def writes_back(self, model_format: str) -> bool:
        """Whether ``mitigate`` writes a model read as ``model_format`` in this format
        (a format that lists none writes back the models read as its own name)."""
        return model_format in (self.writes or {self.name})

    def matches_suffix(self, path: Path) -> bool:
        return path.suffix.lower() in self.suffixes

    def matches_content(self, head: bytes, size: int) -> bool:
        return any(head.startswith(m) for m in self.magic) or (self.sniff is not None and self.sniff(head, size))
