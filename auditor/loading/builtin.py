"""The built-in model loader, registered like any plugin (``popaudit_load_model``, tried last)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from auditor.config import LoadOptions
from auditor.errors import ModelLoadError
from auditor.hookspecs import hookimpl
from auditor.loading.checkpoints import RawModel, read_safetensors, read_torch
from auditor.loading.discovery import choose_tables, table_to_numpy, tensor_infos
from auditor.loading.ids import ids_to_numpy
from auditor.loading.keras_h5 import read_keras
from auditor.loading.mf_models import names_library, read_mf_pickle, read_npz
from auditor.loading.npy import read_npy_table
from auditor.loading.onnx_model import read_onnx
from auditor.loading.parquet_table import read_parquet_table
from auditor.loading.recbole import as_recbole, finish_recbole
from auditor.model import InteractionPairs, ModelBundle

SUPPORTED_FORMATS = (
    ".pt/.pth/.ckpt/.pkl (state dict, checkpoint, Lightning, popaudit, pickled module or plain pickle, "
    "read without running code from the file)",
    "TorchScript archive",
    ".safetensors",
    ".npy item table",
    "Parquet item table (.parquet: id column + list-of-float column)",
    ".npz (implicit model.save, or any archive of arrays)",
    "pickled implicit, LightFM or cornac models (.pkl)",
    ".keras archive or Keras .weights.h5/.h5 (needs popaudit[keras])",
    ".onnx (embedding initializers; needs popaudit[onnx])",
)
_TORCH_SUFFIXES = (".pt", ".pth", ".ckpt", ".bin", ".pkl", ".pickle", ".torch", ".tar")


def detect_kind(path: Path) -> str | None:
    """``torch``, ``safetensors``, ``npy`` or ``parquet`` by extension, else by magic bytes."""
    suffix = path.suffix.lower()
    if suffix == ".npy":
        return "npy"
    if suffix in (".npz", ".keras", ".onnx"):
        return suffix[1:]
    if suffix in (".h5", ".hdf5"):
        return "h5"
    if suffix in (".parquet", ".pq"):
        return "parquet"
    if suffix == ".safetensors":
        return "safetensors"
    if suffix in _TORCH_SUFFIXES:
        return "torch"
    try:
        with open(path, "rb") as fh:
            head = fh.read(16)
    except OSError as exc:
        raise ModelLoadError(f"cannot read {path}: {exc.strerror}") from exc
    if head.startswith(b"\x93NUMPY"):
        return "npy"
    if head.startswith(b"PAR1"):
        return "parquet"
    if head.startswith(b"\x89HDF\r\n\x1a\n"):
        return "h5"
    if head.startswith(b"PK\x03\x04") or head.startswith(b"\x80"):  # zip (torch.save) or pickle
        return "torch"
    if len(head) > 8 and head[8:9] == b"{" and int.from_bytes(head[:8], "little") < path.stat().st_size:
        return "safetensors"
    return None


def load_builtin(path: Path, options: LoadOptions) -> ModelBundle | None:
    """Read ``path`` with the built-in readers; None when the file is of no known kind.

    The bundle says which globals a pickle in it named (``replaced_globals``): {} for the
    formats that hold no pickle, as no code can hide in them."""
    bundle = _load_builtin(path, options)
    if bundle is not None and bundle.replaced_globals is None and bundle.format in _NO_PICKLE:
        bundle.replaced_globals = {}
    return bundle


_NO_PICKLE = frozenset({"npy", "parquet", "npz", "keras", "onnx", "safetensors"})


def _load_builtin(path: Path, options: LoadOptions) -> ModelBundle | None:
    if not path.is_file():
        return None
    if path.stat().st_size == 0:  # no format has an empty file; say so rather than EOFError
        raise ModelLoadError(f"cannot read {path}: the file is empty (0 bytes)")
    kind = detect_kind(path)
    if kind is None:
        return None
    if kind == "npy":
        table, warnings = read_npy_table(path, max_memory=options.max_memory)
        return ModelBundle(source=path, format="npy", item_table=table, warnings=warnings)
    if kind == "parquet":
        notes: list[str] = []
        table, ids, column = read_parquet_table(
            path, options.item_key, max_memory=options.max_memory, warnings=notes
        )
        return ModelBundle(
            source=path, format="parquet", item_table=table, item_key=column, item_ids=ids, warnings=notes
        )
    if kind == "npz":
        return read_npz(path, options)
    if kind in ("keras", "h5"):
        return read_keras(path, options)
    if kind == "onnx":
        return read_onnx(path, options)
    if kind == "torch" and names_library(path):  # implicit, LightFM, cornac: None if no model is found
        found = read_mf_pickle(path, options)
        if found is not None:
            return found
    raw = read_safetensors(path) if kind == "safetensors" else as_recbole(read_torch(path, options.trust_pickle))
    return bundle_from_raw(raw, path, options)


def bundle_from_raw(raw: RawModel, path: Path, options: LoadOptions) -> ModelBundle:
    """Choose the tables of a :class:`RawModel` and fill a :class:`ModelBundle`."""
    warnings = list(raw.warnings)
    if raw.format == "popaudit":
        return _popaudit_bundle(raw, path, options, warnings)
    infos = tensor_infos(raw.tensors)
    choice = choose_tables(infos, path, options.item_key, options.user_key)
    warnings.extend(choice.warnings)
    item = table_to_numpy(raw.tensors[choice.item.key], choice.item, "item table", warnings)
    user = (
        table_to_numpy(raw.tensors[choice.user.key], choice.user, "user table", warnings)
        if choice.user is not None
        else None
    )
    bundle = ModelBundle(
        source=path,
        format=raw.format,
        item_table=item,
        item_key=choice.item.key,
        user_table=user,
        user_key=choice.user.key if choice.user else None,
        state_dict=raw.tensors,
        optimizer_state=raw.optimizer_state,
        config=raw.config,
        warnings=warnings,
        module=raw.module,
        replaced_globals=raw.replaced_globals,
    )
    if raw.format == "recbole":  # padding row 0 dropped; raw ids by RecBole's rule once the log is known
        finish_recbole(bundle, options)
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
    train_pairs = _train_pairs(ex.get("train_pairs"), user_ids, item.shape[0], path)
    holdout_pairs = _train_pairs(ex.get("holdout_pairs"), user_ids, item.shape[0], path, "holdout_pairs")
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
    value: object, user_ids: np.ndarray | None, n_items: int, path: Path, key: str = "train_pairs"
) -> InteractionPairs | None:
    """The recorded (user_row, item_row) training (or held-out: ``key``) pairs, checked
    against the tables."""
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
    n_users = len(user_ids) if user_ids is not None else (int(users.max()) + 1 if users.size else 0)
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


@hookimpl(trylast=True)
def popaudit_load_model(path: Path, options: LoadOptions) -> ModelBundle | None:
    """Built-in loader for PyTorch, TorchScript, safetensors, .npy and Parquet files."""
    return load_builtin(Path(path), options)


__all__ = ["SUPPORTED_FORMATS", "detect_kind", "load_builtin", "popaudit_load_model"]
