"""A :class:`RawModel` read from a PyTorch or safetensors file into a :class:`ModelBundle`:
its item and user tables chosen among the tensors (popaudit checkpoints: the encoder
outputs they record, with their ids, frequencies and pairs checked against the tables)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from auditor.config import LoadOptions
from auditor.errors import ModelLoadError
from auditor.loading.checkpoints import RawModel
from auditor.loading.discovery import choose_tables, table_to_numpy, tensor_infos
from auditor.loading.ids import ids_to_numpy
from auditor.loading.recbole import finish_recbole
from auditor.loading.stored_ids import take_stored_ids
from auditor.loading.padding_rows import drop_padding_rows, recorded_padding
from auditor.model import InteractionPairs, ModelBundle


def bundle_from_raw(raw: RawModel, path: Path, options: LoadOptions) -> ModelBundle:
    """Choose the tables of a :class:`RawModel` and fill a :class:`ModelBundle`."""
    warnings = list(raw.warnings)
    if raw.format == "popaudit":
        return _popaudit_bundle(raw, path, options, warnings)
    infos = tensor_infos(raw.tensors)
    choice = choose_tables(infos, path, options.item_key, options.user_key, raw.unread)
    warnings.extend(choice.warnings)
    item = table_to_numpy(raw.tensors[choice.item.key], choice.item, "item table", warnings)
    user = (
        table_to_numpy(raw.tensors[choice.user.key], choice.user, "user table", warnings)
        if choice.user is not None
        else None
    )
    config = raw.config
    if raw.script is not None:  # TorchScript: how its saved code scores, read as text
        from auditor.loading.script_scoring import script_scoring

        user_key = choice.user.key if choice.user else None
        config = {**(config or {}), **script_scoring(*raw.script, choice.item.key, user_key)} or None
    bundle = ModelBundle(
        source=path,
        format=raw.format,
        item_table=item,
        item_key=choice.item.key,
        user_table=user,
        user_key=choice.user.key if choice.user else None,
        state_dict=raw.tensors,
        optimizer_state=raw.optimizer_state,
        config=config,
        warnings=warnings,
        module=raw.module,
        replaced_globals=raw.replaced_globals,
    )
    if raw.format == "recbole":  # padding row 0 dropped; raw ids by RecBole's rule once the log is known
        finish_recbole(bundle, options)
    else:  # stored ids map the rows (a textbook MF's item bias: the load stage's one policy)
        what = "the TorchScript archive" if raw.format == "torchscript" else "the pickled module"
        padded = recorded_padding(raw.tensors, raw.padding_rows, bundle.item_key, bundle.user_key, what)
        take_stored_ids(bundle, {**raw.tensors, **raw.stored_ids}, options, {r: p[0] for r, p in padded.items()})
        drop_padding_rows(bundle, padded, options)  # padding_idx rows are no items (Keras mask_zero's policy)
    return bundle


def _popaudit_bundle(raw: RawModel, path: Path, options: LoadOptions, warnings: list[str]) -> ModelBundle:
    """popaudit checkpoints carry encoder outputs for every row: those are the tables."""
    ex = raw.extras
    pool: dict[str, torch.Tensor] = dict(raw.tensors)
    pool["item_embeddings"] = ex["item_embeddings"]
    if "user_embeddings" in ex:
        pool["user_embeddings"] = ex["user_embeddings"]
    infos = {i.key: i for i in tensor_infos(pool)}
    if options.item_key or options.user_key:
        choice = choose_tables(list(infos.values()), path, options.item_key, options.user_key)
        item_info, user_info = choice.item, choice.user
        warnings.extend(choice.warnings)
    else:
        item_info, user_info = infos["item_embeddings"], infos.get("user_embeddings")
    item = table_to_numpy(pool[item_info.key], item_info, "item table", warnings)
    user = table_to_numpy(pool[user_info.key], user_info, "user table", warnings) if user_info else None
    item_ids = _raw_ids(ex.get("item_ids"), path, "item_ids")
    user_ids = _raw_ids(ex.get("user_ids"), path, "user_ids")
    freq = ex.get("item_frequencies")
    frequencies = None
    if freq is not None:
        frequencies = np.asarray(freq.detach().cpu().numpy() if isinstance(freq, torch.Tensor) else freq)
        frequencies = frequencies.astype(np.int64, copy=False)
        if frequencies.shape != (item.shape[0],):
            raise ModelLoadError(
                f"popaudit checkpoint {path}: item_frequencies has shape {list(frequencies.shape)} but the "
                f"item table has {item.shape[0]} rows"
            )
    n_rows = len(user_ids) if user_ids is not None else (user.shape[0] if user is not None else None)
    train_pairs = _train_pairs(ex.get("train_pairs"), n_rows, user_ids, item.shape[0], path)
    holdout_pairs = _train_pairs(ex.get("holdout_pairs"), n_rows, user_ids, item.shape[0], path, "holdout_pairs")
    if user is not None and user_ids is not None and len(user_ids) != user.shape[0]:
        raise ModelLoadError(
            f"popaudit checkpoint {path}: {len(user_ids)} user_ids but the user table has {user.shape[0]} rows"
        )
    return ModelBundle(
        source=path,
        format="popaudit",
        item_table=item,
        item_key=item_info.key,
        user_table=user,
        user_key=user_info.key if user_info else None,
        item_ids=item_ids,
        user_ids=user_ids,
        item_frequencies=frequencies,
        train_pairs=train_pairs,
        holdout_pairs=holdout_pairs,
        state_dict=raw.tensors,
        optimizer_state=raw.optimizer_state,
        config=raw.config,
        warnings=warnings,
        module=raw.module,
        replaced_globals=raw.replaced_globals,
    )


def _train_pairs(
    value: object, n_user_rows: int | None, user_ids: np.ndarray | None, n_items: int, path: Path,
    key: str = "train_pairs",
) -> InteractionPairs | None:
    """The recorded (user_row, item_row) training (or held-out: ``key``) pairs, checked
    against the tables (``n_user_rows`` None: no user table, history queries). Without
    stored ids the users are named by their row number until ``--user-ids`` names the rows
    (:func:`auditor.loading.finish_bundle`)."""
    if value is None:
        return None
    pairs = value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
    if pairs.ndim != 2 or pairs.shape[1] != 2 or pairs.dtype.kind not in "iu":
        raise ModelLoadError(
            f"popaudit checkpoint {path}: {key} must be an integer (n, 2) tensor, got "
            f"{pairs.dtype} {list(pairs.shape)}"
        )
    pairs = pairs.astype(np.int64, copy=False)
    users, items = np.ascontiguousarray(pairs[:, 0]), np.ascontiguousarray(pairs[:, 1])
    n_users = n_user_rows if n_user_rows is not None else (int(users.max()) + 1 if users.size else 0)
    bad_items = np.flatnonzero((items < 0) | (items >= n_items))
    bad_users = np.flatnonzero((users < 0) | (users >= n_users))
    if bad_items.size or bad_users.size:
        row = int(bad_items[0]) if bad_items.size else int(bad_users[0])
        raise ModelLoadError(
            f"popaudit checkpoint {path}: {key} row {row} ({int(users[row])}, {int(items[row])}) "
            f"is outside the tables ({n_users} users, {n_items} items)"
        )
    ids = user_ids if user_ids is not None else np.arange(n_users, dtype=np.int64)
    return InteractionPairs(user_index=users, item_rows=items, user_ids=ids)


def _raw_ids(value: object, path: Path, what: str) -> np.ndarray | None:
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy().astype(np.int64)
    try:
        arr = pa.array(list(value))  # type: ignore[call-overload]
    except (pa.ArrowException, TypeError) as exc:
        raise ModelLoadError(f"popaudit checkpoint {path}: {what} mixes id types ({exc})") from exc
    return ids_to_numpy(arr, f"{what} of {path}")


__all__ = ["bundle_from_raw"]
