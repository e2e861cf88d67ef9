"""The JSON sidecar beside a table ``mitigate`` wrote (docs/mitigate.md): where it goes
(:mod:`auditor.loading.mitigated`, which ``check`` reads too), and the warning before an
output is rescaled again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from auditor.loading.mitigated import SIDECAR_READ_LIMIT, SIDECAR_SUFFIX, read_rescaled, sidecar_path


FULL_PRECISION = ("float32", "float64")
"""Output dtypes whose table ranks as the trade-off's scoring does (``check`` reads OUT as
float32): a narrower one (float16, bfloat16, float8) rounds the rescaled rows enough to
move some lists, so ``--alpha auto`` measures its figures on OUT as written."""


def earlier_rescaling(model: Path, sha256: str, alpha: float) -> dict[str, Any] | None:
    """When ``model`` is a table mitigate wrote (the sidecar beside it records it, its
    sha256 matching ``sha256``): the α it carries (in all, through a chain of outputs),
    that sidecar, the exponent rescaling it by ``alpha`` leaves in all (‖k‖^a then ^b is
    ‖k‖^(ab), directions kept), and a one-line ``warning``. None otherwise: no sidecar, an
    unreadable one, or one that describes another file."""
    found = read_rescaled(model, sha256)
    if found is None:
        return None
    before, sidecar = found.alpha, found.sidecar
    combined = before * alpha
    warning = (f"{model} is already rescaled by alpha {before:g} (its sidecar {sidecar} says so): rescaling it again "
               f"by alpha {alpha:g} leaves the original's norms raised to {combined:g} in all, and each round may give "
               "up accuracy again; to serve another alpha, rescale the original table once")
    return {"alpha": before, "sidecar": str(sidecar), "combined_alpha": combined, "warning": warning}


__all__ = ["FULL_PRECISION", "SIDECAR_READ_LIMIT", "SIDECAR_SUFFIX", "earlier_rescaling", "sidecar_path"]
