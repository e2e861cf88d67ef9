"""Models that score with a per-item bias: the bias found, and the vectors they serve.

Matrix factorisation with biases (implicit's BPR and LMF, LightFM, cornac's BPR, the
textbook PyTorch MF ``score = u·i + b_u + b_i + μ``) ranks a user's candidates by
u·i + b_i: the user bias and the global bias add the same to every item of one user, so
they never change a list. The served vectors are implicit's own layout: the item vector
with its bias as one more column, [i, b_i], and the query with a 1 there, [q, 1], so that
every scoring of :mod:`auditor.retrieval` ranks what the model ranks (dot: u·i + b_i).
A model that scores by cosine and adds the bias (a Keras ``Dot(normalize=True)`` then an
``Add`` of a bias ``Embedding``; an ONNX graph that L2-normalises both sides, then adds the
bias; the config's ``scoring``, :mod:`auditor.loading.stand_in`) ranks by cos(u,i) + b_i,
which is exactly the dot product of [u/|u|, 1] and [i/|i|, b_i]: those are its served
vectors, the queries L2-normalised too (:func:`with_bias_column`). Where only the item side
is normalised (``scoring_sides: item``), u·i/|i| + b_i = [u, 1]·[i/|i|, b_i]; where only the
user side is (``user``), u·i/|u| + b_i = [u/|u|, 1]·[i, b_i]. A zero row
normalises to zeros, as ``F.normalize`` and Keras's ``l2_normalize`` make it.
The stored factors stay the training mechanism (the frequency–norm statistics of the
table); the served vectors' figures are reported beside them as served.

In a state dict (of every format: PyTorch, safetensors, .npz, Keras weights, a plugin's
bundle; :func:`read_state_dict_bias`, applied once by the load stage) the item bias is
recognised by name and shape only: the one floating-point tensor beside the tables that
holds one value per item row ((n,) or (n, 1), an ``nn.Embedding(n, 1)``) and whose name
says ``bias`` and not ``user``, and says ``item`` too unless the item and user tables
differ in rows (``bias_i.weight`` beside 400 items and 300 users can only be the items').
Where the file's config records a model that serves more than its tables (``model: LightGCN``)
or a score popaudit cannot place (``scoring_doubt``), u·i + b_i stands in, said (:func:`unplaced`).
A file with other item-side tensors (a projection, an MLP) keeps its stand-in warning
(:mod:`auditor.loading.stand_in`), as does a per-item tensor whose role the names cannot
establish. A graph (ONNX) shows the role instead of the names: its reader serves a bias
only where the graph adds it to the score (:mod:`auditor.loading.onnx_graph`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from auditor.errors import ModelLoadError, setting
from auditor.loading.padding_rows import without_padding
from auditor.loading.recbole_models import Serving, recorded_remedy, recorded_serving
from auditor.loading.served import ServedVectors
from auditor.model import ModelBundle, QueryPopulation, is_weight

if TYPE_CHECKING:
    import torch

BIASED = "bias"
"""The served vectors' ``source`` (and the serving's kind) of a model with an item bias."""

BIAS_NOTE = (
    "{path} has an item bias term ({n} values, from `{key}`): a second channel for popularity beside the "
    "embedding norms; retrieval serves as the model scores, {scores}, and the norms audited are of the factors alone"
)
"""The load warning of every model read with an item bias."""

BIAS_UNPLACED = (
    "{path} has an item bias term ({n} values, from `{key}`): a second channel for popularity beside the "
    "embedding norms; popaudit cannot place the model's score, so the figures are of u·i + b_i standing in for it "
    "(the stored tables with this bias, not bare tables: the bias is part of the score whatever the rest is), and the "
    "norms audited are of the factors alone"
)
"""The load warning of a model with an item bias whose score popaudit cannot place (the
config's ``scoring_doubt``): :func:`biased_vectors` serves u·i + b_i as a stand-in."""

HOW = (
    "the dot product of its factors plus a per-item bias (u·i + b_i; a user or global bias changes no user's "
    "ranking)"
)
DOT_SCORES = "the item factors plus this bias (u·i + b_i)"
"""BIAS_NOTE's ``scores`` of a model scoring by dot product (a framework's MF model)."""
HOW_COSINE = "the cosine of its factors plus a per-item bias (cos(u,i) + b_i; a user or global bias changes no user's ranking)"
HOW_ITEM_UNIT = "the dot product of its factors, the item's L2-normalised, plus a per-item bias (u·i/|i| + b_i)"


def _normalised_sides(bundle: ModelBundle) -> tuple[bool, bool]:
    """(items, users): which sides the model L2-normalises before its score, from the
    config's ``scoring`` (``cosine``) and ``scoring_sides`` (``item``: the item side only;
    anything else: both, as ``Dot(normalize=True)`` does)."""
    config = bundle.config or {}
    if config.get("scoring") != "cosine":  # a user side normalised alone ranks as dot, but not beside a bias
        return False, config.get("scoring_sides") == "user"
    return True, config.get("scoring_sides") != "item"


def _scores(items: bool, users: bool) -> str:
    """The model's score in words, by the sides it normalises."""
    if items and users:
        return "the cosine of the factors plus this bias (cos(u,i) + b_i)"
    if items:
        return "the user factors times the L2-normalised item factors plus this bias (u·i/|i| + b_i)"
    if users:
        return "the L2-normalised user factors times the item factors plus this bias (u·i/|u| + b_i)"
    return DOT_SCORES


def unit_rows(table: np.ndarray) -> np.ndarray:
    """``table``'s rows L2-normalised (float32; a zero row stays zero, as F.normalize leaves it)."""
    norms = np.linalg.norm(table, axis=1, keepdims=True).astype(np.float32)
    return np.divide(table, norms, out=np.zeros(table.shape, np.float32), where=norms > 0)


def one_per_item(tensor: object, n_items: int) -> bool:
    """True for a real floating-point tensor holding one value per item row ((n,) or (n, 1))."""
    shape = tuple(getattr(tensor, "shape", ()))
    complex_ = bool(getattr(tensor, "is_complex", lambda: False)())
    return shape in ((n_items,), (n_items, 1)) and is_weight(tensor) and not complex_


def _names_item_bias(key: str, n_items: int, n_users: int | None) -> bool:
    """The name says an item's bias (module docstring): ``bias`` and not ``user``, and
    ``item`` unless the tables' row counts already tell the towers apart."""
    name = key.lower()
    return "bias" in name and "user" not in name and ("item" in name or n_users != n_items)


def state_dict_bias(
    tensors: Mapping[str, torch.Tensor], item_key: str | None, user_key: str | None, n_items: int,
    n_users: int | None = None,
) -> str | None:
    """The key of a state dict's item bias (module docstring), or None when there is none,
    several could be, or the item tower holds more than its table and that bias. Beside an
    item table read as a linear layer over one-hot ids (dim × n), a ``Linear(n, 1)`` bias's
    (1, n) weight is one value per item too.
    ``n_users``: the user table's rows (None: no user table)."""
    others = [k for k in tensors if k not in (item_key, user_key)]
    table = tuple(getattr(tensors.get(item_key or ""), "shape", ()))
    linear = len(table) == 2 and table[1] == n_items != table[0]  # the item layer is a Linear over one-hot ids
    found = [k for k in others if _names_item_bias(k, n_items, n_users) and (one_per_item(tensors[k], n_items) or (
        linear and tuple(tensors[k].shape) == (1, n_items) and is_weight(tensors[k])))]  # Linear(n, 1): (1, n)
    if len(found) != 1:
        return None
    item_side = [k for k in others if k != found[0] and "item" in k.lower() and is_weight(tensors[k])]
    return None if item_side else found[0]  # an item MLP beside it: the table stands in, said


def read_state_dict_bias(bundle: ModelBundle) -> None:
    """Set ``bundle``'s item bias from its state dict when it has one (module docstring);
    nothing for a bundle whose reader set it already, a RecBole checkpoint (its models
    have none) or a graph (whose reader reads the bias's role from the graph)."""
    if bundle.item_biases is not None or bundle.format == "recbole" or bundle.graph_ops is not None:
        return
    n_users = None if bundle.user_table is None else int(bundle.user_table.shape[0])
    tensors = without_padding(bundle.state_dict, bundle)  # a bias of the padded input drops the padding row too
    key = state_dict_bias(tensors, bundle.item_key, bundle.user_key, bundle.n_items, n_users)
    if key is None or _misaligned(bundle, key):
        return
    import torch  # a state dict's bundle: torch is loaded already

    set_item_bias(bundle, key, tensors[key].detach().to(torch.float64).reshape(-1).numpy())


def _misaligned(bundle: ModelBundle, key: str) -> bool:
    """True, said, for a bias of one row per kept item beside a table whose padding row (Keras
    mask_zero, padding_idx) was not its last: the model looks id r up in row r of both, so
    bias row r is not id r's once the table's padding row goes (and the last id has no bias
    row). Which alignment the model meant cannot be known: the bias is left out (the table
    stands in, its item-side tensor ignored), never paired silently (QA Loaders N4)."""
    row = bundle.item_padding_row
    if row is None or row == bundle.n_items or tuple(bundle.state_dict[key].shape)[0] != bundle.n_items:
        return False
    bundle.warnings.append(
        f"{bundle.source}: the item bias `{key}` has {bundle.n_items:,} rows, but the item table `{bundle.item_key}` has "
        f"{bundle.n_items + 1:,}, row {row} its padding (mask) row, left out: the model looks each id up in the same row of "
        f"both, so past row {row} the bias rows do not line up with the table's ids (id {bundle.n_items} has no bias row); "
        f"the bias is left out of the figures. Save the bias with the table's {bundle.n_items + 1:,} "
        "rows (an Embedding of the same input_dim) to have it served"
    )
    return True


def set_item_bias(bundle: ModelBundle, key: str, values: np.ndarray) -> None:
    """Record ``values`` (one per item row) as ``bundle``'s item bias read from ``key``, said."""
    bundle.item_biases = np.ascontiguousarray(np.asarray(values).reshape(-1), dtype=np.float32)
    bundle.item_bias_key = key
    if unplaced(bundle.config) is not None:  # the one policy of biased_vectors: u·i + b_i stands in
        bundle.warnings.append(BIAS_UNPLACED.format(path=bundle.source, n=bundle.n_items, key=key))
        return
    scores = _scores(*_normalised_sides(bundle))
    bundle.warnings.append(BIAS_NOTE.format(path=bundle.source, n=bundle.n_items, key=key, scores=scores))


def biased_vectors(bundle: ModelBundle) -> ServedVectors | None:
    """The vectors a model with an item bias serves (None: it has none): [i, b_i] per item,
    [u, 1] per user-table row, each side L2-normalised first where the model scores by
    cosine (module docstring). ModelLoadError when a bias is not finite. Where the config's
    ``scoring_doubt`` says the score cannot be placed, u·i + b_i stands in, said first
    (:func:`_doubted`): the bias is known to enter the score, bare tables would drop it."""
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
    unit_items, unit_users = _normalised_sides(bundle)
    factors = unit_rows(bundle.item_table) if unit_items else bundle.item_table
    items = np.hstack([factors, biases.reshape(-1, 1)]).astype(np.float32, copy=False)
    users = None
    if bundle.user_table is not None:
        queries = unit_rows(bundle.user_table) if unit_users else bundle.user_table
        users = np.hstack([queries, np.ones((bundle.user_table.shape[0], 1), np.float32)])
    config = bundle.config or {}
    name = config.get("model_class") or config.get("model") or config.get("library")
    model = name if isinstance(name, str) and name else f"the model in {bundle.source.name}"
    table = f"`{bundle.item_key}`" if bundle.item_key else "the item table"
    item_words = "L2-normalised, " if unit_items else ""
    query_words = "L2-normalised " if unit_users else ""
    score = {(True, True): "cos(u,i) + b_i", (True, False): "u·i/|i| + b_i", (False, True): "u·i/|u| + b_i"}.get(
        (unit_items, unit_users), "u·i + b_i")
    how = {(True, True): HOW_COSINE, (True, False): HOW_ITEM_UNIT}.get((unit_items, unit_users), HOW)
    doubt = unplaced(config)
    doubted = doubt is not None
    equal = f"{score}, in place of a score popaudit cannot place" if doubted else f"the model's own scores, {score}"
    description = (
        f"the item factors {table}, {item_words}with the item bias `{key}` as one more column, each {query_words}query "
        f"with a 1 there: dot products of these are {equal}"
    )
    served = ServedVectors(users, items, "dot", BIASED, description, Serving(model, BIASED, how), unit_queries=unit_users,
                           score=score)
    return _doubted(served, model, doubt, recorded_serving(config)) if doubt is not None else served


def unplaced(config: Mapping[str, Any] | None) -> str | None:
    """Why the stored tables with the item bias (u·i + b_i) only stand in for the model's score,
    from what its file records: its config names a model that serves more than its tables
    (:func:`~auditor.loading.recbole_models.recorded_serving`, the rule by which the bare
    tables stand in too, ``model: LightGCN``), or the score cannot be placed (the config's
    ``scoring_doubt``: a cosine flag, a normalisation popaudit cannot place); None: placed."""
    recorded = recorded_serving(config)
    if recorded is not None:
        return f"its config records {recorded.model}, which scores with {recorded.how}"
    doubt = (config or {}).get("scoring_doubt")
    return doubt if isinstance(doubt, str) and doubt else None


def _doubted(served: ServedVectors, model: str, doubt: str, recorded: Serving | None) -> ServedVectors:
    """``served`` (u·i + b_i) standing in for a bias model whose score popaudit cannot place
    (:func:`unplaced`), said first; the bias kept: it is part of the score whatever the rest is."""
    stands = f"{served.score} (the stored tables with the item bias) stands in for the score of {model}: {doubt}"
    note = f"{stands}, not its stored tables; {recorded_remedy(recorded)}" if recorded is not None else (
        f"{stands}, so it may score otherwise, by cosine (cos(u,i) + b_i: its own lists would then differ from the "
        f"'dot' column); to audit what it serves, give a plugin that loads the model ({setting('plugins')}), or save "
        "its towers' outputs for every row as the tables of a plain file"
    )
    return replace(served, doubt=doubt, warnings=[note, *served.warnings])


def is_biased(served: ServedVectors | None) -> bool:
    """True when ``served`` are a bias model's served vectors (queries need the bias's 1)."""
    return served is not None and served.source == BIASED


def with_bias_column(population: QueryPopulation, served: ServedVectors) -> QueryPopulation:
    """``population``'s queries q as the served [q, 1] (module docstring): what the model
    adds to q·i is the item's bias, for user rows, history means and query files alike;
    [q/|q|, 1] where ``served`` normalises its queries (a model scoring cos(u,i) + b_i)."""
    ones = np.ones((population.n_queries, 1), dtype=np.float32)
    queries = unit_rows(population.vectors) if served.unit_queries else population.vectors
    return replace(population, vectors=np.hstack([queries, ones]))


__all__ = ["BIASED", "BIAS_NOTE", "DOT_SCORES", "biased_vectors", "unit_rows", "is_biased", "one_per_item", "read_state_dict_bias",
           "set_item_bias", "state_dict_bias", "unplaced", "with_bias_column"]
