"""What a pickled ``nn.Module`` (``torch.save(model)``) says about how it scores.

A pickle holds a module's attributes, never its code: ``forward()`` lives in the class
that saved it (``__main__.MF``), which popaudit does not import. So how the module scores
is unknown, and the audit assumes the dot product of its tables (the ``dot`` column is its
own lists only if it scores so), said in the load warning. Where the module records a
``True`` flag whose name says its scoring is cosine (``cos``, ``use_cosine``,
``normalize_embeddings``, ``l2_normalize``...: a cosine word with nothing beside it but
words of use and of what is scored; never a schedule or a layer, ``cos_lr_schedule``,
``cosine_annealing``, ``batch_normalize``, ``normalize_inputs``; never after
``no``/``not``/``without``), or a text value that names cosine by the same rule
(``"cosine"``, ``"cos"``, ``"cosine_similarity"``) under a key that names the scoring
(``similarity``, ``sim``, ``score``, ``scoring``, ``scorer``, ``metric``, ``distance``, ``dist``,
alone or with words of use and of form: ``similarity_fn``, ``distance_metric``,
``score_type``; never ``lr_scheduler_type: "cosine"``, ``schedule``, ``annealing``, ``loss``),
it may score by cosine: that is a ``scoring_doubt``, so the
stored tables stand in, said first, as for a TorchScript ``forward()`` whose normalisation
popaudit cannot place (:mod:`auditor.loading.stand_in`); with an item bias, u·i + b_i
stands in, the bias kept (:mod:`auditor.loading.item_bias`). A checkpoint's recorded config
(Lightning's ``hyper_parameters``: the module's constructor arguments) is read by the same
rule, its top-level entries (:func:`recorded_config`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from auditor.errors import setting
from auditor.loading.pickle_scan import shown, shown_value
from auditor.loading.safe_pickle import is_module, placeholder_attrs, qualname_of

COSINE_FLAG_WORDS = frozenset({
    "cos", "cosine", "normalize", "normalise", "normalized", "normalised", "normalization", "normalisation",
    "l2norm", "l2normalize", "spherical", "angular",
})
_NEGATING = frozenset({"no", "not", "without", "skip", "disable", "disabled"})
_OF_USE = frozenset({"use", "uses", "is", "do", "apply", "enable", "enabled", "with", "by", "l2", "should", "score",
                     "scores", "scoring", "similarity", "sim", "emb", "embs", "embedding", "embeddings", "vec", "vecs",
                     "vector", "vectors", "user", "users", "item", "items", "query", "queries", "both", "factors",
                     "latent", "dot"})
"""Words that may stand beside a cosine word in a flag saying the scoring is cosine; any
other (``lr``, ``schedule``, ``annealing``, ``batch``, ``layer``, ``inputs``) names something else."""
SCORING_KEY_WORDS = frozenset({"similarity", "sim", "score", "scoring", "scorer", "metric", "distance", "dist"})
"""A key whose text value may name the scoring has one of these words (QA12 Loaders N3:
``similarity: "cosine"`` was read as no evidence, the raw table as served)."""
_OF_FORM = frozenset({"fn", "func", "function", "type", "kind", "mode", "method", "measure", "name"})
_LONGEST_NAME = 64
"""Longer text is no name of a scoring (a description, a path): not read."""
_WORDS = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")


def cosine_flags(obj: Any) -> list[tuple[str, Any]]:
    """The root module's attributes that say its scoring is cosine (module docstring)."""
    return _flagged(placeholder_attrs(obj) or {})


def _flagged(values: Mapping[Any, Any]) -> list[tuple[str, Any]]:
    """``values``' entries that say the scoring is cosine (module docstring): a ``True`` flag
    whose name says it, or a text value that says it under a key naming the scoring."""
    return [(name, value) for name, value in values.items() if isinstance(name, str) and (
        (value is True and _says_cosine(name))
        or (isinstance(value, str) and len(value) <= _LONGEST_NAME and _names_scoring(name) and _says_cosine(value))
    )]


def _names_scoring(key: str) -> bool:
    """True when ``key`` names the scoring (:data:`SCORING_KEY_WORDS`, beside words of use and form only)."""
    words = [w.lower() for w in _WORDS.findall(key)]
    return (any(w in SCORING_KEY_WORDS for w in words) and not any(w in _NEGATING for w in words)
            and all(w in SCORING_KEY_WORDS or w in _OF_USE or w in _OF_FORM for w in words))


def _doubt(whose: str, flags: list[tuple[str, Any]]) -> dict[str, str]:
    """The ``scoring_doubt`` of ``flags`` recorded by ``whose`` (``it``, ``its config``); none without flags."""
    if not flags:
        return {}
    shown_flags = ", ".join(f"`{shown(name)}` = " + ("True" if value is True else _quoted(value)) for name, value in flags[:3])
    return {"scoring_doubt": f"{whose} records {shown_flags}, and its forward() is not in the file"}


def _quoted(value: str) -> str:
    """A recorded text value in quotes where it may be shown (:func:`shown_value`), else what it is."""
    text = shown_value(value)
    return f'"{text}"' if text == value else text


def recorded_config(config: Mapping[str, Any] | None, module: dict[str, str]) -> Mapping[str, Any] | None:
    """A checkpoint's recorded config (Lightning's ``hyper_parameters``, ``config``,
    ``hparams``) with the ``scoring_doubt`` its pickled module's attributes imply
    (``module``, :func:`module_notes`), else its own top-level flags: the constructor
    arguments a module records as ``self.hparams`` are the same evidence as its attributes,
    so one rule reads both (QA12 Loaders F2: ``use_cosine: True`` there was ignored)."""
    doubt = module or _doubt("its config", _flagged(config or {}))
    return {**(config or {}), **doubt} if doubt else config


def _says_cosine(name: str) -> bool:
    """True when ``name`` says the scoring is cosine (module docstring)."""
    words = [w.lower() for w in _WORDS.findall(name)]
    return (any(w in COSINE_FLAG_WORDS for w in words) and not any(w in _NEGATING for w in words)
            and all(w in COSINE_FLAG_WORDS or w in _OF_USE for w in words))


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
    doubt = _doubt("it", cosine_flags(obj))
    return [note + ("." if doubt else " (the 'dot' column is the module's own lists only if it scores so).")], doubt


__all__ = ["COSINE_FLAG_WORDS", "SCORING_KEY_WORDS", "cosine_flags", "module_notes", "recorded_config"]
