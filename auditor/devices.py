"""Where the audit's torch work runs (``--device``): the one-pass scoring kernel's
inner products and the numeric probes. CPU is the default and the tested path; CUDA is
used only when asked (``cuda``, or ``auto`` with a CUDA device present).

Resolving ``cpu`` imports nothing, so a refused option and ``--help`` stay light.
"""

from __future__ import annotations

from auditor.errors import InputError, setting

DEVICES = ("cpu", "auto", "cuda")
"""The values of ``device``: ``auto`` is ``cuda`` when torch sees a CUDA device, else ``cpu``."""


def resolve_device(name: str) -> str:
    """``"cpu"`` or ``"cuda"`` for the setting ``name``; InputError for a value outside
    :data:`DEVICES`, or for ``cuda`` when torch sees no CUDA device."""
    if name not in DEVICES:
        raise InputError(f"{setting('device')} must be one of {', '.join(DEVICES)}, got {name!r}")
    if name == "cpu":
        return "cpu"
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if name == "cuda":
        build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        raise InputError(
            f"{setting('device')} cuda: torch {torch.__version__} ({build}) sees no CUDA device; "
            f"use {setting('device')} cpu or auto"
        )
    return "cpu"
