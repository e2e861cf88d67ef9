"""Padding rows a file records: not items (nor users), left out of the tables, one policy.

Keras's ``Embedding(mask_zero=True)`` reserves row 0 for the mask
(:mod:`auditor.loading.keras_mask`); PyTorch's ``nn.Embedding(n, d, padding_idx=p)``
reserves row p, zero and never trained, for padding. Both rows have no id and no
interaction: audited as an item, the row was a cold item beside the catalogue (n_items,
n_cold, ρ, coverage and the head cut all shifted). Where the file records it (Keras's
``config.json``; a TorchScript archive's ``padding_idx`` constant, a pickled module's
``padding_idx`` attribute) the row is left out and the others keep their ids, row r holding
id r (unless an id file or stored ids name them: one id per stored row, the padding's
dropped with it, or one per other row). A per-item bias of the same input (an
``Embedding(n + 1, 1)``) drops the same row (:func:`without_padding`); one of only n rows beside
a table padded before its last row does not line up with the ids and is left out, said
(:mod:`auditor.loading.item_bias`). A plain state dict
records no ``padding_idx``: its all-zero row keeps the load warning that says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from auditor.config import LoadOptions
from auditor.errors import ModelLoadError
from auditor.model import ModelBundle


Padded = dict[str, tuple[int, str, str]]
"""``item``/``user`` -> (the padding row, what records it and the mapping line), in words."""


def drop_padding_rows(bundle: ModelBundle, padded: Padded, options: LoadOptions) -> None:
    """Leave the padding row out of each chosen table ``padded`` names; the other rows keep
    their ids (unless ``options`` gives the side's id file), said in the mapping line."""
    for role, given in (("item", options.item_ids), ("user", options.user_ids)):
        table = bundle.item_table if role == "item" else bundle.user_table
        if role not in padded or table is None:
            continue
        row, words, mapping = padded[role]
        key = bundle.item_key if role == "item" else bundle.user_key
        if not 0 <= row < table.shape[0]:
            raise ModelLoadError(f"{bundle.source}: {words}, but the {role} table `{key}` has no row {row} (it has "
                                 f"{table.shape[0]:,} rows): the file contradicts itself")  # fmt: skip
        if table.shape[0] < 2:
            raise ModelLoadError(f"{bundle.source}: the {role} table `{key}` has {table.shape[0]} row, but {words}, "
                                 f"whose row {row} is padding: it holds no {role} row")  # fmt: skip
        kept = np.delete(table, row, axis=0)
        stored = bundle.item_ids if role == "item" else bundle.user_ids
        ids: np.ndarray | None
        source: str | None
        if stored is not None and len(stored) == table.shape[0]:  # ids stored per row: the padding's goes too
            ids, source = np.delete(np.asarray(stored), row), None
        elif stored is not None and len(stored) == table.shape[0] - 1:  # ids of the other rows alone, in order
            ids, source = np.asarray(stored), None
        else:
            ids = np.delete(np.arange(table.shape[0], dtype=np.int64), row) if given is None else None
            source = mapping
        if role == "item":
            bundle.item_table, bundle.item_padding_row = kept, row
            if ids is not None:
                bundle.item_ids, bundle.item_ids_source = ids, source or bundle.item_ids_source
        else:
            bundle.user_table = kept
            if ids is not None:
                bundle.user_ids, bundle.user_ids_source = ids, source or bundle.user_ids_source


def without_padding(tensors: Mapping[str, Any], bundle: ModelBundle) -> Mapping[str, Any]:
    """``tensors`` with the item table's padding row left out of each tensor holding one
    value per stored item row (an item bias of the same input); the others unchanged."""
    row = bundle.item_padding_row
    if row is None:
        return tensors
    rows = bundle.n_items + 1
    return {k: (_drop(t, row) if tuple(getattr(t, "shape", ())) in ((rows,), (rows, 1)) else t)
            for k, t in tensors.items()}  # fmt: skip


def _drop(tensor: Any, row: int) -> Any:
    import torch  # a state dict's tensors: torch is loaded already

    return torch.cat([tensor[:row], tensor[row + 1 :]])


def recorded_padding(tensors: dict[str, Any], padding: dict[str, int], item_key: str | None,
                     user_key: str | None, what: str) -> Padded:
    """The ``padded`` of :func:`drop_padding_rows` for the chosen tables, from ``padding``
    (``<module>.weight`` -> the ``padding_idx`` the file records; ``what``: the file kind)."""
    out: Padded = {}
    for role, key in (("item", item_key), ("user", user_key)):
        if key is not None and key in padding and key in tensors:
            layer, row = key.rsplit(".", 1)[0], padding[key]
            out[role] = (row, f"{what} records nn.Embedding(padding_idx={row}) for `{layer}`",
                         f"{what}'s nn.Embedding(padding_idx={row}) on `{layer}` (row = id; row {row}, the padding "
                         "index, left out)")
    return out


def pickled_padding(module: Any) -> dict[str, int]:
    """``<module>.weight`` -> ``padding_idx`` of each ``nn.Embedding`` in a pickled module
    (a restricted read's placeholder or a real module), named as ``state_dict()`` names them."""
    from auditor.loading.safe_pickle import as_mapping, placeholder_attrs

    out: dict[str, int] = {}
    stack: list[tuple[str, Any]] = [("", module)]
    seen: set[int] = set()
    while stack and len(seen) < 100_000:
        prefix, node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        attrs = placeholder_attrs(node) if placeholder_attrs(node) is not None else getattr(node, "__dict__", None)
        if not isinstance(attrs, dict):
            continue
        padding = attrs.get("padding_idx")
        if isinstance(padding, int) and not isinstance(padding, bool) and "num_embeddings" in attrs:
            out[f"{prefix}weight"] = padding
        stack.extend((f"{prefix}{name}.", child) for name, child in as_mapping(attrs.get("_modules")).items())
    return out


__all__ = ["pickled_padding", "Padded", "drop_padding_rows", "recorded_padding", "without_padding"]
