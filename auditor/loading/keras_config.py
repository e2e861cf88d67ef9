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





# ---------------------------------------------------------------------------- normalised towers (QA Loaders F2)

_SHAPE_ONLY = ("Flatten", "Reshape", "Dropout", "Identity", "InputLayer")
"""Layers that pass a vector on unchanged at serving (Dropout is the identity there)."""
_NORMALISING = ("UnitNormalization",)


def _inbound(layer: dict[str, Any]) -> list[str]:
    """The names of the layers feeding ``layer``: Keras 3's ``keras_history`` records and
    Keras 2's ``[name, node, tensor, kwargs]`` lists, in order."""
    names: list[str] = []
    stack: list[Any] = [layer.get("inbound_nodes")]
    while stack and len(names) < 16:
        node = stack.pop(0)
        if isinstance(node, dict):
            history = (node.get("config") or {}).get("keras_history") if isinstance(node.get("config"), dict) else None
            if isinstance(history, list) and history and isinstance(history[0], str):
                names.append(history[0])
            else:
                stack.extend(node.values())
        elif isinstance(node, list):
            if len(node) >= 3 and isinstance(node[0], str) and isinstance(node[1], int):
                names.append(node[0])
            else:
                stack.extend(node)
    return names


def _reaches_unit(name: str, layers: dict[str, dict[str, Any]]) -> str | None:
    """The ``UnitNormalization`` layer (over the last axis) the vector named ``name`` comes
    straight from, through shape-only layers (None: it is not normalised so)."""
    for _ in range(32):
        layer = layers.get(name)
        if layer is None:
            return None
        kind, inner = layer.get("class_name"), layer.get("config") or {}
        if kind in _NORMALISING:
            return name if inner.get("axis", -1) in (-1, [-1]) else None
        feeding = _inbound(layer)
        if kind not in _SHAPE_ONLY or len(feeding) != 1:
            return None
        name = feeding[0]
    return None


def normalised_dot(config: Any, where: str) -> dict[str, Any]:
    """``scoring: cosine`` when the one ``Dot`` layer multiplies two vectors that each come
    straight from a ``UnitNormalization`` over the vector axis (cosine, written out);
    ``scoring_doubt`` when a normalising layer (``UnitNormalization``, a ``Lambda`` whose
    recorded function names a normalisation) is there but not so placed; {} otherwise."""
    layers = {n["config"]["name"]: n for n in config_nodes(config) if isinstance(n.get("class_name"), str)
              and isinstance(n.get("config"), dict) and isinstance(n["config"].get("name"), str)}  # fmt: skip
    dots = [n for n in layers.values() if n["class_name"] == "Dot"]
    if len(dots) == 1:
        feeding = _inbound(dots[0])
        units = [_reaches_unit(name, layers) for name in feeding]
        if len(feeding) == 2 and all(units):
            shown = " and ".join(f"`{u}`" for u in units if u)
            return {"scoring": "cosine", "scoring_evidence": f"its score layer `{dots[0]['config']['name']}` is a Dot "
                    f"of the UnitNormalization layers {shown} in {where}"}  # fmt: skip
    seen = [n for n, layer in layers.items() if layer["class_name"] in _NORMALISING or (
        layer["class_name"] == "Lambda" and "normali" in str(layer.get("config")).lower())]
    if not seen:
        return {}
    return {"scoring_doubt": f"its layers {', '.join(f'`{n}`' for n in seen[:5])} in {where} normalise vectors "
            "in a way popaudit cannot place before the score"}
__all__ = ["MAX_LAYERS", "MAX_NODES", "config_nodes", "layer_classes", "normalised_dot"]
