"""What a pickled ``nn.Module`` (``torch.save(model)``) says about how it scores.

A pickle holds a module's attributes, never its code: ``forward()`` lives in the class
that saved it (``__main__.MF``), which popaudit does not import. So how the module scores
is unknown, and the audit assumes the dot product of its tables (the ``dot`` column is its
own lists only if it scores so), said in the load warning. Where the module records a
``True`` flag whose name says cosine (``cos``, ``use_cosine``, ``normalize``,
``l2norm``...; not after ``no``/``not``/``without``), it may score by cosine: that is a
``scoring_doubt``, so the tables stand in, said first, as for a TorchScript ``forward()``
whose normalisation popaudit cannot place (:mod:`auditor.loading.stand_in`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from auditor.errors import setting
from auditor.loading.pickle_scan import shown
from auditor.loading.safe_pickle import is_module, placeholder_attrs, qualname_of

COSINE_FLAG_WORDS = frozenset({
    "cos", "cosine", "normalize", "normalise", "normalized", "normalised", "normalization", "normalisation",
    "l2norm", "l2normalize", "spherical", "angular",
})
_NEGATING = frozenset({"no", "not", "without", "skip", "disable", "disabled"})
_WORDS = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")


def cosine_flags(obj: Any) -> list[str]:
    """The root module's ``True`` attributes whose names say cosine (module docstring)."""
    attrs = placeholder_attrs(obj) or {}
    return [name for name, value in attrs.items() if value is True and _says_cosine(name)]


def _says_cosine(name: str) -> bool:
    words = [w.lower() for w in _WORDS.findall(name)]
    return any(w in COSINE_FLAG_WORDS and (at == 0 or words[at - 1] not in _NEGATING) for at, w in enumerate(words))


def module_notes(obj: Any, path: Path) -> tuple[list[str], dict[str, str]]:
    """The load warning of a pickled module placeholder, and the config entries it implies
    (a ``scoring_doubt``); nothing for anything else."""
    if not is_module(obj):
        return [], {}
    name = shown(qualname_of(obj))
    note = (f"{path} holds a pickled {name} module; its tensors were read without running code from the file. "
            f"{setting('trust_pickle')} is only needed when a plugin must run the module itself. The pickle holds no "
            f"code, so how {name}'s forward() scores is unknown: the audit assumes the dot product of its tables (and "
            "of an item bias its names show)")
    flags = cosine_flags(obj)
    if not flags:
        return [note + " (the 'dot' column is the module's own lists only if it scores so)."], {}
    shown_flags = ", ".join(f"`{f}` = True" for f in flags[:3])
    return [note + "."], {"scoring_doubt": f"it records {shown_flags}, and its forward() is not in the file"}


__all__ = ["COSINE_FLAG_WORDS", "cosine_flags", "module_notes"]
