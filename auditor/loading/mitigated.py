"""Whether a model is a table ``popaudit mitigate`` wrote: the JSON sidecar beside it
(``OUT.popaudit.json``, docs/mitigate.md) describing this very file (its sha256).

``check`` reads it to say that the model it audits already carries a rescaling (its
``dot`` is the rescaled table's, and a second rescaling compounds the first), and
``mitigate`` to warn before rescaling an output again
(:mod:`auditor.mitigation.sidecar`). A sidecar that is missing, unreadable, too large or
about another file says nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from auditor.io import file_sha256

SIDECAR_SUFFIX = ".popaudit.json"
"""The sidecar is the output's path plus this suffix (``items.npy`` -> ``items.npy.popaudit.json``)."""
SIDECAR_READ_LIMIT = 1 << 20
"""A sidecar beside MODEL larger than this is not read: mitigate writes a few kilobytes."""


def sidecar_path(output: Path) -> Path:
    """Where the sidecar of ``output`` goes: beside it, its name plus :data:`SIDECAR_SUFFIX`."""
    return Path(str(output) + SIDECAR_SUFFIX)


@dataclass(frozen=True)
class Rescaled:
    """What the sidecar beside a mitigate output says of it."""

    alpha: float
    """The α it carries in all (through a chain of outputs: the product)."""
    sidecar: Path
    original: str | None
    """The table it was rescaled from, when that was the original (no chain): its path as
    mitigate was given it, or the resolved one when that path no longer reaches it."""


def read_rescaled(model: Path, sha256: str | None = None) -> Rescaled | None:
    """The rescaling ``model`` carries when the sidecar beside it describes it (its
    ``output.sha256`` is the file's: ``sha256``, or computed here only when a sidecar is
    there); None otherwise."""
    sidecar = sidecar_path(model)
    try:
        if not sidecar.is_file() or sidecar.stat().st_size > SIDECAR_READ_LIMIT:
            return None
        record: Any = json.loads(sidecar.read_text(encoding="utf-8"))
        earlier = record.get("input_rescaled") or {}
        alpha = float(earlier.get("combined_alpha", record["alpha"]))
        if record.get("popaudit_mitigation") is None or record["output"]["sha256"] != (sha256 or file_sha256(model)):
            return None
        source = record.get("source") or {}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    original = None
    if not earlier and isinstance(source.get("path"), str):
        original = source["path"] if Path(source["path"]).exists() else str(source.get("resolved") or source["path"])
    return Rescaled(alpha, sidecar, original)


def rescaled_warning(model: Path, rescaled: Rescaled) -> str:
    """What ``check`` says of a model that is a mitigate output."""
    return (
        f"{model} is a popaudit mitigate output (its sidecar {rescaled.sidecar} says so): it already carries alpha "
        f"{rescaled.alpha:g}, so its 'dot' figures are those of the rescaled table, and shares of dot's accuracy "
        "are of that table's, not of the model it was rescaled from"
    )
