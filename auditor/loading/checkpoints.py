"""Reading model files into a flat state dict plus what the checkpoint recorded.

PyTorch files (zip, legacy, TorchScript and plain pickles) are read by the restricted reader
of :mod:`auditor.loading.torch_archive`, which rebuilds tensors and plain containers and
turns every other class into an inert placeholder: no code from the file runs, whatever it
holds. Only with ``--trust-pickle`` is the real object also loaded (``torch.load`` with
``weights_only=False`` or ``torch.jit.load``, which run code from the file) and attached as
``RawModel.module``. Safetensors files are read with the safetensors library.
"""

from __future__ import annotations

import argparse
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch

from auditor.errors import ModelLoadError, UntrustedPickleError, setting
from auditor.loading.pickle_rebuild import SafeArray
from auditor.loading.pickle_scan import CorruptFileError, reason, shown
from auditor.loading.padding_rows import pickled_padding
from auditor.loading.pickled_module import module_notes, recorded_config
from auditor.loading.script_branches import folded_forward, recorded_flags
from auditor.loading.safe_pickle import (
    Placeholder,
    as_mapping,
    is_module,
    module_state_dict,
    placeholder_attrs,
    qualname_of,
    to_plain,
)
from auditor.loading.stored_ids import ids_beside_weights
from auditor.loading.torch_archive import TorchFile, read_torch_file
from auditor.model import CHECKPOINT_MARKER, CHECKPOINT_VERSION

_V = TypeVar("_V")

MODEL_KEYS = ("state_dict", "model_state_dict", "model")
OPTIMIZER_KEYS = ("optimizer_state_dict", "optimizer", "optimizer_states")
CONFIG_KEYS = ("config", "hparams", "hyper_parameters")
LIGHTNING_KEYS = ("pytorch-lightning_version", "epoch", "global_step")
# Top-level checkpoint entries that are bookkeeping, never model tensors.
_METADATA_KEYS = frozenset(
    OPTIMIZER_KEYS
    + CONFIG_KEYS
    + LIGHTNING_KEYS
    + ("lr_schedulers", "callbacks", "loops", "scheduler", "lr_scheduler", "args", "hparams_name")
)



@dataclass
class RawModel:
    """What a model file holds, before tables are chosen."""

    tensors: dict[str, torch.Tensor]
    format: str
    optimizer_state: Mapping[str, Any] | None = None
    config: Mapping[str, Any] | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    """popaudit checkpoints: item_embeddings, user_embeddings, item_ids, user_ids, ..."""
    warnings: list[str] = field(default_factory=list)
    module: Any = None
    """With ``--trust-pickle`` only: the object ``torch.load``/``torch.jit.load`` returned."""
    replaced_globals: dict[str, int] | None = field(default_factory=dict)
    """Globals the file's pickle named that were replaced by placeholders -> count ({}: none,
    or no pickle at all; None: unknown, the file was fully unpickled)."""
    stored_ids: dict[str, Any] = field(default_factory=dict)
    """Top-level ``item_ids``/``user_ids`` entries outside ``tensors`` (beside a
    ``model_state_dict``, or text ids): the raw id of each row, mapped like a buffer's."""
    unread: dict[str, str] = field(default_factory=dict)
    """Tensors in a layout popaudit does not read (sparse, quantized, nested ...): key -> what
    it is, so that a missing table is named, not reported absent."""
    script: tuple[str, str] | None = None
    """TorchScript: the root's saved ``forward`` and the model's other code, as text."""
    padding_rows: dict[str, int] = field(default_factory=dict)
    """``<module>.weight`` -> the ``padding_idx`` its ``nn.Embedding`` records (TorchScript, a pickled module)."""

UNREAD_TENSORS = {
    "torch._utils._rebuild_sparse_tensor": "a sparse tensor",
    "torch._utils._rebuild_sparse_csr_tensor": "a sparse CSR tensor",
    "torch._utils._rebuild_qtensor": "a quantized tensor",
    "torch._utils._rebuild_nested_tensor": "a nested tensor",
    "torch._utils._rebuild_meta_tensor_no_storage": "a meta tensor (no data)",
    "torch._utils._rebuild_wrapper_subclass": "a tensor subclass (e.g. a DTensor)",
}
"""The torch globals that rebuild tensors of a layout or dtype popaudit reads no rows of."""


def read_safetensors(path: Path) -> RawModel:
    """Every tensor of a ``.safetensors`` file; string metadata becomes the config."""
    from safetensors import SafetensorError
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt", device="cpu") as fh:
            tensors = {k: fh.get_tensor(k) for k in fh.keys()}
            metadata = fh.metadata()
    except (SafetensorError, OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot read {path} as safetensors: {reason(exc)}") from exc
    return RawModel(tensors, "safetensors", config=dict(metadata) if metadata else None)


def read_torch(path: Path, trust_pickle: bool, max_memory: int | None = None) -> RawModel:
    """A ``.pt``/``.pth`` file: state dict, checkpoint, Lightning, popaudit, TorchScript or
    pickled module, read without running code from it.

    A pickled module's tensors are read from its recorded state; a pickle whose objects hold
    no tensor popaudit can reach raises UntrustedPickleError. With ``trust_pickle`` the real
    object is loaded as well when the file holds more than tensors and plain values
    (``RawModel.module``), and a file the restricted reader refuses, unless it is damaged
    or its compressed members exceed ``max_memory`` (:class:`CorruptFileError`), is loaded
    with ``torch.load(weights_only=False)`` instead.
    """
    try:
        found = read_torch_file(path, max_memory)
        raw = _raw_from(found, path)
    except ModelLoadError as exc:
        if not trust_pickle or isinstance(exc, CorruptFileError):
            raise  # a damaged file, or one that is no pickle, cannot be helped by unpickling it
        obj = _trusted_load(path, torchscript=False, fallback_of=exc)
        raw = interpret(obj, path)
        raw.module = obj
        raw.replaced_globals = None  # torch.load ran whatever the file named
        raw.warnings.append(f"{path} was fully unpickled ({setting('trust_pickle')}): {exc}")
        return raw
    raw.replaced_globals = dict(found.placeholders)
    if trust_pickle and (found.kind == "torchscript" or found.placeholders):
        try:
            raw.module = _trusted_load(path, torchscript=found.kind == "torchscript")
            raw.warnings.append(f"{path} was fully unpickled ({setting('trust_pickle')})")
        except ModelLoadError as exc:
            raw.warnings.append(f"{exc}; the tables were read without running the file")
    return raw


def _raw_from(found: TorchFile, path: Path) -> RawModel:
    if found.tensors is not None:  # TorchScript: named parameters and buffers
        if not found.tensors:
            raise ModelLoadError(f"cannot read {path}: the TorchScript archive holds no parameters or buffers")
        script = found.script and (folded_forward(found.script[0], recorded_flags(found.root)), found.script[1])
        return RawModel(found.tensors, "torchscript", warnings=list(found.warnings), script=script or None,
                        padding_rows=found.padding_rows)
    raw = interpret(found.root, path)
    if not raw.tensors and raw.format != "popaudit":
        if isinstance(found.root, Placeholder) or (found.placeholders and _holds_placeholder(found.root)):
            raise UntrustedPickleError(
                f"{path} holds a pickled {_root_name(found.root)} that popaudit cannot read without running "
                f"code from the file: it holds no tensors popaudit can reach. {setting('trust_pickle')} would unpickle it "
                "fully, which runs code from the file: pass it only if you trust where the file came from, "
                "or re-save the model as a state dict (torch.save(model.state_dict(), ...))."
            )
        raise ModelLoadError(f"cannot read {path}: it holds no tensors (a {type(found.root).__name__} of plain values)")
    return raw


def _root_name(root: Any) -> str:
    if isinstance(root, Placeholder):
        return shown(qualname_of(root))
    found = [shown(qualname_of(v)) for v in as_mapping(root).values() if isinstance(v, Placeholder)]
    return f"{type(root).__name__} of {', '.join(found[:3])}" if found else type(root).__name__


def _holds_placeholder(root: Any) -> bool:
    return any(isinstance(v, Placeholder) for v in as_mapping(root).values())


def _trusted_load(path: Path, torchscript: bool, fallback_of: ModelLoadError | None = None) -> Any:
    """The real object: runs code from the file. Only reached with --trust-pickle."""
    try:
        with warnings.catch_warnings():  # torch's own notices would reach stderr; popaudit speaks for it
            warnings.simplefilter("ignore")
            if torchscript:
                return torch.jit.load(str(path), map_location="cpu")  # type: ignore[no-untyped-call]
            try:
                return torch.load(path, map_location="cpu", weights_only=False, mmap=True)
            except RuntimeError as exc:
                if "mmap" not in str(exc):  # legacy files cannot be memory-mapped
                    raise
                return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # arbitrary unpickling: any class may fail to import
        prefix = f"{fallback_of}; " if fallback_of is not None else ""
        raise ModelLoadError(
            f"{prefix}cannot unpickle {path} even with {setting('trust_pickle')}: {reason(exc)}"
        ) from exc


def interpret(obj: Any, path: Path) -> RawModel:
    """Turn what a torch file holds (restricted read or ``torch.load``) into a :class:`RawModel`."""
    if isinstance(obj, torch.nn.Module) or is_module(obj):
        raw = RawModel(_strip_ddp(_flatten(obj)), "pickle", padding_rows=_strip_ddp(pickled_padding(obj)))
        _note_module(obj, raw, path)
        return raw
    if isinstance(obj, (torch.Tensor, np.ndarray)):
        return RawModel(_flatten({path.stem: obj}), "state_dict")
    if isinstance(obj, Placeholder):
        # A dict subclass (its items) or a plain object (its attributes) stands for a checkpoint.
        obj = as_mapping(obj) or placeholder_attrs(obj) or {}
    if not isinstance(obj, Mapping):
        raise ModelLoadError(
            f"{path} holds an object of type {type(obj).__name__}, not a state dict, checkpoint dict or module"
        )
    if CHECKPOINT_MARKER in obj:
        return _popaudit(obj, path)
    model_key = next((k for k in MODEL_KEYS if k in obj and _is_model(obj[k])), None)
    unread: dict[str, str] = {}
    if model_key is not None:
        tensors = _flatten(obj[model_key], unread)
        lightning = model_key == "state_dict" and any(k in obj for k in LIGHTNING_KEYS)
        fmt = "lightning" if lightning else "checkpoint"
    else:
        tensors = _flatten({k: v for k, v in obj.items() if k not in _METADATA_KEYS}, unread)
        fmt = "checkpoint" if any(k in obj for k in _METADATA_KEYS) else "state_dict"
    raw = RawModel(_strip_ddp(tensors), fmt, unread=unread)
    raw.stored_ids = ids_beside_weights(obj, raw.tensors, model_key, path)
    notes, doubt = module_notes(obj[model_key], path) if model_key is not None else ([], {})
    raw.warnings.extend(notes)
    raw.optimizer_state = _optimizer_state(obj)
    raw.config = recorded_config(_config(obj, raw.warnings, path), doubt)  # the module's or the config's flags
    return raw


def _note_module(obj: Any, raw: RawModel, path: Path) -> None:
    """A pickled module's warning, and its ``scoring_doubt`` (:mod:`auditor.loading.pickled_module`)."""
    notes, config = module_notes(obj, path)
    raw.warnings.extend(notes)
    if config:
        raw.config = {**(raw.config or {}), **config}


def _is_model(value: Any) -> bool:
    return isinstance(value, (Mapping, torch.nn.Module)) or is_module(value)


def _flatten(obj: Any, unread: dict[str, str] | None = None) -> dict[str, torch.Tensor]:
    """Tensor leaves of nested mappings and modules (real or placeholders) as dotted keys.

    Numeric numpy arrays become tensors (plain pickles hold tables as arrays); tensors of a
    layout popaudit does not read are put in ``unread`` (:data:`UNREAD_TENSORS`); other
    placeholders are ignored. Iterative; each mapping is entered once (cycles, shared dicts).
    """
    out: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    stack: list[tuple[str | None, Any]] = [(None, obj)]
    while stack:
        name, value = stack.pop()
        prefix = "" if name is None else f"{name}."
        if isinstance(value, torch.Tensor) and name is not None:
            out[name] = value
        elif isinstance(value, np.ndarray) and name is not None:
            tensor = _array_tensor(value)
            if tensor is not None:
                out[name] = tensor
        elif unread is not None and name is not None and isinstance(value, Placeholder) \
                and (what := UNREAD_TENSORS.get(qualname_of(value))) is not None:
            unread[name] = what
        elif is_module(value):
            out.update((prefix + k, v) for k, v in module_state_dict(value).items())
        elif isinstance(value, (Mapping, torch.nn.Module)) and id(value) not in seen:
            seen.add(id(value))
            items = list((value.state_dict() if isinstance(value, torch.nn.Module) else value).items())
            stack.extend((f"{prefix}{k}", v) for k, v in reversed(items))
    return out


def _array_tensor(arr: np.ndarray[Any, Any]) -> torch.Tensor | None:
    """A numeric numpy array as a tensor; None for other dtypes (strings, objects)."""
    if (isinstance(arr, SafeArray) and arr.unread) or arr.dtype.kind not in "biufc":
        return None
    arr = np.asarray(arr)
    if not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    with warnings.catch_warnings():  # read-only arrays: torch warns that writes would be undefined
        warnings.simplefilter("ignore")
        try:
            return torch.from_numpy(arr)
        except (TypeError, ValueError, RuntimeError):  # a dtype torch lacks, negative strides
            return None


def _strip_ddp(tensors: dict[str, _V]) -> dict[str, _V]:
    """Drop the ``module.`` prefix DistributedDataParallel adds to every key."""
    if tensors and all(k.startswith("module.") for k in tensors):
        return {k[len("module.") :]: v for k, v in tensors.items()}
    return tensors


def _optimizer_state(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The raw optimizer state dict; Lightning's first state, with the whole list under
    ``optimizer_states``."""
    states = obj.get("optimizer_states")
    if isinstance(states, (list, tuple)) and states:
        first = _as_state(states[0])
        if first is not None:
            return {**first, "optimizer_states": [_as_state(s) for s in states]}
    for key in ("optimizer_state_dict", "optimizer"):
        state = _as_state(obj.get(key))
        if state is not None:
            return state
    return None


def _as_state(value: Any) -> Mapping[str, Any] | None:
    if isinstance(value, torch.optim.Optimizer):  # only reachable with --trust-pickle
        return value.state_dict()
    if isinstance(value, Mapping):
        return value
    attrs = placeholder_attrs(value)
    if attrs is not None and isinstance(attrs.get("param_groups"), list):
        return _optimizer_placeholder(attrs)
    return None


def _optimizer_placeholder(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """A pickled optimizer's state as ``Optimizer.state_dict()`` gives it (params as indices)."""
    index: dict[int, int] = {}
    groups = []
    for group in attrs["param_groups"]:
        if isinstance(group, Mapping):
            params = group.get("params")
            ids = [index.setdefault(id(p), len(index)) for p in (params if isinstance(params, list) else [])]
            groups.append({**group, "params": ids})
    state = {index[id(k)]: v for k, v in as_mapping(attrs.get("state")).items() if id(k) in index}
    return {"state": state, "param_groups": groups}


def _config(obj: Mapping[str, Any], warnings: list[str], path: Path) -> Mapping[str, Any] | None:
    for key in CONFIG_KEYS:
        if key not in obj or obj[key] is None:
            continue
        value = obj[key]
        if isinstance(value, argparse.Namespace):
            value = vars(value)
        elif isinstance(value, Placeholder):
            value = _plain_config(value)
        if isinstance(value, Mapping):
            return {k: to_plain(v) if isinstance(v, Placeholder) else v for k, v in value.items()}
        warnings.append(f"{path}: '{key}' is a {type(value).__name__}, not a mapping; ignored")
    return None


def _plain_config(value: Placeholder) -> Any:
    """The recorded values of a pickled config object (RecBole's Config, a Namespace, ...)."""
    plain = to_plain(value)
    if isinstance(plain, dict) and (qualname_of(value) == "argparse.Namespace" or value.setitems):
        plain.pop("__class__", None)  # a Namespace or a dict subclass: its values are the config
    return plain


def _popaudit(obj: Mapping[str, Any], path: Path) -> RawModel:
    """A checkpoint written by ``popaudit retrain`` (its encoder outputs are the tables)."""
    version = obj.get(CHECKPOINT_MARKER)
    if version != CHECKPOINT_VERSION:
        named = version if type(version) is int else f"a {type(version).__name__}"  # never the file's text
        raise ModelLoadError(
            f"{path} is a popaudit checkpoint of version {named}; this popaudit reads version {CHECKPOINT_VERSION}"
        )
    missing = [k for k in ("item_embeddings", "state_dict") if k not in obj]
    if missing:
        raise ModelLoadError(f"popaudit checkpoint {path} lacks {', '.join(missing)}")
    state = obj["state_dict"]
    tensors = _flatten(state) if _is_model(state) else {}
    extras = {
        k: obj[k]
        for k in (
            "item_embeddings",
            "user_embeddings",
            "item_ids",
            "user_ids",
            "item_frequencies",
            "user_optimizer_state_dict",
            "trace",
            "train_pairs",
            "holdout_pairs",
        )
        if obj.get(k) is not None
    }
    for key in ("item_embeddings", "user_embeddings"):
        if key in extras and not isinstance(extras[key], torch.Tensor):  # a hand-edited file
            raise ModelLoadError(
                f"popaudit checkpoint {path}: '{key}' is a {type(extras[key]).__name__}, not a tensor"
            )
    return RawModel(
        tensors,
        "popaudit",
        optimizer_state=_as_state(obj.get("optimizer_state_dict")),
        config=_config(obj, [], path),
        extras=extras,
    )
