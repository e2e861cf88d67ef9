"""How each RecBole model scores: the stored tables, propagated vectors, SimpleX's
aggregation, or something else (then named in the audit's warnings, never silently).

Read from the models' own code, RecBole 1.2.1 (recbole/model/general_recommender/*.py)
and RecBole-GNN (recbole_gnn/model/general_recommender/*.py):

* BPR and LINE score ``user_embedding · item_embedding`` (``full_sort_predict``).
* LightGCN and NCL serve the mean of layers 0..``n_layers`` of light-graph propagation
  over D^-1/2 A D^-1/2, A the binary user-item adjacency of the training part (a pair
  trained twice is one edge: ``get_norm_adj_mat`` fills a ``dok_matrix`` with 1s),
  degrees counting distinct neighbours, weights computed in float64 as
  (deg + 1e-7)^-1/2 on each side and stored as float32. NCL propagates
  max(n_layers, 2·hyper_layers) layers but serves the mean of the first n_layers + 1.
* SGL serves the same mean over ``create_adjust_matrix(is_sub=False)``: a ``csr_matrix``
  that sums repeated pairs (A holds counts, degrees are row sums) and normalises in
  float32 (the +1e-7 rounds to float32 too).
* RecBole-GNN's LightGCN, SimGCL and XSimGCL propagate with PyG's ``gcn_norm`` over the
  training edges (repeats kept as parallel edges, degrees counting them, no +1e-7);
  SimGCL and XSimGCL serve the mean of layers 1..n_layers (their ``embeddings_list``
  starts empty), RecBole-GNN's LightGCN of 0..n_layers. (Read from RecBole-GNN's source;
  no RecBole-GNN run is among popaudit's test data.)
* Every propagating model caches what ``forward()`` gave at its last evaluation in
  ``restore_user_e``/``restore_item_e``, saved in the checkpoint's ``other_parameter``;
  RecBole's test evaluation (``load_best_model``) serves from that cache. NGCF, DGCF and
  SpectralCF propagate through learned layers popaudit does not recompute: only their
  cache gives the served vectors.
* SimpleX scores by cosine: the user vector is γ·user_emb + (1 − γ)·UI_map(mean of the
  history's item_emb rows) (``get_UI_aggregation``, ``aggregator: mean``), the history
  being the user's training interactions, repeats included, at most ``history_len`` of
  them (a random subset beyond that).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from auditor.errors import setting

TABLES = "tables"
PROPAGATED = "propagated"
SIMPLEX = "simplex"
CACHED = "cached"
OTHER = "other"


@dataclass(frozen=True)
class Serving:
    """How one RecBole model serves its users."""

    model: str
    kind: str
    """``tables``, ``propagated``, ``simplex``, ``cached`` (only the checkpoint's cache
    holds the served vectors) or ``other`` (not dot products of vectors popaudit has)."""
    how: str
    """What the model scores with, in words (the warnings quote it)."""
    scoring: str = "dot"
    """How served vectors are compared: ``dot`` or ``cosine``."""
    adjacency: str = ""
    """propagated: ``lightgcn`` (RecBole LightGCN/NCL), ``sgl`` (RecBole SGL) or ``pyg`` (RecBole-GNN)."""
    first_layer: int = 0
    """propagated: the first layer of the served mean (0: the tables themselves)."""


_LIGHT = "the mean of layers {0}..n_layers of light-graph propagation over the training interactions"
_OWN = "vectors its forward() computes through learned {0} layers (popaudit reads them from its cache only)"
_OTHERS = {
    "NeuMF": "an MLP over concatenated user and item embeddings beside a GMF branch",
    "DMF": "the cosine of MLP-encoded user and item interaction vectors",
    "ConvNCF": "a CNN over the outer product of user and item embeddings",
    "NNCF": "CNN-encoded neighbourhoods beside the user and item embeddings",
    "ENMF": "a weighted dot product sum_k h_k u_k i_k (its H_i layer)",
    "FISM": "similarities between the candidate and the user's history items",
    "NAIS": "attention-weighted similarities between the candidate and the user's history items",
    "CDAE": "an autoencoder over the user's interaction vector",
    "MultiVAE": "a variational autoencoder over the user's interaction vector",
    "MultiDAE": "a denoising autoencoder over the user's interaction vector",
    "MacridVAE": "a disentangled variational autoencoder over the user's interaction vector",
    "RecVAE": "a variational autoencoder over the user's interaction vector",
    "RaCT": "an actor-critic autoencoder over the user's interaction vector",
    "GCMC": "graph convolutional encoders and a bilinear decoder",
    "DiffRec": "a diffusion model over the user's interaction vector",
    "LDiffRec": "a latent diffusion model over the user's interaction vector",
    "NCEPLRec": "factors computed from the interaction matrix, not the stored tables",
    "EASE": "an item-item weight matrix (no embeddings)",
    "SLIMElastic": "an item-item weight matrix (no embeddings)",
    "ADMMSLIM": "an item-item weight matrix (no embeddings)",
    "ItemKNN": "item-item neighbourhoods (no embeddings)",
    "AsymKNN": "asymmetric neighbourhoods (no embeddings)",
    "Pop": "item popularity (no embeddings)",
    "Random": "random scores",
}
SERVING: dict[str, Serving] = {
    "BPR": Serving("BPR", TABLES, "dot products of user_embedding and item_embedding"),
    "LINE": Serving("LINE", TABLES, "dot products of user_embedding and item_embedding"),
    "LightGCN": Serving("LightGCN", PROPAGATED, _LIGHT.format(0), adjacency="lightgcn"),
    "NCL": Serving("NCL", PROPAGATED, _LIGHT.format(0), adjacency="lightgcn"),
    "SGL": Serving("SGL", PROPAGATED, _LIGHT.format(0) + " (repeated pairs counted)", adjacency="sgl"),
    "SimpleX": Serving(
        "SimpleX", SIMPLEX, "the cosine of item_emb rows and users aggregated with their history (gamma, UI_map)",
        scoring="cosine",
    ),
    "NGCF": Serving("NGCF", CACHED, _OWN.format("bi-interaction GNN")),
    "DGCF": Serving("DGCF", CACHED, _OWN.format("disentangled graph")),
    "SpectralCF": Serving("SpectralCF", CACHED, _OWN.format("spectral convolution")),
    **{name: Serving(name, OTHER, how) for name, how in _OTHERS.items()},
}
"""RecBole 1.2.1's general models (``model`` setting) by how they serve."""
SERVING_GNN: dict[str, Serving] = {
    "LightGCN": Serving("LightGCN", PROPAGATED, _LIGHT.format(0) + " (RecBole-GNN, gcn_norm)", adjacency="pyg"),
    "SimGCL": Serving("SimGCL", PROPAGATED, _LIGHT.format(1) + " (RecBole-GNN, gcn_norm)", adjacency="pyg",
                      first_layer=1),
    "XSimGCL": Serving("XSimGCL", PROPAGATED, _LIGHT.format(1) + " (RecBole-GNN, gcn_norm)", adjacency="pyg",
                       first_layer=1),
}
"""RecBole-GNN's models popaudit propagates (its ``model_class`` lives in ``recbole_gnn``)."""


def serving_of(config: Mapping[str, Any]) -> Serving:
    """How the model of a RecBole run (its settings: ``model``, ``model_class``) serves."""
    name = str(config.get("model") or "")
    model_class = config.get("model_class")
    gnn = isinstance(model_class, str) and model_class.startswith("recbole_gnn.")
    if gnn:
        return SERVING_GNN.get(name) or Serving(
            name, CACHED, f"vectors RecBole-GNN's {name}.forward() computes (popaudit reads them from its cache only)"
        )
    if name in SERVING:
        return SERVING[name]
    if name in SERVING_GNN:  # SimGCL and XSimGCL exist only in RecBole-GNN
        return SERVING_GNN[name]
    return Serving(name, OTHER, f"whatever RecBole model {name or '(unnamed)'} scores with (popaudit does not know it)")


def recorded_serving(config: Mapping[str, Any] | None) -> Serving | None:
    """How a file that is no RecBole checkpoint serves, where its config records the name of
    a model this table knows to serve with more than its stored tables (``model: LightGCN``
    in a Lightning checkpoint's hyper-parameters: propagated vectors); None otherwise (no
    name, an unknown one, or one that serves its tables). The name is matched without case;
    popaudit reproduces no split of such a file, so its tables stand in, said."""
    name = (config or {}).get("model") or (config or {}).get("model_name")
    if not isinstance(name, str) or not name:
        return None
    known = {key.lower(): serving for key, serving in {**SERVING_GNN, **SERVING}.items()}
    found = known.get(name.lower())
    return None if found is None or found.kind == TABLES else found


def recorded_remedy(serving: Serving) -> str:
    """What to give to audit the vectors a model named by a non-RecBole file's config serves
    (:func:`recorded_serving`), in words."""
    return (
        f"popaudit rebuilds those only for a RecBole checkpoint with its .inter file: to audit the vectors "
        f"{serving.model} serves, save its output for every user and item (e.g. its forward() or computer() tables) "
        f"as the tables of a file without its config, or give a plugin that loads the model ({setting('plugins')})"
    )


def not_served_warning(serving: Serving, what: str = "the stored tables") -> str:
    """The warning for an audit of ``what`` when the model scores with something else."""
    return f"audited {what} by their dot products; the model ({serving.model}) scores with {serving.how}"
