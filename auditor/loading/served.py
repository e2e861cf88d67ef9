"""The vectors a RecBole model serves with, from its checkpoint and its training part.

What each model scores with is :mod:`auditor.loading.recbole_models`' table; this module
computes it. :func:`propagated_embeddings` is light-graph propagation (LightGCN's
``forward``): E⁰ = the stored tables, E^(l+1) = Â Eˡ with Â = D^-1/2 A D^-1/2 over the
bipartite graph of the training interactions, served vectors the mean of the layers.
It runs on scipy.sparse in float32 as RecBole does (torch.sparse.mm in float32), the
layers summed in float64: memory is the sparse matrix (12 bytes per distinct training
pair, twice) and three copies of the tables. :func:`simplex_users` is SimpleX's served
user vector. :func:`read_cache` reads the ``restore_user_e``/``restore_item_e`` a
propagating model cached in the checkpoint (RecBole's test evaluation serves from it).
All tables here are without RecBole's padding row 0, rows as popaudit numbers them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from auditor.errors import EmbeddingTableError
from auditor.loading.recbole_models import CACHED, PROPAGATED, SIMPLEX, TABLES, Serving, not_served_warning, serving_of
from auditor.loading.validation import first_rows, refuse_nonfinite_users
from auditor.model import ModelBundle

if TYPE_CHECKING:
    import scipy.sparse as sp

MAX_LAYERS = 64
"""Propagation layers popaudit runs for a graph model's recorded ``n_layers`` (RecBole's
models use 1 to 4; each layer costs a pass over the training interactions): a file that
records more is not served from, as a negative count is not."""
CACHE_AGREEMENT = 1e-4
"""Largest difference between the cache and popaudit's propagation, relative to the
largest served norm, that counts as agreement (float32 sums in another order differ
by a few units in the last place; a stale cache by far more)."""


NO_CACHE_REMEDY = (
    "to audit the vectors it serves, give a checkpoint saved with that cache (RecBole caches them when it "
    "evaluates the model: train with eval_step > 0, or save after an evaluation)"
)
"""What to give when only the checkpoint's cache holds the served vectors."""
NO_LOG = "no training log was given to {0}"
"""Why nothing trains the served vectors when the audit has no log (the verb: propagate over, aggregate)."""


def normalised_adjacency(
    users: np.ndarray, items: np.ndarray, n_users: int, n_items: int, adjacency: str = "lightgcn"
) -> sp.csr_matrix:
    """The user-item block of Â (float32 CSR, n_users × n_items; the item-user block is
    its transpose), weighted as the model computes it (:mod:`~auditor.loading.recbole_models`).

    ``lightgcn``: one edge per distinct pair, (deg_u + 1e-7)^-1/2 (deg_i + 1e-7)^-1/2 in
    float64, stored as float32. ``sgl``: repeated pairs counted, all in float32.
    ``pyg``: repeated pairs as parallel edges, deg^-1/2 in float32, no epsilon.
    """
    import scipy.sparse as sp  # only graph models propagate: a table audit skips its import

    counts = sp.csr_matrix(
        (np.ones(users.shape[0], dtype=np.float32), (np.asarray(users), np.asarray(items))),
        shape=(n_users, n_items),
    )
    counts.sum_duplicates()
    counts.sort_indices()
    row = np.repeat(np.arange(n_users), np.diff(counts.indptr))
    col = counts.indices
    if adjacency == "lightgcn":
        du = (counts.getnnz(axis=1) + 1e-7) ** -0.5
        di = (counts.getnnz(axis=0) + 1e-7) ** -0.5
        weights = (du[row] * di[col]).astype(np.float32)
    elif adjacency in ("sgl", "pyg"):
        eps = np.float32(1e-7) if adjacency == "sgl" else np.float32(0)
        du = np.asarray(counts.sum(axis=1), dtype=np.float32).ravel() + eps
        di = np.asarray(counts.sum(axis=0), dtype=np.float32).ravel() + eps
        with np.errstate(divide="ignore"):
            du, di = np.power(du, np.float32(-0.5)), np.power(di, np.float32(-0.5))
        if adjacency == "sgl":  # (d_u · a) · d_i, each product rounded to float32
            weights = (du[row] * counts.data) * di[col]
        else:  # each parallel edge d_u · d_i, summed
            weights = counts.data * (du[row] * di[col])
    else:
        raise ValueError(f"unknown adjacency {adjacency!r}")
    return sp.csr_matrix((weights.astype(np.float32), col, counts.indptr), shape=(n_users, n_items))


def propagated_embeddings(
    user_table: np.ndarray,
    item_table: np.ndarray,
    users: np.ndarray,
    items: np.ndarray,
    n_layers: int,
    *,
    adjacency: str = "lightgcn",
    first_layer: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Served (user, item) vectors, float32: the mean of layers ``first_layer``..``n_layers``
    of propagation over the training pairs (``users``, ``items``: int rows)."""
    if n_layers < first_layer or n_layers < 0 or (n_layers == 0 and first_layer > 0):
        raise ValueError(f"n_layers {n_layers} leaves no layer to average from layer {first_layer}")
    n_users, n_items = int(user_table.shape[0]), int(item_table.shape[0])
    forward = normalised_adjacency(users, items, n_users, n_items, adjacency)
    backward = forward.T.tocsr()
    backward.sort_indices()
    u = np.ascontiguousarray(user_table, dtype=np.float32)
    i = np.ascontiguousarray(item_table, dtype=np.float32)
    total_u = u.astype(np.float64) if first_layer == 0 else np.zeros(u.shape)
    total_i = i.astype(np.float64) if first_layer == 0 else np.zeros(i.shape)
    for _ in range(n_layers):
        u, i = np.asarray(forward @ i, dtype=np.float32), np.asarray(backward @ u, dtype=np.float32)
        total_u += u
        total_i += i
    count = n_layers + 1 - first_layer
    return (total_u / count).astype(np.float32), (total_i / count).astype(np.float32)


def simplex_users(
    user_table: np.ndarray,
    item_table: np.ndarray,
    users: np.ndarray,
    items: np.ndarray,
    ui_map: np.ndarray,
    gamma: float,
    history_len: int,
    padding: np.ndarray | None = None,
) -> np.ndarray:
    """SimpleX's served user vectors (``get_UI_aggregation``, mean aggregator), float32.

    History: each user's training pairs, repeats included. RecBole pads every history to
    the longest one (at most ``history_len``) with item 0, whose row ``padding`` (zero
    for SimpleX, ``padding_idx=0``) enters the sum. ValueError when a user has more than
    ``history_len`` pairs: RecBole then keeps a random subset (torch's generator).
    """
    n_users = int(user_table.shape[0])
    counts = np.bincount(np.asarray(users), minlength=n_users)
    if counts.size and int(counts.max()) > history_len:
        raise ValueError(
            f"{int((counts > history_len).sum())} users have more than history_len={history_len} training "
            "interactions; RecBole keeps a random subset of them"
        )
    import scipy.sparse as sp  # only SimpleX aggregates: a table audit skips its import

    history = sp.csr_matrix(
        (np.ones(users.shape[0]), (np.asarray(users), np.asarray(items))), shape=(n_users, int(item_table.shape[0]))
    )
    sums = np.asarray(history @ np.asarray(item_table, dtype=np.float64))
    if padding is not None and counts.size:
        width = min(history_len, int(counts.max()))
        sums += (width - counts)[:, None] * np.asarray(padding, dtype=np.float64)[None, :]
    mean = sums / (counts + 1e-10)[:, None]
    out = mean @ np.asarray(ui_map, dtype=np.float64).T  # nn.Linear without bias: x W^T
    served = gamma * np.asarray(user_table, dtype=np.float64) + (1 - gamma) * out
    return served.astype(np.float32)


@dataclass(frozen=True)
class CachedVectors:
    """``restore_user_e``/``restore_item_e`` of a checkpoint, padding row 0 dropped."""

    users: np.ndarray
    items: np.ndarray


def read_cache(path: Path) -> CachedVectors | None:
    """The served vectors a RecBole checkpoint cached (``other_parameter``), or None.

    Read by the restricted reader (no code from the file runs)."""
    import torch  # here: the served-lists audit imports this module and needs no torch

    from auditor.loading.torch_archive import read_torch_file

    root = read_torch_file(Path(path)).root
    other = root.get("other_parameter") if isinstance(root, Mapping) else None
    if not isinstance(other, Mapping):
        return None
    users, items = other.get("restore_user_e"), other.get("restore_item_e")
    tensors = (users, items)
    if not all(isinstance(t, torch.Tensor) and t.ndim == 2 and t.is_floating_point() and t.shape[0] > 1 for t in tensors):
        return None
    assert isinstance(users, torch.Tensor) and isinstance(items, torch.Tensor)
    cached = CachedVectors(users[1:].to(torch.float32).numpy().copy(), items[1:].to(torch.float32).numpy().copy())
    bad = np.flatnonzero(~np.isfinite(cached.items).all(axis=1))
    if bad.size:  # what RecBole would serve every user: no figure can stand on it
        raise EmbeddingTableError(
            f"the served item vectors cached in {path} (other_parameter restore_item_e) hold NaN or infinite values "
            f"(item-table rows {first_rows(bad)})"
        )
    return cached


@dataclass
class ServedVectors:
    """What the model serves with, as far as popaudit can tell, and what it says about it."""

    users: np.ndarray | None
    items: np.ndarray
    scoring: str
    """``dot`` or ``cosine``: how the model compares these vectors."""
    source: str
    """``tables`` (the stored tables), ``cache``, ``propagated`` or ``simplex``."""
    description: str
    serving: Serving
    warnings: list[str] = field(default_factory=list)
    raw_queries: bool = False
    """The items are served as the model serves them, but the queries are raw user-table
    rows where the model's user tower computes more (a stand-in on the query side)."""
    unit_queries: bool = False
    """Queries are L2-normalised before they meet these items (a model scoring cos(u,i) + b_i,
    :mod:`auditor.loading.item_bias`)."""
    score: str | None = None
    """A bias model's own score as a formula (``cos(u,i) + b_i``), which the dot products of
    these vectors equal; None for other models."""
    doubt: str | None = None
    """Why the model's score cannot be placed (the config's ``scoring_doubt``) where these
    vectors stand in for it all the same (a bias model's u·i + b_i): never as served."""

    @property
    def as_served(self) -> bool:
        """True when these are the vectors the model serves with (not a stand-in)."""
        return not self.raw_queries and self.doubt is None and (self.source != "tables" or self.serving.kind == TABLES)


def served_vectors(
    bundle: ModelBundle, train: tuple[np.ndarray, np.ndarray] | None, cache: CachedVectors | None = None,
    no_split: str | None = None,
) -> ServedVectors:
    """The served vectors of a RecBole ``bundle`` (format ``recbole``, padding dropped).

    ``train``: the (user rows, item rows) of the training part, needed to propagate and
    aggregate; ``cache``: :func:`read_cache` of the file. Anything popaudit cannot
    compute falls back to the stored tables with a warning naming what the model uses.
    ``no_split``: why there is no training part (None: no training log was given).
    """
    config = bundle.config or {}
    serving = serving_of(config)
    tables = ServedVectors(bundle.user_table, bundle.item_table, "dot", "tables", "the stored tables", serving)
    if serving.kind == TABLES:
        return tables
    if serving.kind in (PROPAGATED, CACHED) and cache is not None:
        return _from_cache(bundle, serving, train, cache)
    if serving.kind == PROPAGATED and train is not None and bundle.user_table is not None:
        layers = _int(config.get("n_layers"))
        if layers is not None and serving.first_layer <= layers <= MAX_LAYERS and (layers > 0 or serving.first_layer == 0):
            users, items = _propagate(bundle, serving, train, layers)
            text = f"propagated by popaudit: {serving.how}, n_layers={layers}, {len(train[0]):,} training interactions"
            return ServedVectors(users, items, "dot", "propagated", text, serving)
        tables.warnings.append(f"{not_served_warning(serving)}; its n_layers setting {config.get('n_layers')!r} is unusable"
                               f" (popaudit propagates 0 to {MAX_LAYERS} layers)")
        return tables
    if serving.kind == SIMPLEX:
        return _simplex(bundle, serving, train, tables, no_split or NO_LOG.format("aggregate"))
    why = "" if serving.kind not in (PROPAGATED, CACHED) else (
        " (the checkpoint caches no restore_user_e/restore_item_e"
        + ("" if serving.kind == CACHED or train is not None else f", and {no_split or NO_LOG.format('propagate over')}")
        + f"); {NO_CACHE_REMEDY}"
    )
    tables.warnings.append(not_served_warning(serving) + why)
    return tables


def _propagate(bundle: ModelBundle, serving: Serving, train: tuple[np.ndarray, np.ndarray], layers: int) -> tuple[np.ndarray, np.ndarray]:
    assert bundle.user_table is not None
    refuse_nonfinite_users(bundle, train[0], "the graph propagation RecBole serves with carries into the items these "
                           "users trained on")
    return propagated_embeddings(
        bundle.user_table, bundle.item_table, train[0], train[1], layers,
        adjacency=serving.adjacency, first_layer=serving.first_layer,
    )  # fmt: skip


def _from_cache(
    bundle: ModelBundle, serving: Serving, train: tuple[np.ndarray, np.ndarray] | None, cache: CachedVectors
) -> ServedVectors:
    text = "restore_user_e/restore_item_e cached in the checkpoint (the model's own forward() at its last evaluation)"
    served = ServedVectors(cache.users, cache.items, "dot", "cache", text, serving)
    layers = _int((bundle.config or {}).get("n_layers"))
    if serving.kind != PROPAGATED or train is None or bundle.user_table is None or layers is None or not (
        serving.first_layer <= layers <= MAX_LAYERS
    ):
        return served
    users, items = _propagate(bundle, serving, train, layers)
    scale = max(float(np.abs(cache.items).max(initial=0)), float(np.abs(cache.users).max(initial=0)), 1e-30)
    if users.shape != cache.users.shape or items.shape != cache.items.shape:
        served.warnings.append("the cached restore_user_e/restore_item_e do not have the tables' shapes; served from the cache")
        return served
    gap = max(float(np.abs(users - cache.users).max(initial=0)), float(np.abs(items - cache.items).max(initial=0)))
    if gap > CACHE_AGREEMENT * scale:
        served.warnings.append(
            f"the vectors cached in the checkpoint differ from popaudit's propagation of its stored tables (by up to "
            f"{gap / scale:.2g} of the largest entry): served from the cache, which RecBole's own test evaluation uses"
        )
    return served


def _simplex(
    bundle: ModelBundle, serving: Serving, train: tuple[np.ndarray, np.ndarray] | None, tables: ServedVectors,
    no_split: str,
) -> ServedVectors:
    import torch

    config = bundle.config or {}
    weight = bundle.state_dict.get("UI_map.weight")
    gamma, history_len = _float(config.get("gamma")), _int(config.get("history_len"))
    problem = (
        no_split if train is None
        else f"its aggregator {config.get('aggregator')!r} is not 'mean'" if config.get("aggregator") != "mean"
        else "its UI_map.weight, gamma or history_len is missing" if weight is None or gamma is None or history_len is None
        else "it has no user table" if bundle.user_table is None else None
    )  # fmt: skip
    if problem is None:
        assert train is not None and weight is not None and gamma is not None and history_len is not None
        assert bundle.user_table is not None
        padding = bundle.state_dict.get(bundle.item_key or "")
        pad = padding[0].to(torch.float32).numpy() if isinstance(padding, torch.Tensor) and padding.ndim == 2 else None
        try:
            users = simplex_users(bundle.user_table, bundle.item_table, train[0], train[1],
                                  weight.to(torch.float32).numpy(), gamma, history_len, pad)
        except ValueError as exc:
            problem = str(exc)
        else:
            text = f"SimpleX's user aggregation (gamma={gamma:g}, mean of the training history) with cosine scoring"
            return ServedVectors(users, bundle.item_table, "cosine", "simplex", text, serving)
    tables.warnings.append(f"{not_served_warning(serving)}; popaudit cannot rebuild its user vectors: {problem}")
    return tables


def _int(value: Any) -> int | None:
    return value if type(value) is int else None


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
