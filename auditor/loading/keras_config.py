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
_EMBEDDINGS = ("Embedding",)


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


def _traced(name: str, layers: dict[str, dict[str, Any]]) -> tuple[str | None, str | None]:
    """(the ``UnitNormalization`` over the last axis, the ``Embedding``) the vector named
    ``name`` comes straight from, through shape-only layers: (None, table) for a table's
    rows unnormalised, (None, None) when anything else is on the way."""
    unit: str | None = None
    for _ in range(32):
        layer = layers.get(name)
        if layer is None:
            return None, None
        kind, inner = layer.get("class_name"), layer.get("config") or {}
        if kind in _EMBEDDINGS:
            return unit, name
        if kind in _NORMALISING:
            if unit is not None or inner.get("axis", -1) not in (-1, [-1]):
                return None, None
            unit = name
        elif kind not in _SHAPE_ONLY:
            return None, None
        feeding = _inbound(layer)
        if len(feeding) != 1:
            return None, None
        name = feeding[0]
    return None, None


def lambda_doubt(config: Any, where: str) -> dict[str, Any]:
    """``scoring_doubt`` when the model has ``Lambda`` layers: their function is stored as
    bytecode, which popaudit never runs, so what they do to the vectors (an L2
    normalisation, a projection) cannot be read; {} otherwise (QA Loaders F2)."""
    names = sorted({n["config"]["name"] for n in config_nodes(config) if n.get("class_name") == "Lambda"
             and isinstance(n.get("config"), dict) and isinstance(n["config"].get("name"), str)})  # fmt: skip
    if not names:
        return {}
    return {"scoring_doubt": f"its Lambda layers {', '.join(f'`{n}`' for n in names[:5])} in {where} run code "
            "popaudit does not run (a Lambda's function is stored as bytecode), so what they do to the vectors before "
            "the score cannot be read"}  # fmt: skip


def normalised_dot(config: Any, where: str) -> dict[str, Any]:
    """``scoring: cosine`` when the one ``Dot`` layer multiplies two vectors that each come
    straight from a ``UnitNormalization`` over the vector axis (cosine, written out); where
    only one input is so normalised and the other is a table's rows, ``scoring_unit_table``
    (the normalised side's Embedding layer, resolved by :func:`resolve_unit_side` once the
    tables are chosen); ``scoring_doubt`` when a normalising layer is there but not so
    placed, or a ``Lambda`` layer is there (:func:`lambda_doubt`); {} otherwise."""
    if doubt := lambda_doubt(config, where):
        return doubt
    layers = {n["config"]["name"]: n for n in config_nodes(config) if isinstance(n.get("class_name"), str)
              and isinstance(n.get("config"), dict) and isinstance(n["config"].get("name"), str)}  # fmt: skip
    dots = [n for n in layers.values() if n["class_name"] == "Dot"]
    if len(dots) == 1:
        feeding = _inbound(dots[0])
        traced = [_traced(name, layers) for name in feeding]
        units = [unit for unit, table in traced if unit and table]
        evidence = (f"its score layer `{dots[0]['config']['name']}` is a Dot of the UnitNormalization "
                    f"layer{'s' if len(units) > 1 else ''} {' and '.join(f'`{u}`' for u in units)} in {where}")  # fmt: skip
        if len(feeding) == 2 and all(table for _, table in traced) and traced[0][1] != traced[1][1]:
            if len(units) == 2:
                return {"scoring": "cosine", "scoring_evidence": evidence}
            if len(units) == 1:
                table = next(table for unit, table in traced if unit)
                return {"scoring_unit_table": table, "scoring_evidence": evidence}
    seen = [n for n, layer in layers.items() if layer["class_name"] in _NORMALISING]
    if not seen:
        return {}
    return {"scoring_doubt": f"its layers {', '.join(f'`{n}`' for n in seen[:5])} in {where} normalise vectors "
            "in a way popaudit cannot place before the score"}


def resolve_unit_side(config: dict[str, Any] | None, item_key: str, user_key: str | None) -> dict[str, Any] | None:
    """``config`` with its ``scoring_unit_table`` (one side of the Dot L2-normalised) read
    against the chosen tables, by the one rule every format follows: the item side
    normalised ranks as cosine (``scoring: cosine``, ``scoring_sides: item``); the user
    side alone ranks as dot, and beside an item bias as u·i/|u| + b_i
    (``scoring_sides: user``); a table that is neither is a ``scoring_doubt``."""
    if not config or "scoring_unit_table" not in config:
        return config
    out = dict(config)
    table = out.pop("scoring_unit_table")
    if table == item_key.split(".")[0]:
        out.update(scoring="cosine", scoring_sides="item")
    elif user_key is not None and table == user_key.split(".")[0]:
        out.pop("scoring_evidence", None)  # no cosine: the entries the ONNX reader records for the same module
        out["scoring_sides"] = "user"
    else:
        out.pop("scoring_evidence", None)
        out["scoring_doubt"] = f"its layer normalising `{table}`'s rows feeds a score popaudit cannot place"
    return out


__all__ = ["MAX_LAYERS", "MAX_NODES", "config_nodes", "lambda_doubt", "layer_classes", "normalised_dot",
           "resolve_unit_side"]
