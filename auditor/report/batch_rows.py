"""The batch summary's types: a :class:`BatchSummary` of :class:`SummaryRow` (one audited
row, its figures and changes from the previous row) and :class:`Trend` (one metric across
the manifest order), made by :func:`auditor.batch.summary.summarise` and rendered by
:func:`auditor.report.batch_summary.batch_document`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PairNote:
    """One of diff's notes on a row pair that the row-by-row caption repeats: it bears on a
    change the row states. In diff's words, in their parts (diff says ``SUBJECT (VALUES): EFFECT``)."""

    subject: str
    """``inputs.interactions differs``, ``only the new report sampled its queries``."""
    values: str
    """The pair's values, BASE vs NEW (``a.parquet vs b.parquet``)."""
    effect: str
    """What it means (``another training log: popularity, ... may differ``)."""
    changes: tuple[str, ...]
    """The columns whose change of the row it bears on (``spearman``, ``head_share_1pct_ratio@10``)."""


@dataclass(frozen=True)
class SummaryRow:
    """One ok row of the summary: where it sits in the manifest and its bias numbers."""

    row: int
    model: str
    label: str | None
    severity: str | None
    spearman: float | None
    head_share: float | None
    """The summary's head-share ratio metric (dot over cosine), see ``head_share_metric``."""
    rank_value: float | None
    delta_spearman: float | None = None
    """Change from the previous ok row in manifest order (None for the first)."""
    delta_head_share: float | None = None
    ndcg: float | None = None
    """Held-out NDCG of dot serving at the summary's K (``ndcg_dot@K``; None: no holdout)."""
    recall: float | None = None
    """Held-out recall of dot serving at the summary's K (``recall_dot@K``)."""
    recommended: str | None = None
    """The trade-off's recommended scoring (``accuracy.recommended`` of the row's report;
    ``dot``: none is clearly better than dot; None: no holdout, no scoring found a
    held-out item, or a ``popaudit mitigate`` output, whose audit recommends nothing)."""
    k: int | None = None
    """The K of ``head_share``, ``ndcg`` and ``recall``: the summary's K, the same for every
    row, or (``BatchSummary.per_row_k``) the row's own."""
    recommended_k: int | None = None
    """The K the trade-off recommended at (``accuracy.quoted_k`` of the row's report)."""
    seen_items: str | None = None
    """``retrieval.population.seen_items`` of the row's report: ``unknown`` is another
    protocol than the training log's (None: no retrieval)."""
    query_source: str | None = None
    """``retrieval.population.source`` of the row's report (None: no retrieval)."""
    head_share_apart: str | None = None
    """Why ``delta_head_share`` states no change: ``popaudit diff`` would not compare the two
    rows' figures (its reason, ``auditor.diff.compare.figures_apart``); None otherwise."""
    spearman_apart: str | None = None
    """Why ``delta_spearman`` states no change (diff's reason, e.g. another item id mapping:
    the same model's rows read another way); None otherwise."""
    pair_apart: str | None = None
    """Diff's reasons for every change of this row the summary withholds (Spearman's, the
    head share's), each once: the row-by-row caption's; None when every change is stated."""
    pair_notes: tuple[str, ...] = ()
    """Diff's notes on this row's report against the previous ok row's, every one, in its words
    (``popaudit diff``'s ``notes``: another training log, other cut-offs, another model, ...)."""
    caption_notes: tuple[PairNote, ...] = ()
    """Those of :attr:`pair_notes` the row-by-row caption repeats: the ones that bear on a change
    the row states (:func:`auditor.batch.report_facts.stated_notes`)."""
    index: str | None = None
    """``retrieval.index`` of the row's report: ``exact``, or an approximate index (``ivf``,
    ``hnsw``) whose figures of the model's lists miss what it misses (None: no retrieval)."""
    index_recall: float | None = None
    """An approximate index's recall at the row's K (``retrieval.recall``; None: exact)."""
    head_share_saturated: bool = False
    """The row's report marks ``k`` saturated (``retrieval.saturated``): the harm is not
    measured there, so ``head_share`` is None, said :data:`SATURATED_CELL`."""

    @property
    def approximate(self) -> bool:
        """The row's lists were retrieved by an approximate index."""
        return self.index is not None and self.index != "exact" and not self.index.startswith("none")


@dataclass(frozen=True)
class Trend:
    """How one metric moved across the manifest order (ok rows only)."""

    metric: str
    n: int
    first: float | None
    last: float | None
    change: float | None
    min_row: int | None
    max_row: int | None
    kendall_tau: float | None
    """Kendall's tau between manifest order and the metric (needs 3+ values)."""
    p_value: float | None
    direction: str
    """``rising``, ``falling`` (tau's p < 0.05), ``no clear trend`` or ``not comparable``
    (``apart``)."""
    apart: str | None = None
    """Why the rows' figures of this metric are not comparable (``popaudit diff``'s reasons
    for the rows it would not compare): no change, tau or direction then; None otherwise."""


@dataclass(frozen=True)
class BatchSummary:
    """Models ranked by bias, the manifest-order view, trends and the failed rows."""

    n_rows: int
    n_ok: int
    n_error: int
    rank_by: str
    head_share_metric: str | None
    ranking: list[SummaryRow]
    """Most biased first (``rank_by`` read as ``rank_order`` says; rows without a value last)."""
    order: list[SummaryRow]
    """Manifest order, with changes from the previous row."""
    trends: list[Trend]
    failures: list[tuple[int, str, str]]
    per_row_k: bool = False
    """The rows that measured a head-share ratio share no K: each row's figures are at its
    own K (the verdict's quoted K), said in each cell; ``head_share_metric`` is then None."""
    rank_order: str = "most biased first"
    """How ``ranking`` reads ``rank_by`` (:func:`auditor.batch.rank_by.rank_sense`)."""
    protocols: str | None = None
    """Which rows' lists were measured under which setting, where rows differ
    (``retrieval.population.seen_items "excluded": rows 0, 2; "unknown": row 1``;
    ``retrieval.index``, ``retrieval.popularity`` likewise); None when every row was
    measured the same way."""
    trends_apart: str | None = None
    """Why the trends' changes are not comparable, each setting once with all its values."""
