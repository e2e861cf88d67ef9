"""Which entries of a recorded config are the item optimizer's and the loss's.

A config may hold several optimizers' and modules' settings: another tower's optimizer
(``user_optimizer: {weight_decay: 0.05}``), a normalisation layer's ``momentum``, a ``user:``
block beside an ``item:`` one. One rule says what is read, and where:

* a block whose key names another side (``user``, ``query``: :func:`other_side`) is never
  read for the item's or the model's facts;
* an entry recorded as a mapping (an optimizer, a loss) is read by its name under any of
  the keys frameworks use (:data:`NAME_KEYS`: ``name``, ``type``, LightningCLI's
  ``class_path``, Hydra's ``_target_``…), a Python path by its last component
  (``torch.optim.Adam`` is ``Adam``);
* the item optimizer is the entry under an optimizer key (:data:`OPTIMIZER_KEYS`) of a block
  naming the item side (``item``, ``item_optimizer``: :func:`item_side`), else the shallowest
  one; its numbers (lr, momentum, weight decay) come only from the blocks of
  :func:`optimizer_scopes`, never from another nested block (a model's, a tower's).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

OPTIMIZER_KEYS = ("item_optimizer", "optimizer", "optim", "optimizer_name", "opt", "learner")
"""Keys under which a config records the (item) optimizer, in the order they are taken."""
NAME_KEYS = ("name", "type", "class_path", "_target_", "class_name", "class", "cls")
"""Keys under which a mapping names what it configures (LightningCLI ``class_path``, Hydra ``_target_``)."""
_OTHER_SIDE = frozenset({"user", "users", "query", "queries", "customer", "customers"})
_ITEM = frozenset({"item", "items"})
_ITEM_BLOCK = frozenset({"optimizer", "optimiser", "optim", "opt", "learner", "train", "training", "side", "params",
                         "param", "group", "settings", "config", "cfg", "hparams"})
"""Words that may stand beside ``item`` in the key of a block of the item's training settings
(``item_optimizer``, ``item_training``); any other (``item_tower``, ``item_encoder``) makes it
a block of the model's."""
_MODEL_PART = frozenset({"model", "models", "net", "network", "module", "modules", "backbone", "tower", "towers",
                         "encoder", "decoder", "layer", "layers", "norm", "batchnorm", "bn", "mlp", "embedding",
                         "embeddings", "head", "heads"})
"""Words of a block's key that make it (and what it holds) a part of the model, whose
settings (a BatchNorm's ``momentum``) are no optimizer's, even under an ``item`` key."""
_PYTHON_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")
_DEPTH = 3


def _words(key: Any) -> list[str]:
    """The lower-cased words of a key (``user_tower``, ``userTower``: user, tower)."""
    return [w.lower() for w in re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+", str(key))]


def other_side(key: Any) -> bool:
    """Whether a block's key names another side than the item's (``user``, ``user_optimizer``)."""
    return any(word in _OTHER_SIDE for word in _words(key))


def item_side(key: Any) -> bool:
    """Whether a block's key names the item side's training settings (``item``, ``item_optimizer``)."""
    words = _words(key)
    return bool(words) and any(w in _ITEM for w in words) and all(w in _ITEM or w in _ITEM_BLOCK for w in words)


def blocks(config: Mapping[str, Any], depth: int = _DEPTH) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """``config`` and its nested mappings as (key path with a trailing dot, block),
    shallowest first, never into a block that names another side."""
    queue: list[tuple[str, Mapping[str, Any], int]] = [("", config, depth)]
    while queue:
        path, block, left = queue.pop(0)
        yield path, block
        if left > 0:
            queue += [(f"{path}{key}.", value, left - 1) for key, value in block.items()
                      if isinstance(value, Mapping) and not other_side(key)]


def own_value(block: Mapping[str, Any], names: tuple[str, ...]) -> tuple[Any, str] | None:
    """The first of ``names`` (case-insensitive) that ``block`` itself holds, not None, with its key."""
    lowered = {str(k).lower(): k for k in block}
    for name in names:
        if name in lowered and block[lowered[name]] is not None:
            return block[lowered[name]], str(lowered[name])
    return None


def config_value(config: Mapping[str, Any] | None, names: tuple[str, ...], depth: int = _DEPTH) -> tuple[Any, str] | None:
    """The first of ``names`` found in ``config`` (top level first, then nested blocks,
    shallowest first; never in a block naming another side), with its key path."""
    if not isinstance(config, Mapping):
        return None
    for path, block in blocks(config, depth):
        if (found := own_value(block, names)) is not None:
            return found[0], path + found[1]
    return None


def entry_name(value: Any) -> tuple[str, str] | None:
    """The name an entry gives (text itself, or a mapping's under :data:`NAME_KEYS`), a
    Python path by its last component, with the key it was under (``""`` for text); None
    where it names nothing."""
    key = ""
    if isinstance(value, Mapping):
        found = own_value(value, NAME_KEYS)
        if found is None or not isinstance(found[0], str):
            return None
        value, key = found
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    return (text.rsplit(".", 1)[-1] if _PYTHON_PATH.fullmatch(text) else text), key


@dataclass(frozen=True)
class NamedEntry:
    """An entry of a recorded config that records something (an optimizer, a loss)."""

    name: str | None
    """Its name (None: a mapping that names nothing under :data:`NAME_KEYS`)."""
    key: str
    """The key path of the name (``optimizer._target_``), else of the entry."""


def named_entry(config: Mapping[str, Any] | None, names: tuple[str, ...]) -> NamedEntry | None:
    """The entry under ``names`` (:func:`config_value`) read by :func:`entry_name`; None
    where there is none, or it is neither text nor a mapping."""
    hit = config_value(config, names)
    return None if hit is None else _named(hit[0], hit[1])


def _named(value: Any, at: str) -> NamedEntry | None:
    """``value`` (recorded at ``at``) read by :func:`entry_name`; a mapping that names nothing
    is an entry without a name, anything else that names nothing (a number) no entry."""
    named = entry_name(value)
    if named is None:
        return NamedEntry(None, at) if isinstance(value, Mapping) else None
    return NamedEntry(named[0], f"{at}.{named[1]}" if named[1] else at)


@dataclass(frozen=True)
class OptimizerEntry:
    """Where a config records the item optimizer."""

    entry: NamedEntry
    value: Any
    """The recorded entry itself (text or mapping)."""
    at: str
    """The entry's key path (``optimizer``, ``item.optimizer``)."""
    holder: tuple[str, Mapping[str, Any]]
    """The block that holds the entry, with its key path (trailing dot; ``""``: the top level)."""


def find_optimizer(config: Mapping[str, Any] | None) -> OptimizerEntry | None:
    """The item optimizer's entry: ``item_optimizer`` anywhere, else under an optimizer key of
    a block naming the item side, else the shallowest under an optimizer key."""
    if not isinstance(config, Mapping):
        return None
    found = list(blocks(config))
    for candidates, keys in ((found, OPTIMIZER_KEYS[:1]), (_item_blocks(found), OPTIMIZER_KEYS),
                             (found, OPTIMIZER_KEYS)):
        for path, block in candidates:
            hit = own_value(block, keys)
            if hit is not None and (entry := _named(hit[0], path + hit[1])) is not None:
                return OptimizerEntry(entry, hit[0], path + hit[1], (path, block))
    return None


def _item_blocks(found: list[tuple[str, Mapping[str, Any]]]) -> list[tuple[str, Mapping[str, Any]]]:
    """The blocks whose key names the item side (:func:`item_side`), none inside a model part."""
    return [(p, b) for p, b in found if p and item_side(p[:-1].rsplit(".", 1)[-1])
            and not any(w in _MODEL_PART for key in p[:-1].split(".")[:-1] for w in _words(key))]


def optimizer_scopes(config: Mapping[str, Any] | None, entry: OptimizerEntry | None) -> list[tuple[str, Mapping[str, Any]]]:
    """The blocks whose own entries are the item optimizer's settings, most specific first:
    blocks naming the item side, the optimizer's mapping (its ``init_args`` first), and the
    block that holds the optimizer entry (the top level where nothing names one)."""
    if not isinstance(config, Mapping):
        return []
    scopes = _item_blocks(list(blocks(config)))
    if entry is not None and isinstance(entry.value, Mapping):
        inner = entry.value.get("init_args")
        if isinstance(inner, Mapping):
            scopes.append((f"{entry.at}.init_args.", inner))
        scopes.append((f"{entry.at}.", entry.value))
    scopes.append(entry.holder if entry is not None else ("", config))
    unique: dict[int, tuple[str, Mapping[str, Any]]] = {}
    for path, block in scopes:
        unique.setdefault(id(block), (path, block))
    return list(unique.values())


def scoped_value(scopes: list[tuple[str, Mapping[str, Any]]], names: tuple[str, ...]) -> tuple[Any, str] | None:
    """The first of ``names`` the scopes' own entries hold: item-side names (``item_lr``) in
    any scope before the others, then scope by scope; with its key path."""
    specific = tuple(n for n in names if n.startswith("item_"))
    for group in (specific, tuple(n for n in names if n not in specific)):
        for path, block in scopes:
            if group and (found := own_value(block, group)) is not None:
                return found[0], path + found[1]
    return None


__all__ = ["NAME_KEYS", "OPTIMIZER_KEYS", "NamedEntry", "OptimizerEntry", "blocks", "config_value", "entry_name",
           "find_optimizer", "item_side", "named_entry", "optimizer_scopes", "other_side", "own_value", "scoped_value"]
