"""The built-in model loader, registered like any plugin (``popaudit_load_model``, tried last).

It reads through the table of built-in formats (:mod:`auditor.loading.formats`): the
file's kind by suffix, else by content, then that format's reader.
"""

from __future__ import annotations

from pathlib import Path

from auditor.config import LoadOptions
from auditor.errors import ModelLoadError, setting
from auditor.hookspecs import hookimpl
from auditor.loading.formats import BUILTIN_FORMATS, SUPPORTED_FORMATS, detect_format, detect_kind
from auditor.model import ModelBundle


def load_builtin(path: Path, options: LoadOptions) -> ModelBundle | None:
    """Read ``path`` with the built-in readers; None when the file is of no known kind.

    The bundle says which globals a pickle in it named (``replaced_globals``): {} for the
    formats that hold no pickle, as no code can hide in them."""
    if not path.is_file():
        return None
    if path.stat().st_size == 0:  # no format has an empty file; say so rather than EOFError
        raise ModelLoadError(f"cannot read {path}: the file is empty (0 bytes)")
    fmt = detect_format(path, BUILTIN_FORMATS)
    if fmt is None or fmt.read is None:
        return None
    bundle = fmt.read(path, options)
    if bundle is not None:
        bundle.loader = "the built-in loader"
    if bundle is not None and bundle.replaced_globals is None:
        if fmt.pickle_free:
            bundle.replaced_globals = {}
        else:  # the built-in readers record them but for --trust-pickle's full unpickle
            bundle.globals_unrecorded = (
                f"the model was unpickled in full ({setting('trust_pickle')}), so the globals it named were not "
                "recorded" if options.trust_pickle else f"the built-in {fmt.name!r} reader did not record the "
                "globals a pickle in the file named")
    return bundle


@hookimpl(trylast=True)
def popaudit_load_model(path: Path, options: LoadOptions) -> ModelBundle | None:
    """Built-in loader for PyTorch, TorchScript, safetensors, .npy and Parquet files."""
    return load_builtin(Path(path), options)


__all__ = ["SUPPORTED_FORMATS", "detect_kind", "load_builtin", "popaudit_load_model"]
