"""Baseline two-tower training for ``popaudit retrain`` and ``popaudit experiment``.

Submodules: :mod:`~auditor.train.data` (synthetic and file data),
:mod:`~auditor.train.models` (encoders), :mod:`~auditor.train.losses`,
:mod:`~auditor.train.optim`, :mod:`~auditor.train.loop` (training and the
checkpoint), :mod:`~auditor.train.live` (the live model ``check`` probes),
:mod:`~auditor.train.split` (held-out interactions),
:mod:`~auditor.train.experiments` (the grids of docs/theory.md §7, run in parallel by
:mod:`~auditor.train.grid`; the mitigations grid is :mod:`auditor.mitigation.experiment`).

This package's own module holds only the option names, so the CLI can list them
without importing torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from auditor.errors import setting

ITEM_ENCODERS = ("embedding", "onehot-linear", "dense-linear", "embedding-linear", "mlp")
ENCODER_VIOLATES: dict[str, tuple[str, ...]] = {
    "embedding": (), "onehot-linear": (), "dense-linear": ("C3",), "embedding-linear": ("C2", "C3"),
    "mlp": ("C2", "C3"),
}
"""The sufficient conditions each item encoder breaks (:mod:`auditor.train.models`), as
``check``'s probes find them on its checkpoints: a shared weight breaks C3, a map that is
not linear in its parameters C2 (and its shared layers C3 too)."""
USER_ENCODERS = ("embedding", "mlp", "transformer")
LOSSES = ("infonce-cos", "infonce-dot", "cosine")
OPTIMIZERS = ("sgd", "momentum", "adam", "adamw")
CONDITION_SETTINGS = (
    "reference", "momentum", "adam", "weight-decay", "mlp", "embedding-linear", "dense-linear", "infonce-dot",
    "low-lr", "asymmetric",
)
"""The rows of ``experiment conditions`` by name (:func:`auditor.train.experiments.condition_settings`)."""
MITIGATION_SETTINGS = ("reference", "logq", "weight-decay", "adam")
"""The trained models of ``experiment mitigations`` by name (``auditor.mitigation.experiment``)."""
SOFTMAX_LOSSES = ("infonce-cos", "infonce-dot")
HIDDEN_ENCODERS = ("embedding-linear", "mlp", "transformer")
"""The towers with a hidden layer (item embedding-linear and mlp, user mlp and transformer)."""
HISTORY_ENCODERS = ("transformer",)
"""The user towers over each user's recent items (:mod:`auditor.train.models` ``NEEDS_HISTORIES``)."""
TRANSFORMER_HEADS = 2
"""Attention heads of the transformer user tower (``TrainConfig.n_heads``; no option sets it)."""


def hidden_width_problem(user_encoder: str, hidden_dim: int, n_heads: int = TRANSFORMER_HEADS) -> str | None:
    """Why ``hidden_dim`` cannot be the transformer user tower's width (its heads split it
    evenly), or None: what follows the width's name in the error, in one place."""
    if user_encoder not in HISTORY_ENCODERS or hidden_dim % n_heads == 0:
        return None
    return (f"{hidden_dim} cannot be split among the transformer user tower's {n_heads} attention heads: give a "
            f"multiple of {n_heads}")


@dataclass(frozen=True)
class Applies:
    """When a training option does something: one of ``settings`` takes one of ``values``
    (``values`` empty: one of ``settings`` is given at all, e.g. an ``--alert``)."""

    settings: tuple[str, ...]
    values: tuple[str, ...]
    why: str
    """What follows the option's flag in the usage error (``{setting}`` fields filled in with
    the settings' values, ``{setting_flag}`` with how the front end names them)."""


OPTION_APPLIES: dict[str, Applies] = {
    "temperature": Applies(("loss",), SOFTMAX_LOSSES, "applies to the InfoNCE losses (infonce-cos, infonce-dot); "
                           "{loss_flag} {loss} is pointwise and has no temperature"),
    "logq": Applies(("loss",), SOFTMAX_LOSSES, "corrects in-batch softmax logits: use it with {loss_flag} infonce-cos or "
                    "infonce-dot, not {loss} (pointwise, no softmax)"),
    "momentum": Applies(("optimizer", "user_optimizer"), ("momentum",),
                        "is the momentum of the 'momentum' optimizer, which neither tower uses ({optimizer_flag} "
                        "{optimizer}, {user_optimizer_flag} {user_optimizer}): pass {optimizer_flag} momentum or "
                        "{user_optimizer_flag} momentum"),
    "hidden_dim": Applies(("item_encoder", "user_encoder"), HIDDEN_ENCODERS,
                          "is the hidden width of the embedding-linear and mlp item towers and the mlp and "
                          "transformer user towers; {item_encoder_flag} {item_encoder} and {user_encoder_flag} {user_encoder} "
                          "have no hidden layer"),
    "history_length": Applies(("user_encoder",), HISTORY_ENCODERS,
                              "is the number of recent items the transformer user tower reads; {user_encoder_flag} "
                              "{user_encoder} reads none"),
    "on_alert": Applies(("alerts",), (), "says what a training alert does when it fires, and no {alerts_flag} is given"),
}
"""Which ``retrain`` option applies to which settings, in one place: an option given where
it does nothing is a usage error naming it and why (``auditor.cli._training``).
``--trace-every`` is not here: without ``--trace`` it still sets which steps the
checkpoint's epoch trace measures update angles around (0: none, NaN angles)."""


def inapplicable(option: str, settings: dict[str, object]) -> str | None:
    """Why ``option`` does nothing with ``settings`` (None: it applies, or is always used).
    ``user_optimizer`` None means the item tower's optimizer."""
    rule = OPTION_APPLIES.get(option)
    if rule is None:
        return None
    values = {**settings, "user_optimizer": settings.get("user_optimizer") or settings.get("optimizer")}
    if any(values.get(name) in rule.values if rule.values else values.get(name) for name in rule.settings):
        return None
    return rule.why.format(**{name: values.get(name) for name in rule.settings},
                           **{f"{name}_flag": setting(name) for name in rule.settings})


EXPERIMENTS = ("conditions", "lr-sweep", "mitigations")
SPLITS = ("auto", "time", "random")


def default_lr(optimizer: str, loss: str) -> float:
    """The learning rate used when none is given.

    High for SGD on a cosine loss (10: the exposed baseline of docs/theory.md §2, C5), 1
    for SGD on dot-product InfoNCE (unnormalised logits diverge at 10), 0.01 for Adam
    and AdamW (whose steps are about lr per coordinate whatever the gradient's scale).
    """
    if optimizer in ("adam", "adamw"):
        return 0.01
    if loss == "infonce-dot":
        return 1.0
    return 10.0
