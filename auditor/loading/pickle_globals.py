"""What a pickle tried: the globals the restricted unpickler replaced, and which run code.

:mod:`auditor.loading.safe_pickle` never imports or calls a global it does not allow; it
records each one it replaced by an inert placeholder. This module says which of those
would have run code under ``pickle.load``/``torch.load`` (a shell, ``exec``, a process, a
network call, another unpickle: severity ``runs-code``) and which only name a class
(``inert``: a pickled ``torch.nn.Module`` subclass is normal), so the report can warn and
a CI gate can refuse the file (``unsafe_globals``, docs/report.md). The list is the one
policy of what counts as code; a global it does not name is ``inert``.
"""

from __future__ import annotations

from collections.abc import Mapping

from auditor.errors import setting
from auditor.result import ReplacedGlobal

RUNS_CODE = "runs-code"
INERT = "inert"

# Modules (top-level package, or an exact dotted prefix) whose every global runs code,
# starts processes, touches files or the network, or loads more code when called.
_CODE_MODULES = frozenset({
    "os", "posix", "nt", "subprocess", "pty", "commands", "popen2", "runpy", "importlib", "imp", "pkgutil",
    "zipimport", "ctypes", "cffi", "socket", "ssl", "http", "urllib", "urllib2", "httplib", "requests",
    "ftplib", "smtplib", "telnetlib", "webbrowser", "shutil", "tempfile", "glob", "io", "_io", "codecs",
    "sys", "code", "codeop", "pdb", "bdb", "trace", "timeit", "profile", "cProfile", "pydoc", "doctest",
    "pickle", "_pickle", "cPickle", "dill", "cloudpickle", "joblib", "marshal", "shelve", "dbm",
    "multiprocessing", "concurrent", "threading", "_thread", "thread", "asyncio", "signal", "platform",
    "sqlite3", "ensurepip", "venv", "distutils", "setuptools", "pip", "site", "atexit", "gc", "inspect",
    "types", "functools", "operator", "_operator", "itertools",
})
_CODE_PREFIXES = ("torch.hub", "torch.jit", "torch.load", "torch.serialization", "torch._C", "torch.ops",
                  "torch.utils.cpp_extension", "numpy.load", "numpy.testing", "numpy.f2py", "numpy.distutils",
                  "numpy.ctypeslib", "pandas.read_pickle", "tensorflow", "keras.utils")
# Exact names under a code prefix that only look something up: torch's own weights_only
# unpickler allows them (``_get_layout`` reads a ``torch.layout`` from ``torch.__dict__``;
# sharded and sparse tensors name it), so a clean checkpoint is not called hostile.
_LOOKUPS = frozenset({"torch.serialization._get_layout"})
_CODE_BUILTINS = frozenset({
    "eval", "exec", "execfile", "compile", "__import__", "open", "file", "input", "raw_input", "breakpoint",
    "getattr", "setattr", "delattr", "globals", "locals", "vars", "apply", "reload", "help", "exit", "quit",
})


def severity(name: str) -> str:
    """``runs-code`` or ``inert`` for a global named ``module.qualname``."""
    module, _, attr = name.rpartition(".")
    top = module.split(".", 1)[0]
    if top in ("builtins", "__builtin__", "__builtins__"):
        return RUNS_CODE if attr.split(".", 1)[0] in _CODE_BUILTINS else INERT
    if name in _LOOKUPS:
        return INERT
    if top in _CODE_MODULES or any(name == p or name.startswith(p + ".") for p in _CODE_PREFIXES):
        return RUNS_CODE
    return INERT


def replaced_globals(counts: Mapping[str, int] | None) -> tuple[ReplacedGlobal, ...] | None:
    """Each replaced global with its severity and how often the pickle named it; code
    first, then by name. None when the file was not read by the restricted unpickler
    (a plugin's loader): then nothing is known either way."""
    if counts is None:
        return None
    found = [ReplacedGlobal(name, severity(name), int(n)) for name, n in counts.items()]
    return tuple(sorted(found, key=lambda g: (g.severity != RUNS_CODE, g.name)))


def globals_warning(found: tuple[ReplacedGlobal, ...] | None, source: object) -> list[str]:
    """The report's warning for a file whose pickle names callables that run code."""
    code = [g for g in found or () if g.severity == RUNS_CODE]
    if not code:
        return []
    names = ", ".join(g.name for g in code[:8]) + (f" and {len(code) - 8} more" if len(code) > 8 else "")
    return [
        f"{source} names {len(code)} global(s) that would run code if the file were unpickled ({names}): "
        "popaudit replaced them with inert placeholders and ran none of them, but torch.load would run them; "
        f"treat the file as hostile (gate CI with {setting('fail_on')} 'unsafe_globals>0')"
    ]


__all__ = ["INERT", "RUNS_CODE", "globals_warning", "replaced_globals", "severity"]
