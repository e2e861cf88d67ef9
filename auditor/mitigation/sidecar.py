"""The JSON sidecar beside a table ``mitigate`` wrote (docs/mitigate.md): where it goes, and
what an earlier one beside a model to rescale says (that model is already an output)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SIDECAR_SUFFIX = ".popaudit.json"
"""The sidecar is the output's path plus this suffix (``items.npy`` -> ``items.npy.popaudit.json``)."""


def sidecar_path(output: Path) -> Path:
    """Where the sidecar of ``output`` goes: beside it, its name plus :data:`SIDECAR_SUFFIX`."""
    return Path(str(output) + SIDECAR_SUFFIX)


SIDECAR_READ_LIMIT = 1 << 20
"""A sidecar beside MODEL larger than this is not read: mitigate writes a few kilobytes."""


def earlier_rescaling(model: Path, sha256: str, alpha: float) -> dict[str, Any] | None:
    """When ``model`` is a table mitigate wrote (the sidecar beside it records it, its
    sha256 matching ``sha256``): the α it carries (in all, through a chain of outputs),
    that sidecar, the exponent rescaling it by ``alpha`` leaves in all (‖k‖^a then ^b is
    ‖k‖^(ab), directions kept), and a one-line ``warning``. None otherwise: no sidecar, an
    unreadable one, or one that describes another file."""
    sidecar = sidecar_path(model)
    try:
        if not sidecar.is_file() or sidecar.stat().st_size > SIDECAR_READ_LIMIT:
            return None
        record = json.loads(sidecar.read_text(encoding="utf-8"))
        earlier = record.get("input_rescaled") or {}
        before = float(earlier.get("combined_alpha", record["alpha"]))
        if record.get("popaudit_mitigation") is None or record["output"]["sha256"] != sha256:
            return None
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    combined = before * alpha
    warning = (f"{model} is already rescaled by alpha {before:g} (its sidecar {sidecar} says so): rescaling it again "
               f"by alpha {alpha:g} leaves the original's norms raised to {combined:g} in all, and each round may give "
               "up accuracy again; to serve another alpha, rescale the original table once")
    return {"alpha": before, "sidecar": str(sidecar), "combined_alpha": combined, "warning": warning}


__all__ = ["SIDECAR_READ_LIMIT", "SIDECAR_SUFFIX", "earlier_rescaling", "sidecar_path"]
