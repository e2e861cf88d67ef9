"""Loading: model files into a :class:`ModelBundle`, interaction logs into counts.

``load_model`` reads a file that a plugin's format claims (``popaudit_model_formats``,
:mod:`auditor.loading.formats`) with that format's reader; any other file it asks the
``popaudit_load_model`` hook (plugins first, the built-in loader in
:mod:`auditor.loading.builtin`, which reads the built-in formats, last). It then applies
``--item-ids`` and validates the item table whichever loader answered.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from auditor.config import LoadOptions
from auditor.errors import AuditError, EmbeddingTableError, IdMappingError, ModelLoadError, PluginError, setting
from auditor.lazy_names import imported_on_first_use
from auditor.model import InteractionPairs, ModelBundle

if TYPE_CHECKING:
    import numpy as np
    import pluggy

    from auditor.loading.alignment import align_counts
    from auditor.loading.counting import IdCounts, count_item_ids
    from auditor.loading.logs import open_log
    from auditor.loading.pairs import read_pairs
    from auditor.loading.validation import validate_item_table

_LAZY = {
    "align_counts": "auditor.loading.alignment",
    "IdCounts": "auditor.loading.counting",
    "count_item_ids": "auditor.loading.counting",
    "open_log": "auditor.loading.logs",
    "read_pairs": "auditor.loading.pairs",
    "validate_item_table": "auditor.loading.validation",
}
"""Public name -> the module that defines it, imported on first use: the plugin manager
imports this package with the built-in loader (``diff``, ``plugins`` and a served-lists
audit included), and the log readers bring numpy and pyarrow."""


def load_model(path: Path, options: LoadOptions, pm: pluggy.PluginManager | None = None) -> ModelBundle:
    """Load a model or embedding table through the plugin hook, then check it.

    Raises InputError for a missing file, ModelLoadError when no loader knows the file,
    and the table/id errors of :func:`validate_item_table` and ``--item-ids``.
    """
    from auditor.io import require_regular_file
    from auditor.loading.formats import supported
    from auditor.loading.plugin_formats import model_formats, read_plugin_format
    from auditor.plugins import call_hook, get_plugin_manager

    path = require_regular_file(path, folder_ok=True)
    if pm is None:
        pm = get_plugin_manager()
    bundle = read_plugin_format(pm, path, options)  # a plugin format's files: its own reader
    from_hook = bundle is None
    if bundle is None:
        bundle = call_hook(pm, "popaudit_load_model", path=path, options=options)
    if bundle is None:
        raise ModelLoadError(
            f"cannot read {path}: not a model file popaudit knows. Supported: " + "; ".join(supported(model_formats(pm)))
        )
    if not isinstance(bundle, ModelBundle):
        raise PluginError(
            f"a popaudit_load_model plugin returned {type(bundle).__name__} for {path}, not a ModelBundle"
        )
    if not bundle.loader:  # not the built-in loader's
        bundle.loader = _plugin_loader(pm, bundle, from_hook)
    if bundle.replaced_globals is None and not bundle.globals_unrecorded:
        bundle.globals_unrecorded = (f"the model ({bundle.format!r}) was read by {bundle.loader}, which does not "
                                     "record the globals a pickle in the file named (ModelBundle.replaced_globals None)")
    try:
        return finish_bundle(bundle, options)
    except AuditError as exc:  # a table or count a plugin's loader returned: say which plugins load models
        raise type(exc)(f"{exc}{_loaders_named(pm) if from_hook else ''}") from exc


def _plugin_loader(pm: pluggy.PluginManager, bundle: ModelBundle, from_hook: bool) -> str:
    """Which plugin read the file, for messages: the third-party ``popaudit_load_model``
    implementation (all of them when several are installed: the first answer wins, unseen),
    or a plugin format's reader."""
    from auditor.plugins import BUILTIN_PREFIX

    if not from_hook:
        return f"the reader of plugin format {bundle.format!r}"
    names = [impl.plugin_name for impl in pm.hook.popaudit_load_model.get_hookimpls()
             if not impl.plugin_name.startswith(BUILTIN_PREFIX)]
    who = (f"plugin {names[0]!r}" if len(names) == 1 else "one of the plugins " + ", ".join(map(repr, names))
           if names else "a plugin")
    return f"{who} (popaudit_load_model)"


def _loaders_named(pm: pluggy.PluginManager) -> str:
    """The third-party plugins implementing ``popaudit_load_model`` (one of which read the
    model when any is there), as a clause for an error about what the loader returned."""
    from auditor.plugins import BUILTIN_PREFIX

    names = [impl.plugin_name for impl in pm.hook.popaudit_load_model.get_hookimpls()
             if not impl.plugin_name.startswith(BUILTIN_PREFIX)]
    if not names:
        return ""
    which = f"plugin {names[0]!r} implements" if len(names) == 1 else (
        "plugins " + ", ".join(repr(n) for n in names) + " implement")
    return f" (read through the popaudit_load_model hook, which {which} besides the built-in loader)"


def finish_bundle(bundle: ModelBundle, options: LoadOptions) -> ModelBundle:
    """Make the tables float32/contiguous, apply ``options.item_ids``, validate, and find
    an item bias in the state dict (:func:`~auditor.loading.item_bias.read_state_dict_bias`,
    one policy for every loader)."""
    import numpy as np

    from auditor.loading.ids import read_id_file
    from auditor.loading.item_bias import read_state_dict_bias
    from auditor.loading.stored_ids import given_over_stored
    from auditor.loading.validation import (
        nonfinite_users_note, validate_frequencies, validate_item_table, validate_user_table,
    )

    source = str(bundle.source)
    bundle.item_dtype = bundle.item_dtype or _stored_dtype(bundle)
    bundle.item_table = _as_float32(bundle.item_table, "item table", source)
    bundle.warnings.extend(validate_item_table(bundle.item_table, source))
    validate_frequencies(bundle.item_frequencies, bundle.n_items, source, bundle.format)
    if bundle.user_table is not None:
        bundle.user_table = _as_float32(bundle.user_table, "user table", source)
        nonfinite = validate_user_table(bundle.user_table, source, bundle.dim)
        if nonfinite.size:
            bundle.nonfinite_user_rows = nonfinite
            bundle.warnings.append(nonfinite_users_note(nonfinite, source))
    if options.item_ids is not None:
        ids, padded = _recbole_tokens(bundle, read_id_file(Path(options.item_ids)), bundle.n_items)
        _check_ids(ids, bundle.n_items, f"{setting('item_ids')} file {options.item_ids}", source, "item")
        if bundle.item_ids is not None and (note := given_over_stored(bundle.item_ids, ids, "item", options.item_ids, source)):
            bundle.warnings.append(note)
        bundle.item_ids = ids
        bundle.item_ids_source = f"{setting('item_ids')} {options.item_ids}{padded}"
    elif bundle.item_ids is not None:
        _check_ids(np.asarray(bundle.item_ids), bundle.n_items, f"the item ids stored in {source}", source, "item")
        bundle.item_ids_source = bundle.item_ids_source or f"the item ids stored in {source}"
    if options.user_ids is not None:
        if bundle.user_table is None:
            raise IdMappingError(
                f"{setting('user_ids')} {options.user_ids} given, but {source} has no user table"
            )
        n_users = bundle.user_table.shape[0]
        ids, padded = _recbole_tokens(bundle, read_id_file(Path(options.user_ids), "user ids"), n_users)
        _check_ids(ids, n_users, f"{setting('user_ids')} file {options.user_ids}", source, "user")
        if bundle.user_ids is not None and (note := given_over_stored(bundle.user_ids, ids, "user", options.user_ids, source)):
            bundle.warnings.append(note)
        bundle.user_ids = ids
        bundle.user_ids_source = f"{setting('user_ids')} {options.user_ids}{padded}"
        bundle.train_pairs, bundle.holdout_pairs = (_rows_renamed(p, ids) for p in (bundle.train_pairs, bundle.holdout_pairs))
    elif bundle.user_ids is not None:
        bundle.user_ids_source = bundle.user_ids_source or f"the user ids stored in {source}"
    read_state_dict_bias(bundle)
    return bundle


def _rows_renamed(pairs: InteractionPairs | None, ids: np.ndarray) -> InteractionPairs | None:
    """Pairs a checkpoint recorded (``source`` None) index user-table rows, so their users
    take the ids ``--user-ids`` gives those rows (the row numbers, or the stored ids, they
    were read with would name other rows' users); a log's pairs carry their own raw ids."""
    return pairs if pairs is None or pairs.source is not None else replace(pairs, user_ids=ids)


def _recbole_tokens(bundle: ModelBundle, ids: np.ndarray, n_rows: int) -> tuple[np.ndarray, str]:
    """``ids`` without RecBole's ``[PAD]`` first entry where the file is a RecBole
    checkpoint's ``field2id_token`` (one longer than the table, whose padding row is
    dropped), and the words the mapping then adds; else ``ids`` unchanged."""
    if bundle.format != "recbole":
        return ids, ""
    from auditor.loading.recbole import PAD, without_pad_entry

    kept = without_pad_entry(ids, n_rows)
    return (ids, "") if kept is None else (kept, f" (its first entry, RecBole's {PAD} for the padding row, left out)")


def _stored_dtype(bundle: ModelBundle) -> str:
    """The dtype the file stores the item table in, for the loaders that did not say: the
    tensor of the state dict it was read from (a torch or safetensors bf16/fp16 table is
    read as float32 before this), else the table as the loader handed it over."""
    import numpy as np

    stored = bundle.state_dict.get(bundle.item_key) if bundle.item_key is not None else None
    if stored is not None and hasattr(stored, "dtype") and not isinstance(stored, np.ndarray):
        return str(stored.dtype).removeprefix("torch.")
    return np.asarray(bundle.item_table).dtype.name


def _as_float32(table: object, what: str, source: str) -> np.ndarray:
    import numpy as np

    arr = np.asarray(table)
    if arr.dtype.kind != "f":  # integers would audit truncated norms silently: the readers convert what they read
        kind = "integer" if arr.dtype.kind in "iu" else "non-numeric"
        raise EmbeddingTableError(f"{what} in {source} holds {kind} values ({arr.dtype}); a model's tables must be "
                                  "floating point (float32: the item encoder's outputs for a custom tower)")
    if arr.dtype != np.float32 or not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr, dtype=np.float32)
    return arr


def _check_ids(ids: np.ndarray, n_rows: int, what: str, source: str, role: str) -> None:
    from auditor.loading.ids import check_unique_ids

    if len(ids) != n_rows:
        raise IdMappingError(
            f"{what} has {len(ids)} ids but the {role} table in {source} has {n_rows} rows; "
            "it needs exactly one id per row, in row order"
        )
    check_unique_ids(ids, what, role)


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

__getattr__, __dir__ = imported_on_first_use(__name__, _LAZY, globals())
