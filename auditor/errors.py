"""The one exception hierarchy of popaudit.

Library code raises these; the CLI turns them into ``Error: ...`` on stderr and the
exit code in ``exit_code`` (docs/report.md). Messages name the file, column or row at fault.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar

_SPELLING: ContextVar[Callable[[], Mapping[str, str]] | None] = ContextVar("popaudit_setting_spelling", default=None)
"""How the front end that is running spells settings (a mapping made on first use), or
None: library callers and batch manifests, which name settings by their field names."""


def setting(name: str) -> str:
    """How a message names the setting ``name`` (an ``AuditConfig`` field such as
    ``item_ids``): the field name itself, which is also the batch manifest's column name,
    unless a front end is running under :func:`spelled_as` (the CLI's ``--item-ids``)."""
    spelling = _SPELLING.get()
    return name if spelling is None else spelling().get(name, name)


def setting_off(name: str) -> str:
    """How a message names the boolean setting ``name`` (``retrieval``, ``probes``) turned
    off: the front end's flag that turns it off (the CLI's ``--no-retrieval``), else
    ``retrieval=False``, the call that did (QA11 diffapi F6: the bare field name read
    "skipped with retrieval", the opposite of why)."""
    spelling = _SPELLING.get()
    spelled = None if spelling is None else spelling().get(name)
    return spelled if spelled is not None else f"{name}=False"


def spelling_active() -> bool:
    """Whether a front end names settings here (within :func:`spelled_as` with a spelling)."""
    return _SPELLING.get() is not None


@contextmanager
def spelled_as(spelling: Callable[[], Mapping[str, str]] | None) -> Iterator[None]:
    """Within the block, messages name settings through ``spelling()`` (called when a
    message is made, so a run without an error never builds it); None: field names."""
    token = _SPELLING.set(spelling)
    try:
        yield
    finally:
        _SPELLING.reset(token)


class Terminated(KeyboardInterrupt):
    """SIGTERM (``timeout``, a cancelled CI job, ``docker stop``, Kubernetes), raised in the
    main thread by the CLI's handler (:mod:`auditor.cli._termination`). A KeyboardInterrupt,
    so every path that cleans up after Ctrl-C (workers stopped, finished batch rows saved,
    temporary files removed) runs for it too; only the words and the exit code differ
    (:func:`interruption`)."""

    def __init__(self) -> None:
        super().__init__("terminated by SIGTERM")


INTERRUPTED_EXIT = 130
"""Exit code of a run stopped by Ctrl-C (128 + SIGINT, as shells report it)."""
TERMINATED_EXIT = 143
"""Exit code of a run stopped by SIGTERM (128 + SIGTERM)."""


def interruption(exc: BaseException) -> tuple[str, int]:
    """How a run stopped by ``exc`` (a KeyboardInterrupt, or one raised from or while
    handling it) is said and the code it exits with: ``("terminated by SIGTERM", 143)``
    where a :class:`Terminated` is in its chain, else ``("interrupted", 130)``."""
    seen: BaseException | None = exc
    for _ in range(64):  # a chain is short; a cycle must not hang an exiting run
        if seen is None:
            break
        if isinstance(seen, Terminated):
            return str(seen), TERMINATED_EXIT
        seen = seen.__cause__ or seen.__context__
    return "interrupted", INTERRUPTED_EXIT


class AuditError(Exception):
    """Base class: something popaudit could not do; exit code 1."""

    exit_code = 1


class InputError(AuditError):
    """A user-supplied file or value is missing, unreadable or malformed."""


class OutputError(AuditError):
    """An output file could not be written (no space, no permission, a folder in the way)."""


class ModelLoadError(InputError):
    """A model, checkpoint or embedding table could not be loaded."""


class UntrustedPickleError(ModelLoadError):
    """The file needs full unpickling (runs code) and --trust-pickle was not given."""


class AmbiguousTableError(ModelLoadError):
    """Several tensors could be the item (or user) table; the message lists them."""


class NoItemTableError(ModelLoadError):
    """No tensor of a model file can be the item table; the message lists what it holds."""


class EmbeddingTableError(InputError):
    """An embedding table is empty, too small, or holds NaN/inf values."""


class InteractionsError(InputError):
    """An interaction log is unreadable or lacks the needed columns."""


class ServedListsError(InputError):
    """A file of served lists (recommendations) is unreadable, malformed or lacks the needed columns."""


class IdMappingError(InputError):
    """Raw ids cannot be mapped onto table rows (duplicates, unknown ids, bad length)."""


class EvaluationSplitError(InputError):
    """A recorded evaluation split (RecBole's ``eval_args``) cannot be reproduced exactly."""


class QueryError(InputError):
    """Retrieval queries are missing, malformed or of the wrong dimension."""


class ManifestError(InputError):
    """A batch manifest is unreadable or lacks the ``model`` column."""


class GateError(AuditError):
    """A ``--fail-on`` expression is malformed or names an unknown metric."""

    exit_code = 2


class UnmeasuredGateError(GateError):
    """A gate on a metric that no audited run measured: it cannot be evaluated, so it
    fails (exit 1) instead of passing silently."""

    exit_code = 1


class NoClearGainError(InputError):
    """``--alpha auto``: the trade-off keeps dot (no scoring is clearly better), so there is
    nothing to write; the message gives the best alpha available and its cost."""


class PluginError(AuditError):
    """A plugin failed to load or a hook implementation raised."""


class ProbeError(AuditError):
    """A numeric probe could not run on the live encoder."""


class TrainingError(AuditError):
    """Training a baseline failed (bad settings, diverged loss)."""


class TraceError(InputError):
    """A training trace is unreadable, not a popaudit trace, or malformed."""


class AlertTripped(AuditError):
    """A training alert with the action "raise" fired: training stopped; exit code 3,
    like a tripped ``--fail-on`` gate."""

    exit_code = 3


class ReportError(InputError):
    """A JSON report is not a popaudit report, or two reports cannot be compared."""
