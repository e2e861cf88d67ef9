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

from auditor.config import LoadOptions
from auditor.loading.keras_config import config_nodes
from auditor.loading.padding_rows import Padded, drop_padding_rows
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
    """Leave row 0 out of each chosen table whose layer is in ``masked``: the padding
    rows' one policy (:mod:`auditor.loading.padding_rows`), the remaining rows ids 1..n."""
    padded: Padded = {}
    for role, key in (("item", bundle.item_key), ("user", bundle.user_key)):
        if (layer := _layer_of(key)) in masked:
            padded[role] = (0, f"its layer `{layer}` is an Embedding(mask_zero=True)",
                            f"Keras's mask_zero=True on layer `{layer}` (row = id; row 0, the mask index, left out)")
    drop_padding_rows(bundle, padded, options)


def _layer_of(key: str | None) -> str | None:
    """The layer a table's key names: ``item_embedding`` of ``tower.item_embedding.embeddings``."""
    parts = (key or "").split(".")
    return parts[-2] if len(parts) >= 2 else None


__all__ = ["drop_mask_rows", "masked_layers"]
