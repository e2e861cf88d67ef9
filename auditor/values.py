"""Value types several layers share, light to import: one interaction log and how to read
it (:class:`LogSpec`), what the user said about ids as rows (:class:`RowIdPolicy`), and how
raw ids map to the rows of a table (:class:`ItemRows`, :class:`RowLookup`).

Settings (:mod:`auditor.config`), loading, measuring and the edges all take these; this
module imports nothing of popaudit but the model's type, and loads pyarrow and numpy only
when a lookup runs (``popaudit --help`` and a refused option need neither).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from auditor.errors import IdMappingError

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa


@dataclass(frozen=True)
class LogSpec:
    """One interaction log and how to read it; what every log reader takes first.

    ``fmt`` is one of ``INTERACTION_FORMATS`` (checked when the log is opened);
    ``user_col``/``item_col`` None: detected from the header (see :mod:`auditor.loading.sniff`).
    """

    path: Path
    fmt: str = "auto"
    user_col: str | None = None
    item_col: str | None = None
    max_memory: int | None = None
    """The memory ceiling compressed pages and dictionary-encoded ids are read under
    (:mod:`auditor.loading.parquet_bounds`); None: half the available memory."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))  # a str path is taken as a Path


@dataclass(frozen=True)
class RowIdPolicy:
    """What the user said about taking raw ids as table rows."""

    offset: int | None = None
    """row = raw id − offset (None: no offset given, rows assumed to be the ids)."""
    assume_row_ids: bool = False
    """Take ids as rows even when the log shows they evidently are not."""

    @property
    def shift(self) -> int:
        return self.offset or 0


@dataclass(frozen=True, eq=False)
class ItemRows:
    """How raw item ids map to the rows of an ``n_items``-row item table: through
    ``item_ids`` (the raw id of each row, in row order), else ``row = id − offset``.

    Raises IdMappingError when ``item_ids`` does not hold one id per row.
    """

    item_ids: np.ndarray | None
    n_items: int
    offset: int = 0
    """Only where ids are taken as rows (``item_ids`` None)."""

    def __post_init__(self) -> None:
        if self.item_ids is not None and len(self.item_ids) != self.n_items:
            raise IdMappingError(f"{len(self.item_ids)} item ids for a table of {self.n_items} rows")

    def raw_ids(self, rows: np.ndarray) -> np.ndarray:
        """The raw id of each table row in ``rows``: ``item_ids[rows]``, else
        ``rows + offset`` (the mapping read backwards, for reports that name items)."""
        import numpy as np

        rows = np.asarray(rows, dtype=np.int64)
        return np.asarray(self.item_ids)[rows] if self.item_ids is not None else rows + self.offset

    @cached_property
    def lookup(self) -> RowLookup | None:
        """The hash lookup through ``item_ids`` (built once, on first use); None: rows are ids."""
        return RowLookup(self.item_ids) if self.item_ids is not None else None


class RowLookup:
    """Raw item id -> table row (hash lookup), -1 when absent.

    Integer and string ids compare as strings; the id set is cast to text at most once,
    not once per batch of a streamed log.
    """

    def __init__(self, item_ids: np.ndarray) -> None:
        import pyarrow as pa  # heavy: loaded when a lookup is first built

        self.keys = pa.array(item_ids)
        self._text: pa.Array | None = None

    def __call__(self, values: pa.Array) -> np.ndarray:
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        keys = self.keys
        if pa.types.is_integer(values.type) != pa.types.is_integer(keys.type):
            if self._text is None:
                self._text = keys.cast(pa.string())
            values, keys = values.cast(pa.string()), self._text
        rows: np.ndarray = pc.fill_null(pc.index_in(values, value_set=keys), -1).to_numpy(zero_copy_only=False)
        return rows.astype(np.int64)


def lookup_rows(values: np.ndarray, item_ids: np.ndarray) -> np.ndarray:
    """Row of each raw id in ``item_ids`` (hash lookup), -1 when absent."""
    import numpy as np
    import pyarrow as pa

    if len(values) == 0:
        return np.empty(0, dtype=np.int64)
    return RowLookup(item_ids)(pa.array(values))


__all__ = ["ItemRows", "LogSpec", "RowIdPolicy", "RowLookup", "lookup_rows"]
