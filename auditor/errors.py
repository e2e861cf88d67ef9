"""The one exception hierarchy of popaudit.

Library code raises these; the CLI turns them into ``Error: ...`` on stderr and the
exit code in ``exit_code`` (CLI.md). Messages name the file, column or row at fault.
"""

from __future__ import annotations


class AuditError(Exception):
    """Base class: something popaudit could not do; exit code 1."""

    exit_code = 1


class InputError(AuditError):
    """A user-supplied file or value is missing, unreadable or malformed."""


class ModelLoadError(InputError):
    """A model, checkpoint or embedding table could not be loaded."""


class UntrustedPickleError(ModelLoadError):
    """The file needs full unpickling (runs code) and --trust-pickle was not given."""


class AmbiguousTableError(ModelLoadError):
    """Several tensors could be the item (or user) table; the message lists them."""


class EmbeddingTableError(InputError):
    """An embedding table is empty, too small, or holds NaN/inf values."""


class InteractionsError(InputError):
    """An interaction log is unreadable or lacks the needed columns."""


class IdMappingError(InputError):
    """Raw ids cannot be mapped onto table rows (duplicates, unknown ids, bad length)."""


class QueryError(InputError):
    """Retrieval queries are missing, malformed or of the wrong dimension."""


class ManifestError(InputError):
    """A batch manifest is unreadable or lacks the ``model`` column."""


class GateError(AuditError):
    """A ``--fail-on`` expression is malformed or names an unknown metric."""

    exit_code = 2


class PluginError(AuditError):
    """A plugin failed to load or a hook implementation raised."""


class ProbeError(AuditError):
    """A numeric probe could not run on the live encoder."""


class TrainingError(AuditError):
    """Training a baseline failed (bad settings, diverged loss)."""
