"""Rescaled copies of PyTorch model files (state dicts, checkpoints, popaudit checkpoints).

The file is read by the restricted reader (:func:`~auditor.loading.torch_archive.read_torch_file`:
no code from it runs), the item tensor is found under the key ``check`` reports, and the
object tree is written back with only that tensor replaced: ``torch.save`` for zip and
legacy archives (the same container), ``pickle`` for a plain pickle of arrays. Tensors that
shared storage still share it, every other key keeps its value.

A tree can be written back faithfully only when it holds nothing but tensors, numpy
arrays, plain containers and plain values. Objects of other classes (a pickled module, an
optimizer or config object, a Lightning ``AttributeDict``) are inert placeholders here,
and a TorchScript archive is code: writing those back would need running code from the
file. Such files are refused, unless ``tensors_only`` is set: then the file's tensors,
under the flat keys ``check`` lists, are written as a plain state dict (everything else
dropped). What is lost either way: ``nn.Parameter`` wrappers and ``requires_grad`` flags
(a state dict never needs them), and numpy scalar types (read back as Python numbers).
"""

from __future__ import annotations

import os
import pickle
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from auditor.errors import ModelLoadError, setting
from auditor.io import torch_save
from auditor.loading.checkpoints import interpret
from auditor.loading.discovery import tensor_infos
from auditor.loading.pickle_scan import shown
from auditor.loading.safe_pickle import Placeholder, qualname_of
from auditor.loading.torch_archive import TorchFile, read_torch_file
from auditor.memory import SPILL_PREFIX, memory_budget
from auditor.mitigation.rescale import ReadRows, RowNorms, WriteRows, Written, rescale_blocks
from auditor.progress import SILENT, Progress

TORCH_DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)
"""Table dtypes written as they are (float8 tables too, through torch's own conversion)."""
BIAS_RESCALED = (
    "the item bias `{key}` was rescaled with the item rows: each served row [i, b_i] (what check serves, the factors "
    "with the bias as one more column) became [i, b_i]·‖[i, b_i]‖^(α−1), so the output's scores u·i + b_i are "
    "check's alpha scoring of the input; the norms above are of those served rows"
)
"""The note of a model whose item bias was rescaled with its rows (:func:`biased_io`)."""
_LEAVES = (str, bytes, bytearray, int, float, complex, bool, type(None), slice, torch.dtype, torch.device)
_CONTAINERS = (dict, list, tuple, set, frozenset)


def dtype_name(dtype: torch.dtype) -> str:
    """``float32`` for ``torch.float32``."""
    return str(dtype).removeprefix("torch.")


def torch_io(source: torch.Tensor, target: torch.Tensor) -> tuple[ReadRows, WriteRows]:
    """``read``/``write`` over two (n, dim) tensors of one dtype (strided views included)."""

    def read(start: int, stop: int) -> np.ndarray:
        return source[start:stop].to(torch.float64).numpy()

    def write(start: int, stop: int, rows: np.ndarray) -> np.ndarray:
        target[start:stop] = torch.from_numpy(rows).to(target.dtype)
        return target[start:stop].to(torch.float64).numpy()

    return read, write


def rescale_tensor(
    tensor: torch.Tensor,
    out: torch.Tensor,
    alpha: float,
    transposed: bool,
    *,
    max_memory: int | None = None,
    progress: Progress = SILENT,
) -> RowNorms:
    """Rescale ``tensor`` (items as rows, or as columns when ``transposed``) into ``out``."""
    source, target = (tensor.T, out.T) if transposed else (tensor, out)
    read, write = torch_io(source, target)
    n_rows, dim = source.shape
    return rescale_blocks(n_rows, dim, alpha, read, write, max_memory=max_memory, progress=progress)


def biased_io(
    source: torch.Tensor, target: torch.Tensor, bias: torch.Tensor, bias_out: torch.Tensor
) -> tuple[ReadRows, WriteRows]:
    """``read``/``write`` over the served rows [i, b_i] of an item table and its per-item
    bias (:mod:`auditor.loading.item_bias`): the rule rescales the two together."""
    read_rows, write_rows = torch_io(source, target)
    column, column_out = bias.reshape(-1), bias_out.reshape(-1)  # (n,) views of (n,), (n, 1) or a Linear's (1, n)

    def read(start: int, stop: int) -> np.ndarray:
        return np.hstack([read_rows(start, stop), column[start:stop].to(torch.float64).numpy()[:, None]])

    def write(start: int, stop: int, rows: np.ndarray) -> np.ndarray:
        stored = write_rows(start, stop, np.ascontiguousarray(rows[:, :-1]))
        column_out[start:stop] = torch.from_numpy(np.ascontiguousarray(rows[:, -1])).to(column_out.dtype)
        return np.hstack([stored, column_out[start:stop].to(torch.float64).numpy()[:, None]])

    return read, write


def _rescale(
    tensor: torch.Tensor, out: torch.Tensor, bias: torch.Tensor | None, bias_out: torch.Tensor | None, alpha: float,
    transposed: bool, max_memory: int | None, progress: Progress,
) -> RowNorms:
    """The table rescaled into ``out``; with a ``bias``, its served rows [i, b_i] together."""
    if bias is None or bias_out is None:
        return rescale_tensor(tensor, out, alpha, transposed, max_memory=max_memory, progress=progress)
    source, target = (tensor.T, out.T) if transposed else (tensor, out)
    read, write = biased_io(source, target, bias, bias_out)
    n_rows, dim = source.shape
    return rescale_blocks(n_rows, dim + 1, alpha, read, write, max_memory=max_memory, progress=progress)


def _bias_of(pool: dict[str, Any], key: str | None, n_rows: int, source: Path) -> torch.Tensor | None:
    """The item bias tensor ``check`` serves with the table (None: no ``key``)."""
    if key is None:
        return None
    bias = pool.get(key)
    if not isinstance(bias, torch.Tensor) or tuple(bias.shape) not in ((n_rows,), (n_rows, 1), (1, n_rows)):
        raise ModelLoadError(f"{source}: cannot find the item bias {key!r} of {n_rows} values that check serves with")
    return bias


@contextmanager
def table_buffer(like: torch.Tensor, max_memory: int | None) -> Iterator[torch.Tensor]:
    """A contiguous tensor of ``like``'s shape and dtype: in memory, or (beyond the memory
    ceiling) mapped from a temporary file that is removed afterwards."""
    n_bytes = like.numel() * like.element_size()
    budget = memory_budget(max_memory)
    if budget is None or n_bytes <= budget:
        yield torch.empty(like.shape, dtype=like.dtype)
        return
    try:
        fd, name = tempfile.mkstemp(prefix=f"{SPILL_PREFIX}{os.getpid()}-", suffix=".npy")
    except OSError as exc:
        raise _spill_error(n_bytes, exc) from exc
    try:
        try:
            if hasattr(os, "posix_fallocate"):  # a full disk fails here, not later with SIGBUS
                os.posix_fallocate(fd, 0, n_bytes)
            else:
                os.ftruncate(fd, n_bytes)
        except OSError as exc:
            raise _spill_error(n_bytes, exc) from exc
        finally:
            os.close(fd)
        yield torch.from_file(name, shared=True, size=like.numel(), dtype=like.dtype).reshape(like.shape)
    finally:
        os.unlink(name)


def _spill_error(n_bytes: int, exc: OSError) -> ModelLoadError:
    return ModelLoadError(
        f"cannot create a {n_bytes:,}-byte temporary file for the rescaled table in {tempfile.gettempdir()}: "
        f"{exc.strerror or exc} (free disk space there, or set TMPDIR to a folder with room)"
    )


def write_torch(
    source: Path,
    target: Path,
    key: str,
    alpha: float,
    *,
    tensors_only: bool = False,
    max_memory: int | None = None,
    progress: Progress = SILENT,
    bias_key: str | None = None,
) -> Written:
    """Write ``source`` to ``target`` with tensor ``key`` (as ``check`` names it) rescaled,
    and the item bias ``bias_key`` with it (the served rows [i, b_i], as ``check`` serves them)."""
    found = read_torch_file(source, max_memory)
    pool, extras = _tensor_pool(found, source)
    tensor = pool.get(key)
    if tensor is None or tensor.ndim != 2 or not tensor.is_floating_point():
        raise ModelLoadError(f"{source}: cannot find the floating-point 2-D tensor {key!r} that check reads")
    transposed = tensor_infos({key: tensor})[0].onehot_linear
    bias = _bias_of(pool, bias_key, int(tensor.shape[1 if transposed else 0]), source)
    bias_out = None if bias is None else torch.empty(bias.shape, dtype=bias.dtype)
    notes: list[str] = []
    problems = _unwritable(found, tensor, source, key)
    if problems and not tensors_only:
        raise ModelLoadError(
            f"cannot write {source} back faithfully with its item table rescaled: it holds "
            + "; ".join(problems[:3])
            + (f" and {len(problems) - 3} more" if len(problems) > 3 else "")
            + ", which popaudit does not rebuild (an object would run code from the file). Pass "
            f"{setting('tensors_only')} to write a state dict of its {_count(len(pool), 'tensor')} instead (every "
            "other object dropped), or re-save the model as a state dict (torch.save(model.state_dict(), ...))"
        )
    with table_buffer(tensor, max_memory) as out:
        norms = _rescale(tensor, out, bias, bias_out, alpha, transposed, max_memory, progress)
        if problems:
            state = {k: (out if v is tensor else bias_out if v is bias else v) for k, v in pool.items()}
            torch_save(state, target)
            notes.append(
                f"{source} holds {problems[0]}: only its tensors ({_count(len(pool), 'tensor')}) were written, "
                f"as a state dict ({setting('tensors_only')})"
            )
        else:
            root = _replace(found.root, tensor, out)
            if bias is not None and bias_out is not None:
                root = _replace(root, bias, bias_out)
            if found.kind == "pickle":
                with open(target, "wb") as fh:
                    pickle.dump(root, fh, protocol=4)
            else:
                torch_save(root, target, zip_format=found.kind != "legacy")
    if "item_embeddings" in extras and key == "item_embeddings":
        notes.append(
            "popaudit checkpoint: item_embeddings (the table check reads) was rescaled; the item encoder's "
            "weights in state_dict were not, so probes and retraining from the output use the original encoder"
        )
    notes += [] if bias_key is None else [BIAS_RESCALED.format(key=bias_key)]
    layout = "columns" if transposed else "rows"
    return Written(norms, dtype_name(tensor.dtype), layout, notes, "state_dict" if problems else None)


def _tensor_pool(found: TorchFile, source: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The file's tensors by the names ``check`` gives them, and its other entries (a
    popaudit checkpoint's encoder outputs count as tensors)."""
    if found.tensors is not None:
        return dict(found.tensors), {}
    raw = interpret(found.root, source)
    pool, extras = dict(raw.tensors), raw.extras
    for name in ("item_embeddings", "user_embeddings"):  # popaudit checkpoints: the encoder outputs
        if isinstance(extras.get(name), torch.Tensor):
            pool[name] = extras[name]
    return pool, extras


def _unwritable(found: TorchFile, tensor: torch.Tensor, source: Path, key: str) -> list[str]:
    """What in the file popaudit cannot write back faithfully (empty: the whole object tree
    can be); ModelLoadError when other tensors are views of the item table's storage."""
    if found.tensors is not None:
        return ["a TorchScript archive (its code and module structure)"]
    problems, shared = tree_problems(found.root, tensor)
    if shared:
        raise ModelLoadError(
            f"cannot rescale the item table {key!r} of {source}: other tensors in the file ({shared}) are "
            "views of its storage (a slice, a transpose) and would keep the old values; save the model "
            "without those views (or with .clone() copies)"
        )
    return problems


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def _is_target(value: Any, target: torch.Tensor) -> bool:
    """``value`` is the item tensor, or the numpy array it was made from (same memory)."""
    if value is target:
        return True
    return (
        isinstance(value, np.ndarray)
        and value.size > 0
        and value.shape == tuple(target.shape)
        and value.__array_interface__["data"][0] == target.data_ptr()
    )


def _children(obj: Any) -> list[Any]:
    if isinstance(obj, dict):
        return [*obj.keys(), *obj.values()]
    return list(obj)


def tree_problems(root: Any, target: torch.Tensor) -> tuple[list[str], int]:
    """(classes in ``root`` that cannot be written back, other tensors sharing the target's
    storage). Iterative; shared and cyclic containers are visited once."""
    problems: dict[str, None] = {}
    shared = 0
    storage = target.untyped_storage().data_ptr()
    seen: set[int] = set()
    stack = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            if obj is not target and obj.untyped_storage().nbytes() and obj.untyped_storage().data_ptr() == storage:
                shared += 1
        elif isinstance(obj, np.ndarray):
            if obj.dtype.hasobject:
                problems["a numpy array of Python objects"] = None
            elif unread := getattr(obj, "unread", None):  # left empty by the reader: written back, it is lost
                problems[f"a numpy array of {unread}"] = None
        elif isinstance(obj, _CONTAINERS):
            stack.extend(_children(obj))
        elif not isinstance(obj, _LEAVES) or isinstance(obj, type):
            name = shown(qualname_of(obj)) if isinstance(obj, (Placeholder, type)) else type(obj).__name__
            problems[f"an object of class {name}"] = None
    return list(problems), shared


def _replace(root: Any, target: torch.Tensor, table: torch.Tensor) -> Any:
    """``root`` with every reference to ``target`` (or its numpy array) replaced by ``table``
    (as an array where the file held an array), and numpy arrays as plain ``np.ndarray``.

    Dicts and lists change in place; tuples and sets on the way are rebuilt. Iterative
    post-order walk; shared containers are rebuilt once, so sharing survives.
    """
    done: dict[int, Any] = {}
    as_array = table.numpy() if table.dtype in (torch.float16, torch.float32, torch.float64) else None

    def resolve(value: Any) -> Any:
        if _is_target(value, target):
            return table if isinstance(value, torch.Tensor) or as_array is None else as_array
        if isinstance(value, np.ndarray) and type(value) is not np.ndarray:
            return np.asarray(value)  # the reader's array subclass: written as a plain array
        return done.get(id(value), value) if isinstance(value, _CONTAINERS) else value

    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        obj, leaving = stack.pop()
        if not isinstance(obj, _CONTAINERS):
            continue
        if not leaving:
            if id(obj) in done:
                continue
            done[id(obj)] = obj  # provisional: a cycle back to it sees the object itself
            stack.append((obj, True))
            stack.extend((child, False) for child in _children(obj))
            continue
        if isinstance(obj, dict):
            for k, v in list(obj.items()):
                new = resolve(v)
                if new is not v:
                    obj[k] = new
        elif isinstance(obj, list):
            for i, v in enumerate(obj):
                new = resolve(v)
                if new is not v:
                    obj[i] = new
        else:
            items = [resolve(v) for v in obj]
            if any(a is not b for a, b in zip(items, obj)):
                done[id(obj)] = type(obj)(items)
    return resolve(root)
