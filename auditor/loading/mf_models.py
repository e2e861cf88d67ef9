"""Matrix-factorisation models of implicit, LightFM and cornac, read without importing them.

These libraries save models as pickles of plain numpy arrays (``pickle.dump(model)``,
cornac's ``Recommender.save``) or, for implicit, as ``.npz`` (``model.save``). Pickles go
through the restricted unpickler: the model class becomes an inert placeholder whose BUILD
state holds the arrays; ``.npz`` members are read with ``allow_pickle=False``. Item biases,
where the model has them, are carried separately (a second channel for popularity).
"""

from __future__ import annotations

import io
import pickletools
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from auditor.config import LoadOptions
from auditor.errors import ModelLoadError, setting
from auditor.loading.discovery import choose_tables, tensor_infos
from auditor.loading.ids import ids_to_numpy
from auditor.loading.item_bias import BIAS_NOTE, DOT_SCORES, state_dict_bias
from auditor.loading.logs import maybe_int
from auditor.loading.pickle_scan import reason, shown
from auditor.loading.safe_pickle import Placeholder, as_mapping, placeholder_attrs, qualname_of
from auditor.loading.stored_ids import ID_MEMBERS, take_stored_ids
from auditor.loading.torch_archive import read_torch_file
from auditor.memory import InflationBudget
from auditor.model import ModelBundle

LIBRARIES = ("implicit", "lightfm", "cornac")
SNIFF_BYTES = 1 << 16
"""How much of a pickle is scanned for the globals that name a library's class."""
_PICKLE_SUFFIXES = (".pkl", ".pickle", ".bin", ".pt", ".pth")

# (item table, user table, item bias, user bias) attribute names per library, first found wins.
_ITEM = {"implicit": ("item_factors",), "lightfm": ("item_embeddings",),
         "cornac": ("i_factors", "V", "gamma_item", "item_factors")}  # fmt: skip
_USER = {"implicit": ("user_factors",), "lightfm": ("user_embeddings",),
         "cornac": ("u_factors", "U", "gamma_user", "user_factors")}  # fmt: skip
_ITEM_BIAS = {"implicit": (), "lightfm": ("item_biases",), "cornac": ("i_biases", "Bi", "beta_item")}
_LOSS = {"BayesianPersonalizedRanking": "bpr", "LogisticMatrixFactorization": "logistic",
         "AlternatingLeastSquares": "als", "BPR": "bpr", "WMF": "wmf", "MF": "mse", "PMF": "mse"}  # fmt: skip


@dataclass
class _Found:
    """The arrays of one model, before they become a bundle."""

    library: str
    model_class: str
    item: np.ndarray
    item_key: str
    user: np.ndarray | None = None
    user_key: str | None = None
    item_bias: np.ndarray | None = None
    bias_key: str | None = None
    item_ids: np.ndarray | None = None
    user_ids: np.ndarray | None = None
    config: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def names_library(path: Path) -> bool:
    """True when a plain (non-zip) pickle names a class of implicit, LightFM or cornac near its start.

    Only the first :data:`SNIFF_BYTES` are scanned, opcode by opcode (nothing is built):
    these libraries' pickles name the model class first.
    """
    if path.suffix.lower() not in _PICKLE_SUFFIXES:
        return False
    try:
        with open(path, "rb") as fh:
            head = fh.read(SNIFF_BYTES)
    except OSError:
        return False
    if not head.startswith(b"\x80") and not head[:1] in (b"c", b"("):
        return False
    modules: list[str] = []
    recent: list[str | None] = [None, None]  # the last two values pushed, when they are text
    memo: dict[int, str] = {}
    memoized = 0
    try:
        for op, arg, _ in pickletools.genops(io.BytesIO(head)):
            name = op.name
            if name == "GLOBAL" and isinstance(arg, str):
                modules.append(arg.split(" ", 1)[0])
            elif name == "STACK_GLOBAL" and recent[-2] is not None:
                modules.append(recent[-2])
            elif name == "STOP":
                break
            if name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE", "BINUNICODE8") and isinstance(arg, str):
                recent.append(arg)
            elif name in ("BINGET", "LONG_BINGET", "GET") and isinstance(arg, int):
                recent.append(memo.get(arg))
            elif name == "MEMOIZE":  # memoizes whatever is on top, text or not
                if recent[-1] is not None:
                    memo[memoized] = recent[-1]
                memoized += 1
            elif name in ("BINPUT", "LONG_BINPUT", "PUT") and isinstance(arg, int) and recent[-1] is not None:
                memo[arg] = recent[-1]
            elif name not in ("PROTO", "FRAME", "MEMOIZE", "BINPUT", "LONG_BINPUT", "PUT"):
                recent.append(None)
            del recent[:-2]
    except (ValueError, EOFError, UnicodeDecodeError, OverflowError):  # the head ends mid-opcode
        pass
    return any(m.split(".", 1)[0] in LIBRARIES for m in modules)


def read_mf_pickle(path: Path, options: LoadOptions) -> ModelBundle | None:
    """A pickled implicit, LightFM or cornac model; None when the pickle holds none."""
    found = read_torch_file(path, options.max_memory)
    model = _model_object(found.root)
    if model is None:
        return None
    bundle = _bundle(_from_placeholder(model, path), path, options, "pickle")
    bundle.replaced_globals = dict(found.placeholders)  # the model's own class among them (inert)
    return bundle


def _model_object(root: Any) -> Placeholder | None:
    """The model placeholder: the pickle's root, or a value of a dict at the root."""
    candidates = [root] + (list(as_mapping(root).values()) if not isinstance(root, Placeholder) else [])
    for obj in candidates:
        if isinstance(obj, Placeholder) and _library(obj) is not None and placeholder_attrs(obj) is not None:
            return obj
    return None


def _library(obj: Placeholder) -> str | None:
    top = type(obj).pickle_module.split(".", 1)[0]
    return top if top in LIBRARIES else None


def _from_placeholder(model: Placeholder, path: Path) -> _Found:
    library = _library(model)
    attrs = placeholder_attrs(model)
    assert library is not None and attrs is not None
    name = qualname_of(model)
    cls = type(model).pickle_name
    arrays = {k: v for k, v in attrs.items() if isinstance(v, np.ndarray)}
    item_key = next((k for k in _ITEM[library] if _is_table(arrays.get(k))), None)
    if item_key is None:
        if library == "implicit" and ".gpu." in name:
            raise ModelLoadError(
                f"{path} holds an implicit GPU model ({shown(name)}), whose factors live on the GPU and are "
                "not in the pickle; save model.to_cpu() instead"
            )
        tables = ", ".join(f"{k} {list(v.shape)}" for k, v in arrays.items() if v.ndim == 2) or "none"
        if any(qualname_of(v).startswith("joblib.") for v in attrs.values() if isinstance(v, Placeholder)):
            tables += "; its arrays were written by joblib, which popaudit does not read: re-save with pickle.dump"
        raise ModelLoadError(
            f"{path} holds a {shown(name)} model but no item factors "
            f"({' or '.join(_ITEM[library])}); 2-D arrays in it: {tables}"
        )
    user_key = next((k for k in _USER[library] if _is_table(arrays.get(k))), None)
    found = _Found(library, name, _floats(arrays[item_key], item_key, path), item_key)
    if user_key is not None:
        found.user, found.user_key = _floats(arrays[user_key], user_key, path), user_key
    bias_key = next((k for k in _ITEM_BIAS[library] if k in arrays), None)
    if bias_key is not None and np.any(arrays[bias_key] != 0):  # cornac keeps zeros when use_bias=False
        found.item_bias, found.bias_key = _bias(arrays[bias_key], found.item.shape[0], bias_key, path), bias_key
    found.config = _scalars(attrs)
    if library == "implicit":
        _split_implicit_bias(found, attrs.get("factors"))
    if library == "cornac":
        found.item_ids = _id_map(attrs.get("iid_map"), found.item.shape[0], "iid_map", path)
        if found.user is not None:
            found.user_ids = _id_map(attrs.get("uid_map"), found.user.shape[0], "uid_map", path)
    if library == "lightfm":
        _lightfm(found, attrs)
    if cls in _LOSS:
        found.config.setdefault("loss", _LOSS[cls])
    found.config.update(library=library, model_class=name)
    return found


def _lightfm(found: _Found, attrs: Mapping[str, Any]) -> None:
    loss, schedule = attrs.get("loss"), attrs.get("learning_schedule")
    if isinstance(loss, str):  # every LightFM loss scores user and item by a dot product plus biases
        found.config["loss"] = f"{loss} on dot-product scores"
    if isinstance(schedule, str):
        found.config["optimizer"] = schedule
    found.notes.append(
        "LightFM keeps one embedding row per item feature: the rows are items only when the model "
        "was fit without item features (the identity), as LightFM does by default"
    )


def _is_table(value: Any) -> bool:
    return isinstance(value, np.ndarray) and value.ndim == 2 and value.dtype.kind in "fiu" and value.shape[0] > 0


def _floats(arr: np.ndarray, key: str, path: Path) -> np.ndarray:
    if arr.dtype.kind not in "fiu":
        raise ModelLoadError(f"{path}: `{key}` holds {arr.dtype} values, not numbers")
    return np.require(arr, np.float32, ["C", "W"])  # writable: torch.from_numpy warns on read-only arrays


def _bias(arr: np.ndarray, n_items: int, key: str, path: Path) -> np.ndarray:
    if arr.dtype.kind not in "fiu" or arr.reshape(-1).shape[0] != n_items or arr.ndim > 2:
        raise ModelLoadError(
            f"{path}: the item biases `{key}` are {arr.dtype} {list(arr.shape)}, but the item table "
            f"has {n_items} rows (one bias per item expected)"
        )
    return np.ascontiguousarray(arr.reshape(-1), dtype=np.float32)


def _split_implicit_bias(found: _Found, factors: Any) -> None:
    """implicit's BPR and LMF append bias columns to the factors: split them off.

    Past ``factors`` columns, a user column of ones multiplies the item bias (BPR: the last
    column; LMF: the second to last); an item column of ones carries the user bias (LMF).
    """
    if found.user is None or type(factors) is not int or not 0 < factors < found.item.shape[1]:
        return
    if found.user.shape[1] != found.item.shape[1]:
        return
    for col in range(factors, found.item.shape[1]):
        if np.all(found.user[:, col] == 1.0):
            found.item_bias = np.ascontiguousarray(found.item[:, col])
            found.bias_key = f"{found.item_key}[:, {col}]"
    found.item = np.ascontiguousarray(found.item[:, :factors])
    found.user = np.ascontiguousarray(found.user[:, :factors])
    found.notes.append(
        f"implicit appends bias columns to its factors: the audited tables are the first {factors} "
        f"columns (`factors`) of `{found.item_key}`"
    )


def _id_map(value: Any, n_rows: int, key: str, path: Path) -> np.ndarray | None:
    """Raw ids in row order from cornac's ``{raw id: row}`` map; None when it is absent."""
    mapping = as_mapping(value) if value is not None else {}
    if not mapping:
        return None
    rows = list(mapping.values())
    if len(mapping) != n_rows or sorted(r for r in rows if type(r) is int) != list(range(n_rows)):
        raise ModelLoadError(
            f"{path}: cornac's {key} maps {len(mapping)} ids, not each of the {n_rows} rows once"
        )
    order = sorted(range(n_rows), key=rows.__getitem__)
    keys = list(mapping.keys())
    try:
        column = maybe_int(pa.array([keys[i] for i in order]))
    except (pa.ArrowException, TypeError) as exc:
        raise ModelLoadError(f"{path}: cornac's {key} mixes id types ({reason(exc)})") from exc
    return ids_to_numpy(column, f"cornac's {key} in {path}")


def _scalars(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """The model's plain settings (numbers, text, flags), as its config."""
    out: dict[str, Any] = {}
    for key, value in attrs.items():
        finite = type(value) is not float or np.isfinite(value)  # -inf "best value" before any validation
        if type(value) in (int, float, bool, str) and finite and not key.startswith("_") and len(out) < 64:
            out[key] = value
    return out


# ---------------------------------------------------------------------------- .npz


def read_npz(path: Path, options: LoadOptions) -> ModelBundle:
    """An ``.npz`` archive: implicit's ``model.save`` (item_factors, user_factors, settings)
    or any archive of arrays, whose tables are found by name as in a state dict."""
    arrays = _npz_arrays(path, options.max_memory)
    if _is_implicit_save(arrays):
        settings = {k: v.item() for k, v in arrays.items() if v.ndim == 0 and v.dtype.kind in "biufU"}
        found = _Found("implicit", "implicit (model.save)", _floats(arrays["item_factors"], "item_factors", path),
                       "item_factors", config=settings)  # fmt: skip
        if _is_table(arrays.get("user_factors")):
            found.user, found.user_key = _floats(arrays["user_factors"], "user_factors", path), "user_factors"
        _split_implicit_bias(found, settings.get("factors"))
        if "learning_rate" in settings:  # BPR and LMF; ALS has none
            found.config["loss"] = "logistic" if "neg_prop" in settings else "bpr"
        else:
            found.config["loss"] = "als"
        found.config["library"] = "implicit"
        bundle = _bundle(found, path, options, "npz")
        take_stored_ids(bundle, arrays, options)  # ids added beside implicit's members map the rows
        return bundle
    tensors = {k: torch.from_numpy(v) for k, v in arrays.items() if v.dtype.kind in "fiu"}
    choice = choose_tables(tensor_infos(tensors), path, options.item_key, options.user_key)
    item = _floats(arrays[choice.item.key], choice.item.key, path)
    user = _floats(arrays[choice.user.key], choice.user.key, path) if choice.user else None
    user_key = choice.user.key if choice.user else None
    beside = {k: v for k, v in tensors.items() if k.rsplit(".", 1)[-1] not in ID_MEMBERS.values()}  # ids: no tower
    bias_key = state_dict_bias(beside, choice.item.key, user_key, item.shape[0], None if user is None else user.shape[0])
    bundle = ModelBundle(
        source=path, format="npz", item_table=item, item_key=choice.item.key, user_table=user,
        user_key=user_key, warnings=list(choice.warnings),
        state_dict={k: tensors[k] for k in (choice.item.key, user_key, bias_key) if k},
    )  # fmt: skip
    take_stored_ids(bundle, arrays, options)  # an item_ids/user_ids member maps the rows (the bias: the load stage's)
    return bundle


_IMPLICIT_TABLES = ("item_factors", "user_factors", *ID_MEMBERS.values())


def _is_implicit_save(arrays: Mapping[str, np.ndarray]) -> bool:
    """True for what implicit's ``model.save`` writes: an ``item_factors`` table, its
    ``factors`` setting and otherwise only scalar settings (ids added beside them are
    read). ``item_factors`` alone is a common table name, not implicit's mark: an archive
    with other arrays (an item bias, more tables) is read as any ``.npz``, so none is dropped."""
    factors = arrays.get("factors")
    return (
        _is_table(arrays.get("item_factors"))
        and factors is not None and factors.ndim == 0 and factors.dtype.kind in "iu"
        and all(v.ndim == 0 or k in _IMPLICIT_TABLES for k, v in arrays.items())
    )  # fmt: skip


def _npz_arrays(path: Path, max_memory: int | None = None) -> dict[str, np.ndarray]:
    """Every member of an ``.npz`` as an array; object arrays are refused, never unpickled;
    compressed members only when the size each declares is one the file can hold and all
    of them together fit the memory ceiling (:class:`~auditor.memory.InflationBudget`)."""
    budget = InflationBudget(f"cannot read {path}", max_memory, ModelLoadError)
    try:
        with zipfile.ZipFile(path) as zf:
            budget.plan([(f"member {shown(i.filename)}", i.file_size, i.compress_size)  # all, before any inflates
                         for i in zf.infolist() if i.compress_type != zipfile.ZIP_STORED])
            for info in zf.infolist():
                if info.compress_type != zipfile.ZIP_STORED:  # inflated in memory by np.load
                    budget.admit(f"member {shown(info.filename)}", info.file_size, info.compress_size)
                if not info.filename.endswith(".npy"):
                    continue
                with zf.open(info) as member:
                    version = np.lib.format.read_magic(member)
                    read_header = (
                        np.lib.format.read_array_header_1_0
                        if version == (1, 0)
                        else np.lib.format.read_array_header_2_0
                    )
                    shape, _, dtype = read_header(member, max_header_size=1 << 16)
                    if dtype.hasobject:
                        raise ModelLoadError(
                            f"cannot read {path}: member {shown(info.filename)} holds Python objects ({dtype}), "
                            "which are never unpickled"
                        )
                    declared = int(np.prod(shape, dtype=np.float64)) * dtype.itemsize
                    if declared > info.file_size:
                        raise ModelLoadError(
                            f"cannot read {path}: member {shown(info.filename)} declares shape {list(shape)} "
                            f"({declared:,} bytes) but holds {info.file_size:,} bytes (truncated or corrupt)"
                        )
        with np.load(path, allow_pickle=False) as npz:
            arrays = {name: np.asarray(npz[name]) for name in npz.files}
    except ModelLoadError:
        raise
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, KeyError, zipfile.LargeZipFile) as exc:
        raise ModelLoadError(f"cannot read {path} as .npz: {reason(exc)} (truncated or corrupt?)") from exc
    if not arrays:
        raise ModelLoadError(f"cannot read {path}: the .npz archive holds no arrays")
    return arrays


# ---------------------------------------------------------------------------- bundle


def _bundle(found: _Found, path: Path, options: LoadOptions, how: str) -> ModelBundle:
    notes = list(found.notes)
    if options.item_key and options.item_key != found.item_key:
        raise ModelLoadError(
            f"{path} is a {found.library} model whose item table is `{found.item_key}`; "
            f"{setting('item_key')} {options.item_key!r} names no other table popaudit reads from it"
        )
    if found.item_bias is not None:
        notes.append(BIAS_NOTE.format(path=path, n=found.item_bias.shape[0], key=found.bias_key, scores=DOT_SCORES))
    state: dict[str, torch.Tensor] = {found.item_key: torch.from_numpy(found.item)}
    if found.user is not None and found.user_key is not None:
        state[found.user_key] = torch.from_numpy(found.user)
    return ModelBundle(
        source=path,
        format=found.library,
        item_table=found.item,
        item_key=found.item_key,
        user_table=found.user,
        user_key=found.user_key,
        item_ids=found.item_ids,
        user_ids=found.user_ids,
        item_ids_source=f"cornac's iid_map in {path}" if found.item_ids is not None else None,
        state_dict=state,
        config={**found.config, "saved_as": how},
        item_biases=found.item_bias,
        item_bias_key=found.bias_key if found.item_bias is not None else None,
        warnings=notes,
    )


__all__ = ["BIAS_NOTE", "LIBRARIES", "names_library", "read_mf_pickle", "read_npz"]
