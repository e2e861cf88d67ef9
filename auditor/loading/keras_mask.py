"""Keras ``Embedding(mask_zero=True)``: index 0 is the mask, not an item.

With ``mask_zero=True`` Keras reserves input 0 for padding ("index 0 cannot be used in the
vocabulary (input_dim should equal size of vocabulary + 1)", keras.layers.Embedding): the
ids fed to the model are 1..n and row r holds id r, while row 0 is never an item (nor
zeroed: Keras leaves it as initialised). Audited as an item, row 0 was a cold item beside
the catalogue (ρ −0.269 for −0.317); the 1-based-ids advice then shifted every item onto
its neighbour's row (−0.160). So row 0 is left out, as RecBole's padding row is, and the
rows keep the ids Keras gave them (row r → id r) unless an id file names them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from auditor.config import LoadOptions
from auditor.errors import ModelLoadError
from auditor.loading.keras_config import config_nodes
from auditor.model import ModelBundle

_EMBEDDING_CLASSES = ("Embedding", "ReversibleEmbedding")


def masked_layers(config: Any) -> set[str]:
    """Names of the ``Embedding`` layers a ``.keras`` ``config.json`` records with
    ``mask_zero: true`` (every nested ``{"class_name", "config": {"name", "mask_zero"}}``)."""
    return {
        node["config"]["name"] for node in config_nodes(config)
        if node.get("class_name") in _EMBEDDING_CLASSES and isinstance(node.get("config"), dict)
        and node["config"].get("mask_zero") is True and isinstance(node["config"].get("name"), str)
    }  # fmt: skip


def drop_mask_rows(bundle: ModelBundle, masked: set[str], options: LoadOptions) -> None:
    """Leave row 0 out of each chosen table whose layer is in ``masked``; the remaining
    rows hold ids 1..n (unless ``options`` gives the side's id file, which then names the
    rows after the mask row), said in the mapping line."""
    for role, key, given in (("item", bundle.item_key, options.item_ids), ("user", bundle.user_key, options.user_ids)):
        layer = _layer_of(key)
        table = bundle.item_table if role == "item" else bundle.user_table
        if layer not in masked or table is None:
            continue
        if table.shape[0] < 2:
            raise ModelLoadError(
                f"{bundle.source}: the {role} table `{key}` has {table.shape[0]} row, but its layer `{layer}` is an "
                "Embedding(mask_zero=True), whose row 0 is the mask: it holds no item row"
            )
        kept = table[1:]
        ids = np.arange(1, table.shape[0], dtype=np.int64) if given is None else None
        source = f"Keras's mask_zero=True on layer `{layer}` (row = id; row 0, the mask index, left out)"
        if role == "item":
            bundle.item_table = kept
            if ids is not None:
                bundle.item_ids, bundle.item_ids_source = ids, source
        else:
            bundle.user_table = kept
            if ids is not None:
                bundle.user_ids, bundle.user_ids_source = ids, source


def _layer_of(key: str | None) -> str | None:
    """The layer a table's key names: ``item_embedding`` of ``tower.item_embedding.embeddings``."""
    parts = (key or "").split(".")
    return parts[-2] if len(parts) >= 2 else None


__all__ = ["drop_mask_rows", "masked_layers"]
