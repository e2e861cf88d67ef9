"""What to run next: ``popaudit check`` command lines that repeat an audit's inputs and
options (ids, holdout, formats), quoted for a POSIX shell so they run as printed."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from auditor.config import AuditConfig, DeclaredTraining
from auditor.cli._common import option_names

_NEGATED = {"retrieval": "--no-retrieval", "probes": "--no-probes"}
"""Settings whose flag turns them off."""


def check_command(model: Path | None, settings: Mapping[str, Any], extra: Sequence[str] = ()) -> str:
    """``popaudit check MODEL`` with every setting in ``settings`` (AuditConfig field ->
    value) that differs from its default, then ``extra`` words (no MODEL: a lists-only audit)."""
    flags = option_names()
    defaults = AuditConfig(model=model or Path("MODEL"))
    words = ["popaudit", "check", *([] if model is None else [str(model)])]
    for field in fields(AuditConfig):
        name = field.name
        if name == "model" or name not in settings:
            continue
        value, default = settings[name], getattr(defaults, name)
        if value is None or value == default:
            continue
        if name in _NEGATED:
            words.append(_NEGATED[name])
        elif isinstance(value, DeclaredTraining):
            for part in fields(DeclaredTraining):
                declared = getattr(value, part.name)
                if declared is not None:
                    words += [flags[part.name], f"{declared:g}" if isinstance(declared, float) else str(declared)]
        elif isinstance(value, bool):
            words.append(flags[name])
        elif isinstance(value, tuple):
            for item in value:
                words += [flags[name], f"{item:g}" if isinstance(item, float) else str(item)]
        else:
            words += [flags[name], f"{value:g}" if isinstance(value, float) else str(value)]
    return shlex.join([*words, *extra])
