"""Ids a model file stores beside its tables, and an id file given against them.

Teams save the raw id of each row with the vectors (``np.savez(f, item_embeddings=E,
item_ids=ids)``, an ``item_ids`` buffer in a state dict). Such a member is the file's own
word on which item each row holds, as a Parquet table's id column is, so it maps the rows;
taking rows as ids beside it silently paired items with other items' rows (ρ 0.99 read as
−0.003). A member of that name that cannot be one id per row is refused, never ignored.

An ``item_ids``/``user_ids`` file given as well replaces the stored ids only where it
renames them (ids the file does not hold, or every row's id moved by one constant: the same
order renumbered, the fix for a log whose ids look shifted against them); placing ids the
file holds on other rows is a contradiction one of the two must be wrong about, and stops
the audit.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa

from auditor.config import LoadOptions
from auditor.errors import IdMappingError, setting
from auditor.loading.ids import check_unique_ids, ids_to_numpy
from auditor.model import ModelBundle

ID_MEMBERS = {"item": "item_ids", "user": "user_ids"}
"""The member (or state-dict key's last part) that holds each side's raw id per row."""


def take_stored_ids(
    bundle: ModelBundle, members: Mapping[str, object], options: LoadOptions, padding: Mapping[str, int] | None = None
) -> None:
    """Map ``bundle``'s rows through the ``item_ids``/``user_ids`` among ``members`` (the
    file's arrays or tensors), and drop those from its state dict: an id map is no part
    of an encoder. Raises IdMappingError for such a member that is not one integer or
    text id per row of its table, unless an id file for that side replaces it.

    ``padding``: ``item``/``user`` -> the padding row the file records for that table
    (:mod:`auditor.loading.padding_rows`). That row is no item, so ids of the other rows
    alone (one fewer) map them as well as one id per stored row does; the padding row is
    then left out by :func:`~auditor.loading.padding_rows.drop_padding_rows`."""
    used: set[str] = set()
    for role, name in ID_MEMBERS.items():
        keys = [k for k in members if k.rsplit(".", 1)[-1] == name and k not in (bundle.item_key, bundle.user_key)]
        n_rows = bundle.n_items if role == "item" else (None if bundle.user_table is None else len(bundle.user_table))
        if not keys or n_rows is None:
            continue
        used.update(keys)
        given = options.item_ids if role == "item" else options.user_ids
        where = f"{bundle.source} ({', '.join(f'`{k}`' for k in keys)})"
        ids = _ids_of(members[keys[0]], n_rows, role, where, len(keys), (padding or {}).get(role))
        if isinstance(ids, str):  # why the member is no id map of this table
            if given is None:
                raise IdMappingError(
                    f"{where} is named as the raw {role} id of each row, but {ids}; pass "
                    f"{setting(role + '_ids')} FILE with the raw {role} id of each {role}-table row"
                )
            bundle.warnings.append(f"{where} is not one {role} id per row ({ids}); {setting(role + '_ids')} {given} maps the rows")
            continue
        check_unique_ids(ids, f"the {role} ids stored in {where}", role)
        if role == "item":
            bundle.item_ids, bundle.item_ids_source = ids, f"the item ids stored in {where}"
        else:
            bundle.user_ids, bundle.user_ids_source = ids, f"the user ids stored in {where}"
    if used:
        bundle.state_dict = {k: v for k, v in bundle.state_dict.items() if k not in used}


def ids_beside_weights(checkpoint: Mapping[str, object], tensors: Mapping[str, object], model_key: str | None,
                       path: Path) -> dict[str, object]:
    """A checkpoint's top-level ``item_ids``/``user_ids`` that its flattened ``tensors`` lack
    (kept beside ``model_state_dict``: ``torch.save({"model_state_dict": sd, "item_ids": ids})``,
    or text ids no tensor holds): the file's word on the rows, as a buffer is, so they are
    carried to :func:`take_stored_ids`, never dropped (ρ 0.99 read as −0.11). One the weights
    also hold under that name (or as a buffer ``<module>.item_ids``), with other values, is
    refused: which maps the rows is not evident; with the same values, the two are one record."""
    out: dict[str, object] = {}
    for key in ID_MEMBERS.values():
        value = checkpoint.get(key)
        inner = {k: v for k, v in tensors.items() if k.rsplit(".", 1)[-1] == key}  # `item_ids`, a `model.item_ids` buffer
        if value is None or any(v is value for v in inner.values()):
            continue
        if not inner:
            out[key] = value
            continue
        differ = [k for k, v in inner.items() if not np.array_equal(_as_array(v), _as_array(value))]
        if differ and model_key is not None:  # identical ids inside and beside are one record (Loaders F4)
            raise IdMappingError(
                f"{path} stores `{key}` both beside `{model_key}` and inside it (`{differ[0]}`), with different "
                f"values: which maps the rows is not evident; keep one, or pass {setting(key)} FILE"
            )
    return out


def _as_array(value: object) -> np.ndarray:
    detach = getattr(value, "detach", None)
    return np.asarray(detach().cpu().numpy() if callable(detach) else value)


def _ids_of(value: object, n_rows: int, role: str, where: str, n_members: int, padding: int | None) -> np.ndarray | str:
    """The member as int64 or text ids, or why it cannot be this table's id map (``padding``:
    the table's recorded padding row, whose id may be left out)."""
    if n_members > 1:
        return f"{n_members} members carry that name, so which one maps the rows is not evident"
    arr = _as_array(value)
    if arr.ndim != 1 or arr.dtype.kind not in "iuUS":
        return f"it holds {arr.dtype} values of shape {list(arr.shape)}, not a list of integer or text ids"
    if arr.shape[0] != n_rows and (padding is None or arr.shape[0] != n_rows - 1):
        besides = "" if padding is None else f" ({n_rows - 1:,} besides its padding row {padding})"
        return f"it holds {arr.shape[0]:,} ids for the {n_rows:,} rows of the {role} table{besides}"
    return ids_to_numpy(pa.array(arr), f"the {role} ids stored in {where}")


def given_over_stored(stored: np.ndarray, given: np.ndarray, role: str, path: Path, source: object) -> str | None:
    """How the ``role`` id file at ``path`` (``given``) stands to the ids ``source`` stores
    for the same rows: None when they agree on every row; a warning when the file renames
    ids (names the stored ids do not hold); IdMappingError when it puts ids the file stores
    on other rows. Both have one id per row (checked before)."""
    a, b = _comparable(np.asarray(stored), np.asarray(given))
    differ = a != b
    n_differ = int(np.count_nonzero(differ))
    if n_differ == 0:
        return None
    moved = np.flatnonzero(differ & np.isin(b, a))
    option = f"{setting(role + '_ids')} {path}"
    steps = np.unique(b - a) if a.dtype.kind == "i" else np.empty(0)
    if steps.size == 1:  # every row's id moved by one constant: the same order renumbered (a shifted log's fix)
        return (f"{option} renumbers the {role} ids stored in {source}: every row's id {int(steps[0]):+d}, the rows in "
                "the same order; the log is matched against the given ids")
    if moved.size:
        row = int(moved[0])
        there = int(np.flatnonzero(a == b[row])[0])
        raise IdMappingError(
            f"{option} contradicts the {role} ids stored in {source}: {n_differ:,} of the {a.size:,} rows differ, "
            f"{moved.size:,} of them given an id that {source} stores on another row (row {row}: {_shown(given[row])} "
            f"given, {_shown(stored[row])} stored; {_shown(given[row])} is stored on row {there}). One of the two "
            f"orders is wrong: drop {setting(role + '_ids')} to map the rows through the stored ids, or give a file "
            "that agrees with them"
        )
    return (
        f"{option} replaces the {role} ids stored in {source}: it names {n_differ:,} of the {a.size:,} rows by ids "
        "the file does not hold, and the log is matched against the given ids"
    )


def _comparable(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both as integers, or both as text when either is text (as logs and ids compare)."""
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        return a.astype(np.int64), b.astype(np.int64)
    return a.astype(str), b.astype(str)


def _shown(value: object) -> str:
    return repr(value.item() if isinstance(value, np.generic) else value)


__all__ = ["ID_MEMBERS", "given_over_stored", "ids_beside_weights", "take_stored_ids"]
