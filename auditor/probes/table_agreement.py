"""Whether the item table a loader returned is what its live model encodes: the probes
and C2-C5 read ``live.encode_items``, the frequency-norm figures and retrieval read
``bundle.item_table``, so a table that is not the encoder's outputs (a plugin returning
the id embeddings alone while the tower adds features) would join figures of two models
in one report. Checked on the rows the update probe encodes anyway (at most
``n_extra_items``), in eval mode, against float32 round-off."""

from __future__ import annotations

import numpy as np
import torch

from auditor.model import LiveModel, ModelBundle
from auditor.probes.copies import module_device

RELATIVE_TOLERANCE = 1e-3
"""A row differs when ‖encoded − table‖ exceeds this share of the larger of the two norms
(float32 round-off of a deep tower is orders of magnitude below it; a stale table above)."""


def table_disagreement(live: LiveModel, module: torch.nn.Module, bundle: ModelBundle, rows: np.ndarray) -> str | None:
    """A warning when ``live.encode_items`` on ``rows`` is not ``bundle.item_table`` there
    (None when they agree, or the encoder cannot be asked: the probes then say why)."""
    training = module.training
    try:
        module.eval()  # dropout and the like off: the table is what the model serves
        with torch.no_grad():
            index = torch.as_tensor(rows, dtype=torch.int64, device=module_device(module))
            encoded = live.encode_items(module, index).detach().to(torch.float64).cpu().numpy()
    except Exception:  # noqa: BLE001 - an encoder that fails is the probes' to report
        return None
    finally:
        module.train(training)
    table = np.asarray(bundle.item_table[rows], dtype=np.float64)
    who = f"the item table {bundle.loader or 'the loader'} returned (format {bundle.format!r})"
    if encoded.shape != table.shape:
        return (f"{who} is not its live model's encode_items output: {list(encoded.shape)} encoded against "
                f"{list(table.shape)} table rows on the probed items; the frequency-norm figures and retrieval are "
                "of the table, the probes and C2-C5 of the encoder")
    difference = np.linalg.norm(encoded - table, axis=1)
    scale = np.maximum(np.linalg.norm(encoded, axis=1), np.linalg.norm(table, axis=1))
    differs = difference > RELATIVE_TOLERANCE * np.maximum(scale, np.finfo(np.float32).tiny)
    if not differs.any():
        return None
    worst = int(np.argmax(difference / np.maximum(scale, np.finfo(np.float32).tiny)))
    return (f"{who} differs from its live model's encode_items on {int(differs.sum()):,} of the {len(rows):,} probed "
            f"items (row {int(rows[worst])}: ‖encoded − table‖ = {difference[worst]:.4g} against a norm of "
            f"{scale[worst]:.4g}): the frequency-norm figures and retrieval are of the table, the probes and C2-C5 of "
            "the encoder; the loader should return the encoder's outputs as the item table")


__all__ = ["RELATIVE_TOLERANCE", "table_disagreement"]
