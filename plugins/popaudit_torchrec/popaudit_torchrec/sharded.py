"""DistributedModelParallel state dicts: wrapper prefixes and ShardedTensor tables, read inertly.

``DistributedModelParallel.state_dict()`` maps each sharded table's
``<path>.embedding_bags.<table>.weight`` to a ``torch.distributed`` ``ShardedTensor``: the
shards this rank holds (``Shard``: a tensor and its ``ShardMetadata`` offsets and sizes)
and the global metadata of every shard. popaudit's restricted unpickler never imports those
classes: each arrives as an inert placeholder, and this module puts the shards back together
(rows and columns, as row-wise, column-wise and table-wise sharding place them). A file that
holds only some of a table's shards (one rank's save of a multi-rank model) is refused with
the rows it lacks. Keys saved through the wrapper itself (``_dmp_wrapped_module.``, and
DistributedDataParallel's ``module.``) lose those prefixes.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from auditor.errors import ModelLoadError
from auditor.loading.safe_pickle import Placeholder, as_mapping, placeholder_attrs, qualname_of

SHARDED_TENSOR = "torch.distributed._shard.sharded_tensor.api.ShardedTensor"
DTENSOR = "torch.distributed.tensor._api.DTensor"
WRAPPER_PREFIXES = ("_dmp_wrapped_module.", "module.")


def sharded_type(value: Any) -> str | None:
    """``ShardedTensor``/``DTensor`` when ``value`` is the placeholder of one, else None."""
    if not isinstance(value, Placeholder) or qualname_of(value) != "torch._tensor._rebuild_from_type_v2":
        return None
    if len(value.args) != 4:
        return None
    new_type = value.args[1]
    name = qualname_of(new_type) if isinstance(new_type, type) else ""
    if name == SHARDED_TENSOR:
        return "ShardedTensor"
    return "DTensor" if name.endswith(".DTensor") else None


def strip_prefixes(key: str) -> str:
    """``_dmp_wrapped_module.module.two_tower...`` -> ``two_tower...``."""
    changed = True
    while changed:
        changed = False
        for prefix in WRAPPER_PREFIXES:
            if key.startswith(prefix):
                key, changed = key[len(prefix) :], True
    return key


def is_dmp_state(state: Mapping[str, Any]) -> bool:
    """A DistributedModelParallel state dict: a sharded value or the wrapper's prefix."""
    return any(
        sharded_type(v) is not None or str(k).startswith(WRAPPER_PREFIXES[0]) for k, v in state.items()
    )


def materialise(state: Mapping[str, Any], path: Path) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Plain tensors under unwrapped keys, sharded tables assembled; notes for the report."""
    out: dict[str, torch.Tensor] = {}
    notes: list[str] = []
    for raw_key, value in state.items():
        key = strip_prefixes(str(raw_key))
        kind = sharded_type(value)
        if isinstance(value, torch.Tensor):
            out[key] = value
        elif kind == "ShardedTensor":
            out[key], count = assemble(value, key, path)
            notes.append(f"{key}: a ShardedTensor of {count} shards, put back together from {path}")
        elif kind == "DTensor":
            raise ModelLoadError(
                f"TorchRec checkpoint {path}: {key} is a DTensor; popaudit reads ShardedTensor state dicts "
                "(TorchRec's default). Save the table as a plain tensor, e.g. "
                "{k: v.full_tensor() for k, v in model.state_dict().items()}"
            )
    return out, notes


def assemble(value: Placeholder, key: str, path: Path) -> tuple[torch.Tensor, int]:
    """The full table of a ShardedTensor placeholder, from its local shards and metadata."""
    state = value.args[3]
    if not isinstance(state, tuple) or len(state) < 2 or not isinstance(state[0], list):
        raise ModelLoadError(f"TorchRec checkpoint {path}: {key} is a ShardedTensor with an unreadable state")
    meta = placeholder_attrs(state[1]) or {}
    size = _ints(meta.get("size"))
    declared = meta.get("shards_metadata")
    if size is None or len(size) != 2 or not isinstance(declared, list):
        raise ModelLoadError(f"TorchRec checkpoint {path}: {key} is a ShardedTensor without a 2-D global size")
    shards = [_shard(s, key, path) for s in state[0]]
    if not shards:
        raise ModelLoadError(
            f"TorchRec checkpoint {path}: {key} holds no shard of its {size[0]}x{size[1]} table "
            f"(this rank's save holds none of the {len(declared)} shards); save the full table from the rank(s) "
            "that hold it, or gather the state dict first"
        )
    dtype = shards[0][0].dtype
    table = torch.empty(size, dtype=dtype)
    covered = torch.zeros(size, dtype=torch.int8)
    for tensor, offsets, sizes in shards:
        rows, cols = slice(offsets[0], offsets[0] + sizes[0]), slice(offsets[1], offsets[1] + sizes[1])
        if tuple(tensor.shape) != tuple(sizes) or offsets[0] + sizes[0] > size[0] or offsets[1] + sizes[1] > size[1]:
            raise ModelLoadError(
                f"TorchRec checkpoint {path}: a shard of {key} at offsets {offsets} has shape "
                f"{list(tensor.shape)}, not its declared {sizes} inside {size}"
            )
        table[rows, cols] = tensor.to(dtype)
        covered[rows, cols] += 1
    missing = torch.nonzero(covered.amin(dim=1) == 0).flatten()
    if missing.numel():
        lo, hi = int(missing[0]), int(missing[-1])
        raise ModelLoadError(
            f"TorchRec checkpoint {path}: {key} holds {len(shards)} of the {len(declared)} shards of its "
            f"{size[0]}x{size[1]} table ({missing.numel()} rows missing, rows {lo}..{hi}): it is one rank's "
            "part of a sharded model. Gather the full state dict on one rank before saving, then audit that file"
        )
    if bool((covered > 1).any()):
        raise ModelLoadError(f"TorchRec checkpoint {path}: shards of {key} overlap")
    return table, len(shards)


def _shard(value: Any, key: str, path: Path) -> tuple[torch.Tensor, list[int], list[int]]:
    attrs = placeholder_attrs(value) or {}
    meta = placeholder_attrs(attrs.get("metadata")) or {}
    tensor, offsets, sizes = attrs.get("tensor"), _ints(meta.get("shard_offsets")), _ints(meta.get("shard_sizes"))
    if not isinstance(tensor, torch.Tensor) or offsets is None or sizes is None or len(offsets) != 2 or len(sizes) != 2:
        raise ModelLoadError(f"TorchRec checkpoint {path}: a shard of {key} lacks its tensor, offsets or sizes")
    if not tensor.is_floating_point() or min(offsets + sizes) < 0:
        raise ModelLoadError(f"TorchRec checkpoint {path}: a shard of {key} is not a float tensor at valid offsets")
    return tensor, offsets, sizes


def _ints(value: Any) -> list[int] | None:
    items = as_mapping(value) if isinstance(value, Placeholder) else value
    if isinstance(items, (list, tuple, torch.Size)) and all(type(v) is int for v in items):
        return [int(v) for v in items]
    return None
