"""Loading: model files into a :class:`ModelBundle`, interaction logs into counts.

``load_model`` asks the ``popaudit_load_model`` hook (plugins first, the built-in
loader in :mod:`auditor.loading.builtin` last), then applies ``--item-ids`` and
validates the item table whichever loader answered.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pluggy

from auditor.config import LoadOptions
from auditor.errors import IdMappingError, InputError, ModelLoadError, PluginError
from auditor.loading.builtin import SUPPORTED_FORMATS
from auditor.loading.interactions import IdCounts, align_counts, count_item_ids, open_log, read_pairs
from auditor.loading.tables import check_unique_ids, read_id_file, validate_item_table, validate_user_table
from auditor.model import ModelBundle


def load_model(path: Path, options: LoadOptions, pm: pluggy.PluginManager | None = None) -> ModelBundle:
    """Load a model or embedding table through the plugin hook, then check it.

    Raises InputError for a missing file, ModelLoadError when no loader knows the file,
    and the table/id errors of :func:`validate_item_table` and ``--item-ids``.
    """
    from auditor.plugins import call_hook, get_plugin_manager

    path = Path(path)
    if not path.exists():
        raise InputError(f"file not found: {path}")
    if pm is None:
        pm = get_plugin_manager()
    bundle = call_hook(pm, "popaudit_load_model", path=path, options=options)
    if bundle is None:
        raise ModelLoadError(
            f"cannot read {path}: not a model file popaudit knows. Supported: " + "; ".join(SUPPORTED_FORMATS)
        )
    if not isinstance(bundle, ModelBundle):
        raise PluginError(
            f"a popaudit_load_model plugin returned {type(bundle).__name__} for {path}, not a ModelBundle"
        )
    return finish_bundle(bundle, options)


def finish_bundle(bundle: ModelBundle, options: LoadOptions) -> ModelBundle:
    """Make the tables float32/contiguous, apply ``options.item_ids`` and validate."""
    source = str(bundle.source)
    bundle.item_table = _as_float32(bundle.item_table, "item table", source)
    bundle.warnings.extend(validate_item_table(bundle.item_table, source))
    if bundle.user_table is not None:
        bundle.user_table = _as_float32(bundle.user_table, "user table", source)
        validate_user_table(bundle.user_table, source, bundle.dim)
    if options.item_ids is not None:
        ids = read_id_file(Path(options.item_ids))
        if bundle.item_ids is not None:
            bundle.warnings.append(f"--item-ids {options.item_ids} replaces the item ids stored in {source}")
        _check_ids(ids, bundle.n_items, f"--item-ids file {options.item_ids}", source)
        bundle.item_ids = ids
    elif bundle.item_ids is not None:
        _check_ids(np.asarray(bundle.item_ids), bundle.n_items, f"the item ids stored in {source}", source)
    return bundle


def _as_float32(table: object, what: str, source: str) -> np.ndarray:
    arr = np.asarray(table)
    if arr.dtype.kind not in "fiu":
        raise ModelLoadError(f"{what} in {source} holds {arr.dtype} values, not numbers")
    if arr.dtype != np.float32 or not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr, dtype=np.float32)
    return arr


def _check_ids(ids: np.ndarray, n_items: int, what: str, source: str) -> None:
    if len(ids) != n_items:
        raise IdMappingError(
            f"{what} has {len(ids)} ids but the item table in {source} has {n_items} rows; "
            "it needs exactly one id per row, in row order"
        )
    check_unique_ids(ids, what)


__all__ = [
    "IdCounts",
    "align_counts",
    "count_item_ids",
    "finish_bundle",
    "load_model",
    "open_log",
    "read_pairs",
    "validate_item_table",
]
