"""Which items dot serving favours: the items whose exposure dot product raises most over
cosine, and those it lowers most (docs/measures.md, "Which items gain").

Exposure of an item under a scoring at K is the number of the population's top-K lists
that hold it (``RetrievalOutcome.exposure``). The gain is dot's exposure minus cosine's.
The table is the ``n`` items of largest positive gain (ties: higher dot exposure, then
lower row) and the ``n`` of most negative gain (ties: higher cosine exposure, then lower
row), each with its raw id (through the audit's :class:`~auditor.values.ItemRows`: the
table's ids, else row + ``--id-offset``), training frequency, norm, norm percentile (the share of the
catalogue whose norm is at most the item's, in percent: ``scipy.stats.percentileofscore``
with ``kind="weak"``) and its exposure under dot, cosine and popular. Items whose
exposure does not change are in neither list, so either may hold fewer than ``n``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from auditor.values import ItemRows

DEFAULT_N = 20
"""Items listed on each side by default."""
DEFINITION = (
    "exposure shift: exposure = the number of top-K lists that hold the item; gain = dot's exposure - "
    "cosine's; the items of largest gain (ties: higher dot exposure, then lower row) and of most negative gain "
    "(ties: higher cosine exposure, then lower row); norm percentile = share of items whose norm is at most "
    "the item's"
)


@dataclass(frozen=True)
class ShiftedItem:
    """One item of the table."""

    item_id: Any
    """The raw id (a JSON-safe int or str; the table row when ids are unknown)."""
    row: int
    frequency: int
    norm: float
    norm_percentile: float
    exposure_dot: int
    exposure_cosine: int
    exposure_popular: int | None
    """None when the popular scoring was not measured at this K."""

    @property
    def gain(self) -> int:
        return self.exposure_dot - self.exposure_cosine


@dataclass(frozen=True)
class ExposureShift:
    """The items dot serving raises and lowers most at one K (module docstring)."""

    k: int
    n: int
    gained: tuple[ShiftedItem, ...]
    lost: tuple[ShiftedItem, ...]
    n_queries: int | None = None
    """Lists served (exposure / n_queries is the share of lists holding the item; None: unknown)."""
    definition: str = DEFINITION

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: every item with its ``gain``."""

        def item(entry: ShiftedItem) -> dict[str, Any]:
            return {**asdict(entry), "gain": entry.gain}

        return {"k": self.k, "n": self.n, "n_queries": self.n_queries, "definition": self.definition,
                "gained": [item(e) for e in self.gained], "lost": [item(e) for e in self.lost]}  # fmt: skip


def exposure_shift(
    exposure: Mapping[str, Mapping[int, np.ndarray]],
    k: int,
    frequencies: np.ndarray,
    norms: np.ndarray,
    item_rows: ItemRows | None = None,
    n: int = DEFAULT_N,
    n_queries: int | None = None,
) -> ExposureShift:
    """The table at cut-off ``k`` from ``exposure`` (scoring -> K -> count per item row;
    ``dot`` and ``cosine`` at ``k`` are required), the items' training ``frequencies``,
    ``norms``, and ``item_rows``, how the audit maps raw ids to rows, read backwards for
    each listed item's raw id (None: the row is the id). ValueError on a missing scoring
    or arrays of different lengths."""
    if n < 0:
        raise ValueError(f"n must be at least 0, got {n}")
    counts = {}
    for scoring in ("dot", "cosine"):
        if k not in exposure.get(scoring, {}):
            raise ValueError(f"no {scoring} exposure at K={k}: the table compares dot with cosine")
        counts[scoring] = np.asarray(exposure[scoring][k], dtype=np.int64)
    popular = exposure.get("popular", {}).get(k)
    n_items = counts["dot"].shape[0]
    sizes = {"cosine exposure": counts["cosine"].shape[0], "frequencies": np.shape(frequencies)[0],
             "norms": np.shape(norms)[0]}  # fmt: skip
    if popular is not None:
        sizes["popular exposure"] = np.shape(popular)[0]
    if item_rows is not None:
        sizes["item ids"] = item_rows.n_items
    for name, size in sizes.items():
        if size != n_items:
            raise ValueError(f"{name} cover {size} items but dot exposure {n_items}")
    norms = np.asarray(norms, dtype=np.float64)
    percentile = np.searchsorted(np.sort(norms), norms, side="right") * (100.0 / max(n_items, 1))
    gain = counts["dot"] - counts["cosine"]
    rows = np.arange(n_items)
    up = rows[gain > 0]
    up = up[np.lexsort((up, -counts["dot"][up], -gain[up]))][:n]
    down = rows[gain < 0]
    down = down[np.lexsort((down, -counts["cosine"][down], gain[down]))][:n]

    listed = np.concatenate([up, down])
    raw_ids = dict(zip(listed.tolist(), (listed if item_rows is None else item_rows.raw_ids(listed)).tolist()))

    def entry(row: int) -> ShiftedItem:
        return ShiftedItem(
            item_id=raw_ids[row],
            row=int(row),
            frequency=int(np.asarray(frequencies)[row]),
            norm=float(norms[row]),
            norm_percentile=float(percentile[row]),
            exposure_dot=int(counts["dot"][row]),
            exposure_cosine=int(counts["cosine"][row]),
            exposure_popular=None if popular is None else int(np.asarray(popular)[row]),
        )

    return ExposureShift(k=k, n=n, gained=tuple(entry(int(r)) for r in up), lost=tuple(entry(int(r)) for r in down),
                         n_queries=n_queries)  # fmt: skip
