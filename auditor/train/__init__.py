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
