"""popaudit: audit trained recommender models for popularity bias in embedding norms.

The Python API (docs/api.md)::

    from pathlib import Path
    from auditor import AuditConfig, run_audit

    result = run_audit(AuditConfig(model=Path("model.pt"), interactions=Path("train.parquet")))
    print(result.verdict.severity, result.flat_metrics()["spearman"])

``run_audit``, ``AuditConfig`` and ``AuditResult`` are imported on first use (module
``__getattr__``), so ``import auditor`` and ``popaudit --help`` stay light: the audit
pipeline brings numpy, torch and the plugin system with it.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

try:
    __version__ = version("popaudit")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

if TYPE_CHECKING:
    from auditor.audit import run_audit
    from auditor.config import AuditConfig
    from auditor.result import AuditResult

_LAZY = {"run_audit": "auditor.audit", "AuditConfig": "auditor.config", "AuditResult": "auditor.result"}
"""Public name -> the module that defines it."""

__all__ = ["AuditConfig", "AuditResult", "__version__", "run_audit"]


def __getattr__(name: str) -> Any:
    """``auditor.run_audit`` and the others of :data:`_LAZY`, imported on first use."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'auditor' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
