"""Models that score with a per-item bias: the bias found, and the vectors they serve.

Matrix factorisation with biases (implicit's BPR and LMF, LightFM, cornac's BPR, the
textbook PyTorch MF ``score = u·i + b_u + b_i + μ``) ranks a user's candidates by
u·i + b_i: the user bias and the global bias add the same to every item of one user, so
they never change a list. The served vectors are implicit's own layout: the item vector
with its bias as one more column, [i, b_i], and the query with a 1 there, [q, 1], so that
every scoring of :mod:`auditor.retrieval` ranks what the model ranks (dot: u·i + b_i).
The stored factors stay the training mechanism (the frequency–norm statistics of the
table); the served vectors' figures are reported beside them as served.

In a state dict the item bias is recognised by name and shape only: the one tensor beside
the tables that names ``item`` and ``bias`` and holds one value per item row ((n,) or
(n, 1), an ``nn.Embedding(n, 1)``). A file with other item-side tensors (a projection, an
MLP) keeps its stand-in warning (:func:`auditor.loading.served.encoder_not_run`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from auditor.errors import ModelLoadError
from auditor.loading.recbole_models import Serving
from auditor.loading.served import ServedVectors
from auditor.model import ModelBundle, QueryPopulation, is_weight

if TYPE_CHECKING:
    import torch

BIASED = "bias"
"""The served vectors' ``source`` (and the serving's kind) of a model with an item bias."""

BIAS_NOTE = (
    "{path} has an item bias term ({n} values, from `{key}`): a second channel for popularity beside the "
    "embedding norms; retrieval serves as the model scores, the item factors plus this bias (u·i + b_i), and the "
    "norms audited are of the factors alone"
)
"""The load warning of every model read with an item bias."""

HOW = (
    "the dot product of its factors plus a per-item bias (u·i + b_i; a user or global bias changes no user's "
    "ranking)"
)


def state_dict_bias(
    tensors: Mapping[str, torch.Tensor], item_key: str | None, user_key: str | None, n_items: int
) -> str | None:
    """The key of a state dict's item bias (module docstring), or None when there is none
    or the item tower holds more than its table and that bias."""
    others = [k for k in tensors if k not in (item_key, user_key)]
    item_side = [k for k in others if "item" in k.lower() and is_weight(tensors[k])]  # as ModelBundle counts them
    if len(item_side) != 1 or "bias" not in item_side[0].lower():
        return None
    tensor = tensors[item_side[0]]
    one_per_row = tuple(tensor.shape) in ((n_items,), (n_items, 1))
    return item_side[0] if one_per_row and tensor.is_floating_point() and not tensor.is_complex() else None


def read_state_dict_bias(bundle: ModelBundle) -> None:
    """Set ``bundle``'s item bias from its state dict when it has one (module docstring)."""
    key = state_dict_bias(bundle.state_dict, bundle.item_key, bundle.user_key, bundle.n_items)
    if key is None:
        return
    import torch  # a state dict's bundle: torch is loaded already

    values = bundle.state_dict[key].detach().to(torch.float64).reshape(-1).numpy()
    bundle.item_biases = np.ascontiguousarray(values, dtype=np.float32)
    bundle.item_bias_key = key
    bundle.warnings.append(BIAS_NOTE.format(path=bundle.source, n=bundle.n_items, key=key))


def biased_vectors(bundle: ModelBundle) -> ServedVectors | None:
    """The vectors a model with an item bias serves (None: it has none): [i, b_i] per item,
    [u, 1] per user-table row (module docstring). ModelLoadError when a bias is not finite."""
    biases = bundle.item_biases
    if biases is None or biases.shape[0] != bundle.n_items:
        return None
    key = bundle.item_bias_key or "its item biases"
    bad = np.flatnonzero(~np.isfinite(biases))
    if bad.size:
        rows = ", ".join(str(int(r)) for r in bad[:5]) + (" and more" if bad.size > 5 else "")
        raise ModelLoadError(
            f"{bundle.source}: the item bias `{key}` holds {bad.size:,} non-finite values (NaN or inf; rows {rows}), "
            "which every score of those items would carry"
        )
    items = np.hstack([bundle.item_table, biases.reshape(-1, 1)]).astype(np.float32, copy=False)
    users = None
    if bundle.user_table is not None:
        users = np.hstack([bundle.user_table, np.ones((bundle.user_table.shape[0], 1), np.float32)])
    config = bundle.config or {}
    name = config.get("model_class") or config.get("model") or config.get("library")
    model = name if isinstance(name, str) and name else f"the model in {bundle.source.name}"
    table = f"`{bundle.item_key}`" if bundle.item_key else "the item table"
    description = (
        f"the item factors {table} with the item bias `{key}` as one more column, each query with a 1 there: "
        "dot products of these are the model's own scores, u·i + b_i"
    )
    return ServedVectors(users, items, "dot", BIASED, description, Serving(model, BIASED, HOW))


def is_biased(served: ServedVectors | None) -> bool:
    """True when ``served`` are a bias model's served vectors (queries need the bias's 1)."""
    return served is not None and served.source == BIASED


def with_bias_column(population: QueryPopulation) -> QueryPopulation:
    """``population``'s queries q as the served [q, 1] (module docstring): what the model
    adds to q·i is the item's bias, for user rows, history means and query files alike."""
    ones = np.ones((population.n_queries, 1), dtype=np.float32)
    return replace(population, vectors=np.hstack([population.vectors, ones]))


__all__ = ["BIASED", "BIAS_NOTE", "biased_vectors", "is_biased", "read_state_dict_bias", "state_dict_bias",
           "with_bias_column"]
