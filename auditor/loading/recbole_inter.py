"""A RecBole ``.inter`` file read as RecBole 1.2.1 reads it, for its evaluation split.

RecBole's ``Dataset`` (recbole/data/dataset/dataset.py) reads the atomic file with
``pandas.read_csv`` (the typed header ``name:type``, ``field_separator`` between fields,
token columns as text, float columns as float64, pandas' default missing-value words),
drops the rows whose user or item id is missing (``_filter_nan_user_or_item``), numbers
the user and item tokens in order of first appearance with ``[PAD]`` as id 0 (``_remap``),
fills missing floats with the column's mean (``_fill_nan``), min-max scales float columns
when ``normalize_all``/``normalize_field`` ask (``_normalize``), and finally holds floats
as float32 tensors (``_dataframe_to_interaction``). Its time order (``eval_args`` order
``TO``) is a stable sort of that float32 copy, so timestamps a float32 cannot tell apart
keep their file order. This module reproduces those steps, streaming the file in record
batches: memory is 16 bytes per interaction (two int32 codes, a float64 time, the row
number) plus the distinct ids.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from auditor.errors import EvaluationSplitError, InteractionsError
from auditor.loading.id_text import PANDAS_MISSING
from auditor.loading.ids import ids_to_numpy
from auditor.loading.logs import CSV_BLOCK_BYTES, maybe_int
from auditor.loading.messages import arrow_reason
from auditor.loading.sniff import open_stream, sample_lines

BLOCK_BYTES = CSV_BLOCK_BYTES
"""Bytes of the file parsed per record batch (its longest line must fit)."""

ORDER_CAVEAT = ("which holds only for the .inter file RecBole read, in its row order (a reordered copy of the same rows "
                "numbers them otherwise, and nothing in the checkpoint shows it)")
"""What RecBole's numbering by first appearance rests on (said in every RecBole id-mapping line)."""


@dataclass(frozen=True)
class InterFields:
    """The columns of the ``.inter`` file RecBole used, from the run's config."""

    user: str
    item: str
    time: str | None
    """The time column when RecBole loaded it (None: not loaded)."""
    separator: str = "\t"


@dataclass(frozen=True)
class InterRows:
    """The interactions RecBole kept, in file order."""

    users: np.ndarray
    """int64: RecBole's user id minus 1 (the user-table row once padding row 0 is dropped)."""
    items: np.ndarray
    """int64: RecBole's item id minus 1."""
    rows: np.ndarray
    """int64: each interaction's data row in the file (0 = the first line after the header)."""
    user_ids: np.ndarray
    """Raw user id of each user row (ints when every token is a canonical integer)."""
    item_ids: np.ndarray
    times: np.ndarray | None
    """float32: the time column as RecBole sorts it (filled, scaled); None without one."""
    n_dropped: int
    """Rows dropped for a missing user or item id."""


def inter_fields(config: Mapping[str, Any], path: Path, need_time: bool) -> InterFields:
    """The user, item and time columns of ``path`` that the run's config names, checked
    against the typed header (EvaluationSplitError when RecBole could not have read them)."""
    separator = config.get("field_separator")
    separator = separator if isinstance(separator, str) and separator else "\t"
    if len(separator) != 1:
        raise EvaluationSplitError(f"field_separator {separator!r} is not one character (popaudit reads those only)")
    header = sample_lines(path, "recbole")[0].rstrip("\r\n")
    types: dict[str, str] = {}
    for part in header.split(separator):
        name, colon, kind = part.partition(":")
        if not colon or ":" in kind:
            raise InteractionsError(
                f"{path} is not a RecBole atomic file: its header field {part[:40]!r} is not NAME:TYPE "
                f"(fields separated by {separator!r})"
            )
        types[name] = kind
    loaded = _loaded_columns(config, set(types))
    fields = {}
    for what, key, default in (("user", "USER_ID_FIELD", "user_id"), ("item", "ITEM_ID_FIELD", "item_id")):
        name = config.get(key) or default
        if name not in types or name not in loaded:
            raise EvaluationSplitError(f"the {what} column {name!r} ({key}) is not a loaded column of {path}")
        if types[name] != "token":
            raise EvaluationSplitError(f"the {what} column {name!r} of {path} is {types[name]!r}, not a token column")
        fields[what] = name
    time = config.get("TIME_FIELD")
    time = time if isinstance(time, str) and time in types and time in loaded else None
    if time is not None and types[time] != "float":
        if need_time:
            raise EvaluationSplitError(
                f"the time column {time!r} of {path} is {types[time]!r}: RecBole orders by the ids it numbers "
                "such a column with, which popaudit does not reproduce"
            )
        time = None
    return InterFields(fields["user"], fields["item"], time, separator)


def _loaded_columns(config: Mapping[str, Any], header: set[str]) -> set[str]:
    """Columns RecBole loads from the .inter file (``load_col``/``unload_col``)."""
    load_col, unload_col = config.get("load_col"), config.get("unload_col")
    if load_col is None:
        loaded = set(header)
    elif not isinstance(load_col, Mapping) or "inter" not in load_col:
        loaded = set()
    elif load_col["inter"] == "*":
        loaded = set(header)
    else:
        loaded = {str(c) for c in load_col["inter"]}
    if isinstance(unload_col, Mapping) and isinstance(unload_col.get("inter"), (list, tuple)):
        loaded -= {str(c) for c in unload_col["inter"]}
    return loaded & header


def read_inter(path: Path, fields: InterFields, config: Mapping[str, Any]) -> InterRows:
    """The interactions of ``path`` as RecBole holds them before splitting (module docstring)."""
    users, items = _Numbering(), _Numbering()
    user_codes: list[np.ndarray] = []
    item_codes: list[np.ndarray] = []
    times: list[np.ndarray] = []
    rows: list[np.ndarray] = []
    seen = 0
    for batch in _batches(path, fields):
        user, item = batch.column(0), batch.column(1)
        keep = pc.and_(pc.is_valid(user), pc.is_valid(item))
        rows.append(np.flatnonzero(keep.to_numpy(zero_copy_only=False)) + seen)
        seen += batch.num_rows
        user_codes.append(users.codes(user.filter(keep)))
        item_codes.append(items.codes(item.filter(keep)))
        if fields.time is not None:
            times.append(batch.column(2).filter(keep).to_numpy(zero_copy_only=False).astype(np.float64))
    kept = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
    if kept.size == 0:
        raise InteractionsError(f"no interactions in {path}: no row has both a user and an item id")
    time = _as_recbole_time(np.concatenate(times), fields.time, config) if fields.time is not None else None
    return InterRows(
        users=np.concatenate(user_codes).astype(np.int64),
        items=np.concatenate(item_codes).astype(np.int64),
        rows=kept.astype(np.int64),
        user_ids=users.raw_ids(f"user column {fields.user!r} of {path}"),
        item_ids=items.raw_ids(f"item column {fields.item!r} of {path}"),
        times=time,
        n_dropped=seen - int(kept.size),
    )


def _batches(path: Path, fields: InterFields) -> Any:
    """Record batches of (user, item[, time]) as RecBole types them (ids text, time float64)."""
    header = sample_lines(path, "recbole")[0].rstrip("\r\n").split(fields.separator)
    raw = {part.partition(":")[0]: part for part in header}
    wanted = [raw[fields.user], raw[fields.item]] + ([raw[fields.time]] if fields.time else [])
    types = {raw[fields.user]: pa.string(), raw[fields.item]: pa.string()}
    if fields.time:
        types[raw[fields.time]] = pa.float64()
    convert = pacsv.ConvertOptions(
        include_columns=wanted, column_types=types, null_values=list(PANDAS_MISSING), strings_can_be_null=True
    )
    try:
        reader = pacsv.open_csv(
            open_stream(path),
            read_options=pacsv.ReadOptions(block_size=BLOCK_BYTES),
            parse_options=pacsv.ParseOptions(delimiter=fields.separator),
            convert_options=convert,
        )
        for batch in reader:
            yield batch.select(wanted)
    except pa.ArrowInvalid as exc:
        raise InteractionsError(f"cannot parse {path} as a RecBole atomic file: {arrow_reason(exc)}") from exc


def _as_recbole_time(values: np.ndarray, name: str, config: Mapping[str, Any]) -> np.ndarray:
    """The time column after ``_fill_nan`` and ``_normalize``, as the float32 RecBole sorts."""
    missing = np.isnan(values)
    if missing.any():
        count = values.size - int(missing.sum())
        # pandas' Series.mean: NaN as 0 in numpy's (pairwise) sum, divided by the count
        mean = float(np.where(missing, 0.0, values).sum() / count) if count else float("nan")
        values = np.where(missing, mean, values)
    discretized = config.get("discretization")
    if isinstance(discretized, Mapping) and name in discretized:
        raise EvaluationSplitError(f"the time column {name!r} is discretized (discretization), which popaudit does not reproduce")
    fields = config.get("normalize_field")
    fields = fields if isinstance(fields, (list, tuple)) else ()
    if name in fields or (not fields and config.get("normalize_all")):
        high, low = values.max(), values.min()
        values = np.ones_like(values) if high == low else (values - low) / (high - low)
    return values.astype(np.float32)


class _Numbering:
    """RecBole's numbering of one token column: first appearance order (``pandas.factorize``).

    Each batch's distinct tokens (``dictionary_encode`` keeps first-appearance order) are
    looked up among the tokens seen so far; new ones are appended in order. Memory: the
    distinct tokens.
    """

    def __init__(self) -> None:
        self._tokens: pa.Array = pa.array([], type=pa.string())

    def codes(self, values: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """0-based id of each value (RecBole's id minus 1)."""
        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks()
        if len(values) == 0:
            return np.zeros(0, dtype=np.int32)
        encoded = pc.dictionary_encode(values)
        local = encoded.dictionary
        where = pc.index_in(local, value_set=self._tokens).fill_null(-1).to_numpy(zero_copy_only=False)
        where = where.astype(np.int64)
        fresh = np.flatnonzero(where < 0)
        if fresh.size:
            where[fresh] = len(self._tokens) + np.arange(fresh.size)
            self._tokens = pa.concat_arrays([self._tokens, local.take(pa.array(fresh))])
        return where[encoded.indices.to_numpy(zero_copy_only=False)].astype(np.int32)

    def raw_ids(self, what: str) -> np.ndarray:
        """The tokens in id order, typed as popaudit types raw ids (:func:`maybe_int`)."""
        return ids_to_numpy(maybe_int(self._tokens), what)
