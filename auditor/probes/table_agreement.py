"""Whether the item table a loader returned is what its live model encodes: the probes
and C2-C5 read ``live.encode_items``, the frequency-norm figures and retrieval read
``bundle.item_table``, so a table that is not the encoder's outputs (a plugin returning
the id embeddings alone while the tower adds features) would join figures of two models
in one report. Checked on the rows the update probe encodes anyway (at most
``n_extra_items``), in eval mode, against float32 round-off."""

from __future__ import annotations

import numpy as np

from auditor.model import ModelBundle
from auditor.probes.live_contract import CheckedLive

RELATIVE_TOLERANCE = 1e-3
"""A row differs when ‖encoded − table‖ exceeds this share of the larger of the two norms
(float32 round-off of a deep tower is orders of magnitude below it; a stale table above)."""


def table_disagreement(checked: CheckedLive, bundle: ModelBundle, rows: np.ndarray) -> str | None:
    """A warning when ``live.encode_items`` on ``rows`` (checked finite and as wide as the table
    by :func:`~auditor.probes.live_contract.checked_live`) is not ``bundle.item_table``
    there, or could not be compared with it; None when they agree."""
    who = f"the item table {bundle.loader or 'the loader'} returned (format {bundle.format!r})"
    encoded = checked.encoded
    if encoded is None:
        return (f"{who} was not compared with its live model's encode_items: {checked.refused}; the frequency-norm "
                "figures and retrieval are of the table, the probes and C2-C5 of the encoder")
    table = np.asarray(bundle.item_table[rows], dtype=np.float64)
    difference = np.linalg.norm(encoded - table, axis=1)
    scale = np.maximum(np.linalg.norm(encoded, axis=1), np.linalg.norm(table, axis=1))
    # Not "difference > tolerance", which NaN passes: a NaN row differs (the encoder's are
    # refused by checked_live; a table a library caller built by hand may hold one).
    differs = ~(difference <= RELATIVE_TOLERANCE * np.maximum(scale, np.finfo(np.float32).tiny))
    if not differs.any():
        return None
    worst = int(np.argmax(np.nan_to_num(difference / np.maximum(scale, np.finfo(np.float32).tiny), nan=np.inf)))
    return (f"{who} differs from its live model's encode_items on {int(differs.sum()):,} of the {len(rows):,} probed "
            f"items (row {int(rows[worst])}: ‖encoded − table‖ = {difference[worst]:.4g} against a norm of "
            f"{scale[worst]:.4g}): the frequency-norm figures and retrieval are of the table, the probes and C2-C5 of "
            "the encoder; the loader should return the encoder's outputs as the item table")


__all__ = ["RELATIVE_TOLERANCE", "table_disagreement"]
