"""popaudit plugin: read checkpoints of TorchRec embedding collections.

Installed, it registers itself through the ``popaudit`` entry-point group, so
``popaudit check model.pt`` reads these files with no ``--plugin`` option.

The layout it recognises is what ``torch.save`` writes for a model holding a TorchRec
``EmbeddingBagCollection`` (or ``EmbeddingCollection``) together with the table configs::

    {"state_dict": {"<prefix>embedding_bags.<table>.weight": (num_embeddings, dim), ...},
     "tables": [{"name": "<table>", "num_embeddings": N, "embedding_dim": D,
                 "feature_names": ["item_id"]}, ...],      # EmbeddingBagConfig fields
     "item_table": "<table>",     # optional: which table is the item table
     "user_table": "<table>",     # optional
     "item_ids": int64 (N,)}      # optional: raw id of each item row

The weights may also sit under ``model_state_dict`` or ``model``, or beside ``tables``
at the top level; ``<prefix>`` is any module path (``sparse_arch.ebc.``). A
``DistributedModelParallel`` state dict needs no ``tables``: its ``ShardedTensor`` tables
are put back together from their shards and the wrapper prefixes dropped
(:mod:`popaudit_torchrec.sharded`); each table's config is then its shape. The item
table is the one named by ``--item-key`` (table name or full key), by ``item_table``,
or else the one table whose name or feature names say item (movie, product, ...);
otherwise the error lists every table with its shape.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from auditor.config import LoadOptions
from auditor.errors import AmbiguousTableError, ModelLoadError
from auditor.hookspecs import hookimpl
from auditor.model import ModelBundle
from popaudit_torchrec.sharded import is_dmp_state, materialise

__version__ = "0.1.0"

FORMAT = "torchrec"
TABLE_KEY = re.compile(r"(?:^|\.)(?:embedding_bags|embeddings)\.([^.]+)\.weight$")
STATE_KEYS = ("state_dict", "model_state_dict", "model")
ITEM_WORDS = ("item", "movie", "product", "video", "article", "song", "track", "doc")
USER_WORDS = ("user", "query", "customer", "member", "visitor", "uid")


@dataclass(frozen=True)
class Table:
    """One embedding table of the collection: its config and where its weight is."""

    name: str
    key: str
    feature_names: tuple[str, ...]
    shape: tuple[int, ...]

    def describe(self) -> str:
        features = ", ".join(self.feature_names) or "no feature names"
        return f"{self.name} [{features}] {'x'.join(map(str, self.shape))} ({self.key})"

    def mentions(self, words: tuple[str, ...]) -> bool:
        text = " ".join((self.name, *self.feature_names)).lower()
        return any(re.search(rf"(^|[^a-z]){word}", text) for word in words)


@hookimpl
def popaudit_load_model(path: Path, options: LoadOptions) -> ModelBundle | None:
    """Read a TorchRec embedding-collection checkpoint; None for any other file."""
    found = _read(Path(path))
    if found is None:
        return None
    checkpoint, placeholders = found
    bundle = bundle_from_checkpoint(checkpoint, Path(path), options)
    # What the restricted reader replaced (posix.system, a pickled class): the report lists
    # them, warns of those that run code, and --fail-on 'unsafe_globals>0' reads them.
    bundle.replaced_globals = placeholders
    return bundle


def bundle_from_checkpoint(checkpoint: Mapping[str, Any], path: Path, options: LoadOptions) -> ModelBundle:
    """Pick the item (and user) tables of a TorchRec checkpoint and fill a bundle."""
    import numpy as np
    import torch

    state = _state_dict(checkpoint)
    tables = list_tables(checkpoint, state, path)
    item = _choose(tables, options.item_key, checkpoint.get("item_table"), ITEM_WORDS, USER_WORDS, "item", path)
    if item is None:
        raise AmbiguousTableError(
            f"TorchRec checkpoint {path}: cannot tell which table holds the items; pass --item-key "
            f"with one of: {'; '.join(t.describe() for t in tables)}"
        )
    others = [t for t in tables if t.name != item.name]
    warnings: list[str] = list(checkpoint.get("notes") or [])
    try:
        user = _choose(others, options.user_key, checkpoint.get("user_table"), USER_WORDS, ITEM_WORDS, "user", path)
    except AmbiguousTableError as exc:
        user = None
        warnings.append(f"no user table used: {exc}")
    item_ids = checkpoint.get("item_ids")
    if item_ids is not None:
        item_ids = torch.as_tensor(item_ids).numpy().astype(np.int64)
        if item_ids.shape != (item.shape[0],):
            raise ModelLoadError(
                f"TorchRec checkpoint {path}: item_ids has {item_ids.shape[0]} entries but table "
                f"{item.name} has {item.shape[0]} rows"
            )

    def table(t: Table) -> np.ndarray:
        return state[t.key].detach().to(torch.float32).cpu().numpy()

    return ModelBundle(
        source=path,
        format=FORMAT,
        item_table=table(item),
        item_key=item.key,
        user_table=table(user) if user is not None else None,
        user_key=user.key if user is not None else None,
        item_ids=item_ids,
        state_dict=state,
        config={"tables": [dict(t) for t in checkpoint["tables"]]},
        warnings=warnings,
    )


def list_tables(checkpoint: Mapping[str, Any], state: Mapping[str, Any], path: Path) -> list[Table]:
    """The configured tables with their weights, checked against the config's shapes."""
    import torch

    by_name: dict[str, list[str]] = {}
    for key in state:
        match = TABLE_KEY.search(str(key))
        if match:
            by_name.setdefault(match.group(1), []).append(str(key))
    tables: list[Table] = []
    configs = checkpoint["tables"]
    if not isinstance(configs, (list, tuple)) or not configs:
        raise ModelLoadError(f"TorchRec checkpoint {path}: 'tables' must be a non-empty list of table configs")
    for i, config in enumerate(configs):
        if not isinstance(config, Mapping) or "name" not in config:
            raise ModelLoadError(f"TorchRec checkpoint {path}: tables[{i}] has no 'name'")
        name = str(config["name"])
        keys = by_name.get(name, [])
        if len(keys) != 1:
            found = ", ".join(sorted(by_name)) or "none"
            problem = "no weight" if not keys else f"several weights ({', '.join(keys)})"
            raise ModelLoadError(
                f"TorchRec checkpoint {path}: table {name!r} has {problem} named "
                f"'...embedding_bags.{name}.weight' (tables with weights: {found})"
            )
        weight = state[keys[0]]
        if not isinstance(weight, torch.Tensor) or weight.ndim != 2 or not weight.is_floating_point():
            raise ModelLoadError(f"TorchRec checkpoint {path}: {keys[0]} is not a 2-D float tensor")
        shape = tuple(int(s) for s in weight.shape)
        expected = (config.get("num_embeddings", shape[0]), config.get("embedding_dim", shape[1]))
        if tuple(int(s) for s in expected) != shape:
            raise ModelLoadError(
                f"TorchRec checkpoint {path}: table {name!r} is {shape[0]}x{shape[1]} but its config "
                f"says num_embeddings={expected[0]}, embedding_dim={expected[1]}"
            )
        features = tuple(str(f) for f in config.get("feature_names") or ())
        tables.append(Table(name, keys[0], features, shape))
    return tables


def _choose(
    tables: list[Table],
    requested: str | None,
    recorded: object,
    words: tuple[str, ...],
    other_words: tuple[str, ...],
    role: str,
    path: Path,
) -> Table | None:
    """The table for ``role``: asked for, recorded in the file, or the one named so."""
    for wanted, source in ((requested, f"--{role}-key"), (recorded, f"'{role}_table' in the file")):
        if wanted is None:
            continue
        for t in tables:
            if str(wanted) in (t.name, t.key):
                return t
        raise ModelLoadError(
            f"TorchRec checkpoint {path}: {source} names {wanted!r}, which is not one of: "
            f"{'; '.join(t.describe() for t in tables) or 'no tables'}"
        )
    named = [t for t in tables if t.mentions(words) and not t.mentions(other_words)]
    if len(named) == 1:
        return named[0]
    if len(named) > 1:
        raise AmbiguousTableError(
            f"TorchRec checkpoint {path}: several tables could be the {role} table; pass "
            f"--{role}-key with one of: {'; '.join(t.describe() for t in named)}"
        )
    return None


def _state_dict(checkpoint: Mapping[str, Any]) -> Mapping[str, Any]:
    for key in STATE_KEYS:
        value = checkpoint.get(key)
        if isinstance(value, Mapping):
            return value
    return checkpoint


def _read(path: Path) -> tuple[Mapping[str, Any], dict[str, int]] | None:
    """The checkpoint, read with popaudit's restricted reader (no code from the file runs),
    with any DistributedModelParallel wrapping undone, and the globals its pickle named
    that the reader replaced by placeholders (-> count); None when it is no TorchRec file."""
    if path.suffix.lower() not in (".pt", ".pth", ".ckpt") or not path.is_file():
        return None
    from auditor.loading.safe_pickle import as_mapping
    from auditor.loading.torch_archive import read_torch_file

    try:
        found = read_torch_file(path)
    except ModelLoadError:  # not a torch file popaudit reads: the built-in loader says why
        return None
    checkpoint = as_mapping(found.root) if found.tensors is None else {}
    state = _state_dict(checkpoint)
    dmp = is_dmp_state(state)
    if "tables" not in checkpoint and not dmp:
        return None
    tensors, notes = materialise(state, path)
    if not any(TABLE_KEY.search(key) for key in tensors):
        return None
    checkpoint = {k: v for k, v in checkpoint.items() if k not in STATE_KEYS}
    if "tables" not in checkpoint:  # a bare DMP state dict: each table's shape is its config
        checkpoint["tables"] = _tables_from_keys(tensors)
    return {**checkpoint, "state_dict": tensors, "notes": notes}, dict(found.placeholders)


def _tables_from_keys(tensors: Mapping[str, Any]) -> list[dict[str, Any]]:
    tables: list[dict[str, Any]] = []
    for key, weight in tensors.items():
        match = TABLE_KEY.search(key)
        if match and weight.ndim == 2:
            tables.append({"name": match.group(1), "num_embeddings": int(weight.shape[0]),
                           "embedding_dim": int(weight.shape[1]), "feature_names": []})
    return tables
