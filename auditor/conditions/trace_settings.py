"""A training trace against the training settings the user declared (``--loss``, ``--lr``,
``--optimizer``): a trace whose own config contradicts them is another run's.

The load stage compares the trace with what the checkpoint records
(:mod:`auditor.loading.trace_input`); a bare table records nothing, and then the
declaration is what the audit takes for the model's settings, so a trace that records
another loss kind, learning rate or optimizer is evidence of another run (typical of a sweep
sharing one seed, whose runs all stay near the same initialisation, so that the end-ρ check
cannot tell them apart). It is flagged, as every trace of another model is: its angles,
growth and settings are then no evidence for C1, C4 or C5 (docs/monitor.md). Here in the
judge layer because the loss's kind is C4's one rule (:func:`~auditor.conditions.c4_loss.classify_loss`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from auditor.conditions.c4_loss import classify_loss
from auditor.conditions.facts import read_config
from auditor.config import DeclaredTraining
from auditor.errors import setting
from auditor.loading.trace_input import LR_TOLERANCE, flag
from auditor.optimizers import normalise_optimizer, optimizer_family
from auditor.trace_section import TrainingSection

def check_declared(
    training: TrainingSection, declared: DeclaredTraining, recorded: Mapping[str, Any] | None,
    has_optimizer_state: bool, warnings: list[str],
) -> TrainingSection:
    """``training`` flagged as another model's when its config contradicts a declared setting
    that the checkpoint does not record itself (``recorded``: the checkpoint's config;
    where it records the setting, the file wins and the load stage compared the trace with it)."""
    if not training.matches_model:
        return training
    found = contradiction(training, declared, recorded, has_optimizer_state)
    return training if found is None else flag(training, found, warnings)


def contradiction(
    training: TrainingSection, declared: DeclaredTraining, recorded: Mapping[str, Any] | None,
    has_optimizer_state: bool,
) -> str | None:
    """Which declared setting the trace records otherwise (None: none): the loss's kind
    (cosine against dot product, by C4's rule; two names of one kind agree), the learning
    rate, the optimizer family (Adam and AdamW alike)."""
    file = read_config(recorded)
    if declared.loss and training.recorded_loss and file.loss is None:
        ours, theirs = classify_loss(declared.loss)[0], classify_loss(training.recorded_loss)[0]
        if {ours, theirs} == {"holds", "violated"}:
            return (f"the trace's config records the loss {training.recorded_loss!r}, {setting('loss')} declares "
                    f"{declared.loss!r} (one scores by cosine, the other not)")
    if declared.lr is not None and training.recorded_lr is not None and file.lr is None \
            and not math.isclose(declared.lr, training.recorded_lr, rel_tol=LR_TOLERANCE):
        return (f"the trace's config records the learning rate {training.recorded_lr:g}, {setting('lr')} declares "
                f"{declared.lr:g}")
    kind = normalise_optimizer(declared.optimizer)[0] if declared.optimizer else None
    run = training.last_optimizer  # the declaration describes the model, of the trace's last run
    if kind and run and file.optimizer is None and not has_optimizer_state \
            and optimizer_family(kind) != optimizer_family(run):
        last = "run" if training.runs == 1 else f"last run (of {training.runs})"
        return f"the trace's {last} used {run}, {setting('optimizer')} declares {kind}"
    return None
