"""A ``.keras`` archive's ``config.json`` walked: every nested layer record, in one bounded walk.

The config is a JSON tree of any depth (functional models nest layers in layers), read from
a file anyone may hand over; every question the Keras reader asks of it (which layers are
Embeddings with ``mask_zero``, each layer's class, the score layer) walks it here, with an
explicit stack (no recursion limit to hit) and at most :data:`MAX_NODES` nodes visited.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

MAX_NODES = 1_000_000
"""Nodes a walk visits at most: far beyond any real model's config, bounded against a crafted one."""
MAX_LAYERS = 100_000
"""Layer names :func:`layer_classes` records at most."""


def config_nodes(config: Any) -> Iterator[dict[str, Any]]:
    """Every dict nested in ``config`` (lists and dict values followed; at most :data:`MAX_NODES` visited)."""
    stack, seen = [config], 0
    while stack and seen < MAX_NODES:
        node, seen = stack.pop(), seen + 1
        if isinstance(node, dict):
            yield node
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def layer_classes(config: Any) -> dict[str, str]:
    """Layer name -> class name, from every nested ``{"class_name", "config": {"name"}}``
    (the first record of a name the walk meets wins)."""
    found: dict[str, str] = {}
    for node in config_nodes(config):
        inner = node.get("config")
        if isinstance(node.get("class_name"), str) and isinstance(inner, dict) and isinstance(inner.get("name"), str):
            found.setdefault(inner["name"], node["class_name"])
            if len(found) >= MAX_LAYERS:
                break
    return found


__all__ = ["MAX_LAYERS", "MAX_NODES", "config_nodes", "layer_classes"]
