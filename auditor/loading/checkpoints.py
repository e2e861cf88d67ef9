"""Reading model files into a flat state dict plus what the checkpoint recorded.

PyTorch files are opened with ``torch.load(weights_only=True)`` only; full unpickling
(which runs code from the file) needs ``--trust-pickle``. TorchScript archives are
loaded but never run. Safetensors files are read with the safetensors library.
"""

from __future__ import annotations

import argparse
import pickle
import pickletools
import re
import warnings
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from auditor.errors import ModelLoadError, UntrustedPickleError

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
POPAUDIT_MARKER = "popaudit_checkpoint"
POPAUDIT_VERSION = 1


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


def is_torchscript(path: Path) -> bool:
    """True for a zip archive written by ``torch.jit.save`` (it holds constants.pkl / code/)."""
    if not zipfile.is_zipfile(path):
        return False
    try:
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
    except (zipfile.BadZipFile, OSError):
        return False
    return any(n.endswith("/constants.pkl") or n == "constants.pkl" or "/code/" in n for n in names)


def read_torchscript(path: Path) -> RawModel:
    """Named parameters and buffers of a TorchScript archive (the model is not run)."""
    try:
        with warnings.catch_warnings():  # torch marks jit.load deprecated; reading archives still works
            warnings.simplefilter("ignore", DeprecationWarning)
            module = torch.jit.load(str(path), map_location="cpu")
    except Exception as exc:  # torch raises RuntimeError subclasses with C++ text
        raise ModelLoadError(f"cannot read {path} as a TorchScript archive: {exc}") from exc
    tensors = {k: v.detach() for k, v in module.named_parameters()}
    tensors.update({k: v.detach() for k, v in module.named_buffers()})
    return RawModel(tensors, "torchscript")


def read_safetensors(path: Path) -> RawModel:
    """Every tensor of a ``.safetensors`` file; string metadata becomes the config."""
    from safetensors import SafetensorError
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt", device="cpu") as fh:
            tensors = {k: fh.get_tensor(k) for k in fh.keys()}
            metadata = fh.metadata()
    except (SafetensorError, OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot read {path} as safetensors: {exc}") from exc
    return RawModel(tensors, "safetensors", config=dict(metadata) if metadata else None)


def _torch_load(path: Path, weights_only: bool) -> Any:
    """torch.load on CPU, memory-mapped when the file format allows it."""
    try:
        return torch.load(path, map_location="cpu", weights_only=weights_only, mmap=True)
    except RuntimeError as exc:
        if "mmap" not in str(exc):
            raise
    return torch.load(path, map_location="cpu", weights_only=weights_only)


def read_torch(path: Path, trust_pickle: bool) -> RawModel:
    """A ``.pt``/``.pth`` file: state dict, checkpoint, Lightning, popaudit or pickled module."""
    if is_torchscript(path):
        return read_torchscript(path)
    try:
        obj = _torch_load(path, weights_only=True)
        trusted = False
    except pickle.UnpicklingError as exc:
        if "Weights only load failed" not in str(exc):
            raise ModelLoadError(f"cannot read {path} as a PyTorch file: {_first_line(exc)}") from exc
        if "Unsupported global" not in str(exc) and not (zipfile.is_zipfile(path) or _is_pickle(path)):
            # Garbage and truncated files also fail the weights-only unpickler; they are
            # not pickles, so --trust-pickle would not help and must not be suggested.
            raise ModelLoadError(
                f"cannot read {path} as a PyTorch file: it is neither a torch.save zip archive nor a "
                "complete pickle (corrupt, truncated, or another format)"
            ) from exc
        if not trust_pickle:
            found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(exc))
            what = f" (it needs {found.group(1)})" if found else ""
            raise UntrustedPickleError(
                f"{path} holds pickled Python objects{what}, not just tensors; loading it runs code "
                "from the file. Pass --trust-pickle only if you trust where the file came from, "
                "or re-save it as a state dict (torch.save(model.state_dict(), ...))."
            ) from exc
        try:
            obj = _torch_load(path, weights_only=False)
        except Exception as exc2:  # arbitrary unpickling: any class may fail to import
            raise ModelLoadError(
                f"cannot unpickle {path} even with --trust-pickle: {type(exc2).__name__}: {exc2}"
            ) from exc2
        trusted = True
    except Exception as exc:  # torch raises RuntimeError/KeyError/EOFError for foreign files
        if "TorchScript" in str(exc):  # torch.load recognised an archive our zip check missed
            return read_torchscript(path)
        raise ModelLoadError(f"cannot read {path} as a PyTorch file: {type(exc).__name__}: {_first_line(exc)}") from exc
    raw = interpret(obj, path)
    if trusted:
        raw.warnings.append(f"{path} was fully unpickled (--trust-pickle)")
    return raw


def _is_pickle(path: Path) -> bool:
    """True when ``path`` starts with a complete, well-formed pickle stream.

    ``pickletools.genops`` parses opcodes without building any object, so this runs no code
    from the file; it stops at the first STOP opcode (legacy torch files hold several pickles).
    """
    try:
        with open(path, "rb") as fh:
            for _ in pickletools.genops(fh):
                pass
    except Exception:  # genops raises ValueError for unknown opcodes, others for truncation
        return False
    return True


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def interpret(obj: Any, path: Path) -> RawModel:
    """Turn what torch.load returned into a :class:`RawModel`."""
    if isinstance(obj, torch.nn.Module):
        return RawModel(_flatten(obj), "pickle")
    if isinstance(obj, torch.Tensor):
        return RawModel({path.stem: obj}, "state_dict")
    if not isinstance(obj, Mapping):
        raise ModelLoadError(
            f"{path} holds a {type(obj).__name__}, not a state dict, checkpoint dict or module"
        )
    if POPAUDIT_MARKER in obj:
        return _popaudit(obj, path)
    model_key = next((k for k in MODEL_KEYS if k in obj and _is_model(obj[k])), None)
    if model_key is not None:
        tensors = _flatten(obj[model_key])
        lightning = model_key == "state_dict" and any(k in obj for k in LIGHTNING_KEYS)
        fmt = "lightning" if lightning else "checkpoint"
    else:
        tensors = _flatten({k: v for k, v in obj.items() if k not in _METADATA_KEYS})
        fmt = "checkpoint" if any(k in obj for k in _METADATA_KEYS) else "state_dict"
    raw = RawModel(_strip_ddp(tensors), fmt)
    raw.optimizer_state = _optimizer_state(obj)
    raw.config = _config(obj, raw.warnings, path)
    return raw


def _is_model(value: Any) -> bool:
    return isinstance(value, (Mapping, torch.nn.Module))


def _flatten(obj: Any, prefix: str = "") -> dict[str, torch.Tensor]:
    """Tensor leaves of nested mappings/modules as dotted keys."""
    if isinstance(obj, torch.nn.Module):
        obj = obj.state_dict()
    out: dict[str, torch.Tensor] = {}
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if isinstance(value, torch.Tensor):
            out[name] = value
        elif isinstance(value, (Mapping, torch.nn.Module)):
            out.update(_flatten(value, name + "."))
    return out


def _strip_ddp(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
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
    return None


def _config(obj: Mapping[str, Any], warnings: list[str], path: Path) -> Mapping[str, Any] | None:
    for key in CONFIG_KEYS:
        if key not in obj or obj[key] is None:
            continue
        value = obj[key]
        if isinstance(value, argparse.Namespace):
            value = vars(value)
        if isinstance(value, Mapping):
            return dict(value)
        warnings.append(f"{path}: '{key}' is a {type(value).__name__}, not a mapping; ignored")
    return None


def _popaudit(obj: Mapping[str, Any], path: Path) -> RawModel:
    """A checkpoint written by ``popaudit retrain`` (its encoder outputs are the tables)."""
    version = obj.get(POPAUDIT_MARKER)
    if version != POPAUDIT_VERSION:
        raise ModelLoadError(
            f"{path} is a popaudit checkpoint of version {version!r}; this popaudit reads version "
            f"{POPAUDIT_VERSION}"
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
