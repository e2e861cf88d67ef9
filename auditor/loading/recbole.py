"""RecBole checkpoints: recognised by their pickled ``Config``, padding row dropped, ids by RecBole's rule.

RecBole (1.x) saves ``{"config": Config, "state_dict", "optimizer", "epoch", ...}``; the
restricted reader turns its ``Config`` into plain values, of which ``final_config_dict``
holds the settings the run used. Its embedding tables are indexed by RecBole's own ids:
``Dataset._remap`` (recbole/data/dataset/dataset.py, RecBole 1.2.1) numbers the tokens of
the user and item columns with ``pandas.factorize``, i.e. in order of first appearance
in the atomic ``.inter`` file after ``_data_filtering``, and puts ``[PAD]`` at id 0. So
row 0 of ``user_embedding``/``item_embedding`` is padding (never trained) and row r > 0
is the r-th distinct id of the log. Rows whose user or item id is missing are dropped
before numbering (``_filter_nan_user_or_item``).

The rule holds only for the atomic file RecBole read: a log read as anything else (a
plain CSV or Parquet log, even one holding every id) is refused, never numbered by it.

Filtering changes which ids are numbered (``user/item_inter_num_interval`` k-core loops,
``val_interval``, ``rm_dup_inter`` after a sort by time, ``.user``/``.item`` files);
popaudit does not re-run it: when the config shows it, the rule is refused and the raw
id of each row must be given (``item_ids``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from auditor.config import LoadOptions
from auditor.errors import IdMappingError, ModelLoadError, setting
from auditor.loading.checkpoints import RawModel
from auditor.loading.ids import ids_to_numpy
from auditor.loading.recbole_inter import ORDER_CAVEAT
from auditor.loading.logs import Log, TypeDrift, maybe_int, open_log, read_ids
from auditor.values import LogSpec
from auditor.model import ModelBundle

CONFIG_CLASS = "recbole.config.configurator.Config"
PAD = "[PAD]"
_UNBOUNDED = ("inf", "+inf", "infinity")


# ---------------------------------------------------------------------------- recognition


def as_recbole(raw: RawModel) -> RawModel:
    """``raw`` as a RecBole checkpoint (format ``recbole``, config = the run's final
    settings) when its config is RecBole's pickled ``Config``; else ``raw`` unchanged."""
    config = raw.config
    if not isinstance(config, Mapping) or config.get("__class__") != CONFIG_CLASS:
        return raw
    final = config.get("final_config_dict")
    if not isinstance(final, Mapping):
        return raw
    settings = dict(final)
    for key in ("model", "dataset", "model_class"):  # Config keeps them beside the dict (model_class: its name)
        if settings.get(key) is None and isinstance(config.get(key), str):
            settings[key] = config[key]
    return replace(raw, format="recbole", config=settings)


def finish_recbole(bundle: ModelBundle, options: LoadOptions) -> None:
    """Drop RecBole's padding row 0 from the chosen tables and attach RecBole's id rule."""
    bundle.item_table = _without_padding(bundle.item_table, bundle.item_key, bundle.source)
    if bundle.user_table is not None:
        bundle.user_table = _without_padding(bundle.user_table, bundle.user_key, bundle.source)
    config = bundle.config or {}
    rule = RecBoleIds(
        item_field=_text(config.get("ITEM_ID_FIELD"), "item_id"),
        user_field=_text(config.get("USER_ID_FIELD"), "user_id"),
        filters=tuple(unreproducible_settings(config)),
        map_items=options.item_ids is None,
        map_users=options.user_ids is None and bundle.user_table is not None,
    )
    if rule.map_items or rule.map_users:
        bundle.log_id_rule = rule


def _without_padding(table: np.ndarray, key: str | None, source: Path) -> np.ndarray:
    if table.ndim != 2 or table.shape[0] < 2:
        raise ModelLoadError(
            f"{source} is a RecBole checkpoint, but its table {key!r} has {table.shape[0] if table.ndim else 0} "
            "row(s): RecBole tables hold the padding row 0 and one row per id"
        )
    return table[1:]


def without_pad_entry(ids: np.ndarray, n_rows: int) -> np.ndarray | None:
    """An id file written from RecBole's ``field2id_token`` minus its ``[PAD]`` first entry
    (which names the padding row popaudit drops), when it is exactly one id longer than the
    table and starts with it; None for any other file (checked as every id file is)."""
    if len(ids) != n_rows + 1 or not len(ids) or str(ids[0]) != PAD:
        return None
    return ids[1:]


def _text(value: Any, default: str) -> str:
    return value if isinstance(value, str) and value else default


# ---------------------------------------------------------------------------- filtering


def unreproducible_settings(config: Mapping[str, Any]) -> list[str]:
    """The recorded data settings that drop, add or reorder ids before RecBole numbers
    them, each as ``name=value``; empty when numbering the log's ids reproduces RecBole."""
    found: list[str] = []

    def note(name: str) -> None:
        found.append(f"{name}={config.get(name)!r}")

    for name in ("user_inter_num_interval", "item_inter_num_interval"):
        if not _keeps_every_id(config.get(name)):
            note(name)
    for name in ("val_interval", "rm_dup_inter", "benchmark_filename", "alias_of_user_id", "alias_of_item_id"):
        if config.get(name) not in (None, {}, [], ""):
            note(name)
    # RecBole before 1.1 named its filters differently; a lower bound of 1 removes nothing.
    for name in ("min_user_inter_num", "min_item_inter_num"):
        if (_number(config.get(name)) or 0) > 1:
            note(name)
    for name in ("max_user_inter_num", "max_item_inter_num", "lowest_val", "highest_val", "equal_val", "not_equal_val"):
        if config.get(name) not in (None, {}, [], ""):
            note(name)
    load_col = config.get("load_col", {"inter": []})
    if load_col is None or (isinstance(load_col, Mapping) and ({"user", "item"} & set(map(str, load_col)))):
        found.append(f"load_col={load_col!r} (.user/.item files add ids and filter interactions)")
    return found


def _keeps_every_id(intervals: Any) -> bool:
    """True when RecBole's interval string admits every count >= 1 (``[0,inf)``, ``[1,inf)``)."""
    if intervals is None:
        return True
    for part in str(intervals).split(";"):
        part = part.strip()
        if len(part) < 5 or part[0] not in "([" or part[-1] not in ")]":
            continue
        ends = part[1:-1].split(",")
        if len(ends) != 2:
            continue
        low, high = _number(ends[0].strip()), ends[1].strip().lower()
        if low is None:
            continue
        if (low < 1 or (low == 1 and part[0] == "[")) and high in _UNBOUNDED:
            return True
    return False


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if not math.isnan(number) else None


# ---------------------------------------------------------------------------- the id rule


@dataclass(frozen=True)
class RecBoleIds:
    """RecBole's numbering of raw ids, reproduced from the ``.inter`` log it read."""

    item_field: str
    user_field: str
    filters: tuple[str, ...] = ()
    """Recorded settings that make the numbering unreproducible (see unreproducible_settings)."""
    map_items: bool = True
    map_users: bool = True

    def describe(self, what: str, log: Path) -> str:
        """The rule as the report states it (``inputs.item_id_mapping``)."""
        return (
            f"RecBole's own rule (Dataset._remap): raw {what} ids numbered in order of first appearance "
            f"in {log} (rows with both a user and an item id), row 0 ([PAD]) dropped, {ORDER_CAVEAT}"
        )

    def apply(self, bundle: ModelBundle, log: Path, fmt: str, user_col: str | None, item_col: str | None) -> None:
        """Set ``bundle.item_ids``/``user_ids`` to the raw id of each row, as RecBole numbered them."""
        if self.filters:
            self._refuse_filtered(bundle, log)
            return
        opened = open_log(LogSpec(log, fmt, user_col, item_col))
        if opened.format != "recbole":
            raise IdMappingError(
                f"{bundle.source} is a RecBole checkpoint: its rows are numbered by RecBole's own rule over the "
                f".inter file it read (ids in order of first appearance, [PAD] first), which holds only for that "
                f"file; {log} is read as a {opened.format} log, not a RecBole .inter file, so the numbering is not "
                f"reproduced from it. Pass {setting('item_ids')} FILE with the raw item id of each row (RecBole's "
                f"dataset.field2id_token[{self.item_field!r}] without {PAD!r}), or the dataset's .inter file as "
                f"{setting('interactions')} ({setting('interactions_format')} recbole if its name does not say so)"
            )
        for what, given, chosen, field in (
            ("item", item_col, opened.item_col, self.item_field),
            ("user", user_col, opened.user_col, self.user_field),
        ):
            if given is None and chosen != field and field in opened.columns:
                raise IdMappingError(
                    f"{bundle.source} was trained by RecBole on {what} column {field!r}, but popaudit reads "
                    f"column {chosen!r} of {log}: pass {setting(what + '_col')} {field}"
                )
        users = self.map_users and opened.user_col is not None
        if self.map_users and not users:
            bundle.warnings.append(
                f"{log} has no user column, so the user rows of {bundle.source} are not mapped to raw user ids"
            )
        items, user_ids = read_ids(opened, lambda as_strings: first_seen(opened, as_strings))
        if self.map_items:
            self._check_count(bundle, log, "item", len(items), bundle.n_items)
            bundle.item_ids, bundle.item_ids_source = items, self.describe("item", log)
        if users and bundle.user_table is not None:
            n_rows = int(bundle.user_table.shape[0])
            if len(user_ids) == n_rows:
                bundle.user_ids, bundle.user_ids_source = user_ids, self.describe("user", log)
            elif self.map_items:
                self._check_count(bundle, log, "user", len(user_ids), n_rows)
            else:
                bundle.warnings.append(
                    f"{log} holds {len(user_ids):,} distinct user ids but {bundle.source} has {n_rows:,} user rows "
                    f"after its padding row: user rows not mapped (pass {setting('user_ids')})"
                )
                bundle.user_rows_unknown = f"RecBole numbered users of another log than {log}"

    def _refuse_filtered(self, bundle: ModelBundle, log: Path) -> None:
        shown = "; ".join(self.filters)
        if not self.map_items:  # item ids given: only the user rows stay unmapped
            bundle.warnings.append(
                f"RecBole filtered its data before numbering ids ({shown}): the user rows of {bundle.source} are "
                f"not mapped to raw user ids (pass {setting('user_ids')}), and the frequencies count every row of "
                f"{log}, including rows RecBole's filtering left out of training"
            )
            if self.map_users:
                bundle.user_rows_unknown = f"RecBole filtered its data before numbering the users ({shown})"
            return
        raise IdMappingError(
            f"{bundle.source} was trained by RecBole with data settings that drop or reorder ids before RecBole "
            f"numbers them ({shown}); popaudit does not re-run RecBole's filtering, so it cannot tell from {log} "
            f"which raw item id each row holds. Pass {setting('item_ids')} FILE with the raw item id of each row "
            f"in row order: RecBole's dataset.field2id_token[{self.item_field!r}] without its first entry {PAD!r}"
        )

    def _check_count(self, bundle: ModelBundle, log: Path, what: str, found: int, rows: int) -> None:
        if found == rows:
            return
        raise IdMappingError(
            f"{log} holds {found:,} distinct {what} ids (rows with both ids), but the {what} table of RecBole "
            f"checkpoint {bundle.source} has {rows:,} rows after its padding row: RecBole numbered the ids of "
            f"another log (or of .{what} files beside it, or ids differing only in spelling such as '01' and '1'). "
            f"Pass the .inter file RecBole read, or {setting(what + '_ids')} FILE with the raw {what} id of each row"
        )


def first_seen(log: Log, as_strings: bool) -> tuple[np.ndarray, np.ndarray]:
    """Distinct item ids and distinct user ids of ``log`` in order of first appearance,
    over the rows that have both ids (as ``pandas.factorize`` numbers them after RecBole
    dropped rows with a missing id). Streams the log; memory O(distinct ids)."""
    items, users = _InOrder(), _InOrder()
    for item_batch, user_batch in log.batches(as_strings):
        keep = pc.is_valid(item_batch)
        if user_batch is not None:
            keep = pc.and_(keep, pc.is_valid(user_batch))
            users.add(user_batch.filter(keep))
        items.add(item_batch.filter(keep))
    return _typed(items.result(), as_strings, log, "item"), _typed(users.result(), as_strings, log, "user")


def _typed(ids: pa.Array | None, as_strings: bool, log: Log, what: str) -> np.ndarray:
    """Ids typed as the counting of the same log types them (``counting.count_item_ids``)."""
    if ids is None:
        return np.empty(0, dtype=np.int64)
    if as_strings:
        ids = maybe_int(ids)
    column = log.item_col if what == "item" else log.user_col
    return ids_to_numpy(ids, f"{what} column {column!r} of {log.path}")


class _InOrder:
    """Distinct values of a stream in order of first appearance, vectorised per batch.

    Each batch's distinct values (``pc.unique`` keeps first-appearance order) are kept in
    batch order; their concatenation has the stream's first appearances in order, so one
    ``pc.unique`` over it gives the answer. It is compacted that way whenever it has grown
    to twice its last compacted size, so memory stays O(distinct values).
    """

    def __init__(self) -> None:
        self._parts: list[pa.Array] = []
        self._held = 0
        self._compacted = 0
        self._type: pa.DataType | None = None

    def add(self, values: pa.Array | pa.ChunkedArray) -> None:
        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks()
        if pa.types.is_dictionary(values.type):
            values = values.dictionary_decode()
        if len(values) == 0:
            return
        if self._type is None:
            self._type = values.type
        elif values.type != self._type:  # ids of another type in a later block: re-read as text
            raise TypeDrift
        fresh = pc.unique(values)
        self._parts.append(fresh)
        self._held += len(fresh)
        if self._held > 2 * max(self._compacted, 1 << 16):
            self._compact()

    def _compact(self) -> None:
        merged = pc.unique(pa.concat_arrays(self._parts))
        self._parts, self._held = [merged], len(merged)
        self._compacted = self._held

    def result(self) -> pa.Array | None:
        if not self._parts:
            return None
        self._compact()
        return self._parts[0]
