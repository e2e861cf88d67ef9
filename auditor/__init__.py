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

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

from auditor.lazy_names import imported_on_first_use

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


__getattr__, __dir__ = imported_on_first_use(__name__, _LAZY, globals())
