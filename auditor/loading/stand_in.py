"""What a model serves beyond its stored tables, where no loader or plugin runs its towers.

A checkpoint whose item tower has tensors beside its id table (a feature projection, an
item MLP), or whose user tower maps its id rows through more than the table, serves other
vectors than the stored rows; so does an ONNX graph with nodes between a table's
``Gather`` and the score (:attr:`ModelBundle.graph_ops`). popaudit cannot run them, so the
stored table stands in and the audit says so first (:func:`tables_stand_in`). A model that
compares its vectors by cosine (a Keras ``Dot(normalize=True)`` score layer, an ONNX graph
that L2-normalises the item side; the config's ``scoring``) serves the stored tables by
cosine: its own lists are the ``cosine`` scoring, as for RecBole's SimpleX.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from auditor.errors import setting
from auditor.loading.item_bias import one_per_item
from auditor.loading.recbole_models import (
    OTHER, TABLES, Serving, not_served_warning, recorded_remedy, recorded_serving,
)
from auditor.loading.served import ServedVectors
from auditor.model import ModelBundle, is_weight

SHOWN = 5
"""Tensors or nodes named in a warning before the rest are counted."""


@dataclass(frozen=True)
class Beyond:
    """What the file computes from one table's rows besides looking them up, in words."""

    what: str
    """``the checkpoint's item-side tensors `a`, `b``` or the graph's nodes."""
    encoder: str
    """The same as part of the model (``an item encoder with ...``)."""
    certain: bool = True
    """The tensors are the tower's (False: they name neither tower, but can be its layers)."""


def cosine_note(model: str) -> str:
    """The warning that a model scores by cosine, so its own lists are the ``cosine`` scoring."""
    return (
        f"{model} scores by cosine: its own lists are the 'cosine' scoring; the 'dot' figures (and the verdict's "
        "skew, dot against cosine) describe serving the same vectors by dot product instead"
    )


def _listed(names: list[str] | tuple[str, ...], quote: bool = True) -> str:
    shown = [f"`{n}`" if quote else n for n in names[:SHOWN]]
    return ", ".join(shown) + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")


def _beyond(bundle: ModelBundle, side: str) -> Beyond | None:
    """What the file computes from the ``side`` table's rows, from its graph where it has
    one, else from the tensors' names (None: nothing beyond the table)."""
    if bundle.graph_ops is not None:
        ops = bundle.graph_ops.get(side, ())
        if not ops:
            return None
        listed = _listed(ops, quote=False)
        return Beyond(f"the graph's nodes between the {side} table's Gather and the score ({listed})",
                      f"{_a(side)} tower with {listed} after its table lookup")
    names, layers = _item_side(bundle) if side == "item" else (bundle.user_side_tensors(), [])
    if names:
        listed = _listed(names)
        return Beyond(f"the checkpoint's {side}-side tensors {listed}", f"{_a(side)} tower with {listed} beside its id table")
    if layers:
        listed = _listed(layers)
        return Beyond(f"the checkpoint's tensors {listed}, which name neither tower but can be layers over the "
                      f"{bundle.dim}-wide {side} embeddings,", f"{_a(side)} tower that may apply {listed} after its "
                      "id table", certain=False)
    return None


def _item_side(bundle: ModelBundle) -> tuple[list[str], list[str]]:
    """The item-side tensors beside the table, with the unattributed ones holding a value per
    item row (a bias whose role the names cannot establish, the item bias's policy,
    :mod:`auditor.loading.item_bias`, served none, may enter every score of its item); and
    the unattributed ones that can be a layer over the embeddings (:func:`_layer_over`), which
    may be the item tower's (a neutrally named ``projection``, ``tower.0``)."""
    item_side, unclear = bundle.tensors_beside_tables()
    per_item = [k for k in unclear if one_per_item(bundle.state_dict[k], bundle.n_items)]
    return item_side + per_item, [k for k in unclear if k not in per_item and _layer_over(bundle.state_dict[k], bundle.dim)]


def _layer_over(tensor: object, dim: int) -> bool:
    """A floating-point tensor of two or more axes, one of them the embeddings' width: it can
    map a ``dim``-vector (a Linear's weight, a shared projection). A bias, a scalar (a
    temperature), a counter or a normalisation's 1-D statistics cannot, and say nothing."""
    shape = tuple(getattr(tensor, "shape", ()))
    return len(shape) >= 2 and dim in shape and is_weight(tensor) \
        and not bool(getattr(tensor, "is_complex", lambda: False)())


def _a(side: str) -> str:
    return f"an {side}" if side == "item" else f"a {side}"


def _model_name(bundle: ModelBundle) -> str:
    name = (bundle.config or {}).get("model")
    return name if isinstance(name, str) and name else f"the model in {bundle.source.name}"


def tables_stand_in(bundle: ModelBundle, users_queried: bool) -> ServedVectors | None:
    """The stored tables standing in for towers popaudit cannot run, or the tables served
    by cosine where the model scores so (None: the file shows neither, a live model was
    loaded, or the format is a plain table).

    ``users_queried``: retrieval queries the user table's rows (a query file or history
    queries do not use the user tower, so its tensors change nothing then). A popaudit
    checkpoint stores its towers' outputs for every row as its tables (``popaudit
    retrain``), so its tables are what it serves whatever its encoder: ``check`` (which runs
    its towers) and ``mitigate`` (which does not) say nothing here alike (QA Api F6)."""
    if bundle.live is not None or bundle.format in ("recbole", "npy", "parquet", "popaudit"):
        return None
    if (recorded := recorded_serving(bundle.config)) is not None:  # a graph model's tables, saved by another trainer
        return _recorded_model(bundle, recorded)
    model = _model_name(bundle)
    item = _beyond(bundle, "item")
    user = _beyond(bundle, "user") if users_queried and bundle.user_table is not None else None
    config = bundle.config or {}
    cosine = config.get("scoring") == "cosine"
    doubt = config.get("scoring_doubt")
    if isinstance(doubt, str) and doubt and not cosine:
        return _doubted(bundle, model, doubt, _stand_in(bundle, model, item, user, "dot") if item or user else None)
    if item is None and user is None:
        if not cosine:
            return None
        evidence = config.get("scoring_evidence")
        why = f" ({evidence})" if isinstance(evidence, str) and evidence else ""
        serving = Serving(model, TABLES, f"the cosine of its user and item vectors{why}", scoring="cosine")
        return ServedVectors(bundle.user_table, bundle.item_table, "cosine", "tables",
                             f"the stored tables, compared by cosine{why}", serving, [cosine_note(model)])
    return _stand_in(bundle, model, item, user, "cosine" if cosine else "dot")


def doubt_note(model: str, doubt: str) -> str:
    """The warning of a file that normalises vectors where popaudit cannot tell how they are scored."""
    return (
        f"the stored tables stand in for the vectors {model} scores: {doubt}, so it may score by cosine (its own "
        "lists would then be the 'cosine' column, not 'dot'); to audit what it serves, give a plugin that loads the "
        f"model ({setting('plugins')}), or save its towers' outputs for every row as the tables of a plain file"
    )


def _doubted(bundle: ModelBundle, model: str, doubt: str, stood: ServedVectors | None) -> ServedVectors:
    """The tables standing in, said first, where the file normalises vectors in a way
    popaudit cannot place (the config's ``scoring_doubt``): never audited as plain dot."""
    note = doubt_note(model, doubt)
    if stood is not None:  # stood in, even where layers the names do not place alone would be audited as served
        return replace(stood, warnings=[note, *stood.warnings], serving=replace(stood.serving, kind=OTHER))
    serving = Serving(model, OTHER, f"a score over normalised vectors ({doubt})")
    return ServedVectors(bundle.user_table, bundle.item_table, "dot", "tables", "the stored tables", serving, [note])


def _recorded_model(bundle: ModelBundle, serving: Serving) -> ServedVectors:
    """The stored tables standing in for a model the file's config names, which serves with
    more than them (:func:`~auditor.loading.recbole_models.recorded_serving`)."""
    warning = f"{not_served_warning(serving)} (the model its config records); {recorded_remedy(serving)}"
    return ServedVectors(bundle.user_table, bundle.item_table, serving.scoring, "tables", "the stored tables", serving,
                         [warning])


def raw_user_rows(bundle: ModelBundle, served: ServedVectors) -> ServedVectors | None:
    """``served`` (vectors popaudit rebuilt, such as an item-bias model's) with the user
    table's raw rows as queries, said, where the file's user tower computes more from them
    (None: it computes nothing more). For retrieval that queries the user rows only."""
    user = _beyond(bundle, "user") if bundle.user_table is not None else None
    if user is None:
        return None
    stood = _stand_in(bundle, _model_name(bundle), None, user, served.scoring)
    return replace(served, warnings=[*served.warnings, *stood.warnings], raw_queries=True,
                   description=f"{served.description}, queried by the raw rows of the user table (its user tower not run)")


def _stand_in(bundle: ModelBundle, model: str, item: Beyond | None, user: Beyond | None, scoring: str) -> ServedVectors:
    """The tables standing in, with one warning for each tower that is more than its table."""
    key = f"`{bundle.item_key}`" if bundle.item_key else "the item table"
    user_key = f"`{bundle.user_key}`" if bundle.user_key else "the user table"
    encoder = (bundle.config or {}).get("item_encoder")
    named = f" (the checkpoint records item_encoder {encoder!r})" if isinstance(encoder, str) and encoder else ""
    warnings: list[str] = []
    if item is not None:
        warnings.append(
            f"audited the stored id table {key} only: {item.what} are ignored, so these"
            f"{' are not' if item.certain else ', audited as the served ones, may not be'} the item vectors {model} "
            f"serves{named}; to audit those, give a plugin that loads its item encoder ({setting('plugins')})"
        )
    if user is not None:
        warnings.append(
            f"queried the raw rows of the user table {user_key}: {user.what} are ignored, so these are not the "
            f"queries {model} serves with; to audit those, save its user tower's output for every user row as the "
            f"user table of a file without the tower's other tensors, or give a plugin that loads the model "
            f"({setting('plugins')})"
        )
    if item is not None and user is not None:
        description = f"the stored id table {key}, queried by the raw rows of the user table {user_key}"
    elif item is not None:
        description = f"the stored id table {key}"
    else:
        description = f"the stored tables, queried by the raw rows of the user table {user_key}"
    how = " and ".join(b.encoder + (named if b is item else "") for b in (item, user) if b is not None)
    # Layers the names do not place (a sequence model's encoder, a shared projection) may be
    # the query side's alone: the table is audited as served, with the warning, never said
    # categorically not to be what the model serves.
    kind = TABLES if user is None and item is not None and not item.certain else OTHER
    serving = Serving(model, kind, how, scoring=scoring)
    return ServedVectors(bundle.user_table, bundle.item_table, scoring, "tables", description, serving, warnings)


__all__ = ["cosine_note", "doubt_note", "raw_user_rows", "tables_stand_in"]
