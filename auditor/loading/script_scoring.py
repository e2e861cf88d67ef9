"""Cosine scoring read from a TorchScript archive's saved code (text only, never run).

``torch.jit.save`` keeps each scripted class's code under ``code/__torch__/``. Where the
root module's ``forward`` looks up both tables by their direct child modules and scores them
by ``torch.cosine_similarity(u, i, -1, eps)``, or passes each lookup (and nothing else of it)
through ``torch.nn.functional.normalize(x, 2., -1, ...)`` and the normalised vectors go
straight into the score (``torch.sum(torch.mul(u, i), [-1])``, nothing applied to them
first), the model scores by cosine, as certain as a Keras ``Dot(normalize=True)``: recorded
as the config's ``scoring`` (only the item side normalised: ``scoring_sides: item``;
:mod:`auditor.loading.stand_in`). Only the user side so normalised ranks as dot, and beside
an item bias as u·i/|u| + b_i: ``scoring_sides: user`` without ``scoring``, the reading the
ONNX reader gives the same module. Any other normalisation the model's own code shows
(``normalize`` with another p or dim, a projection or layer after it, ``cosine_similarity``
of other vectors, a norm) is a ``scoring_doubt``: the tables stand in, said, and are never
audited as plain dot.
"""

from __future__ import annotations

import re

_LOCAL = re.compile(r"^ +(\w+) = (\w+)\.(\w+)$", re.M)
_INLINE = re.compile(r"\((\w+)\)\.forward\(\w+, \)")
_LOOKUP = re.compile(r"^ +(\w+) = (__lookup_\w+)$", re.M)
_ALIAS = re.compile(r"^ +(\w+) = (?:__torch__\.)?torch\.nn\.functional\.normalize$", re.M)
_NORMALIZE = re.compile(r"^ +(\w+) = ([\w.]+)\((\w+), 2\., -1, [^,]+, None, \)$", re.M)
_COSINE = re.compile(r"torch\.cosine_similarity\((\w+), (\w+), -1(?:, [^,)]+)?\)")
_SIGNS = ("normalize", "cosine_similarity", "norm(", "linalg_vector_norm", "renorm")


def _lookups(forward: str) -> tuple[str, dict[str, str]]:
    """``forward`` with each child module's call ``(m).forward(ids, )`` (a table lookup)
    written ``__lookup_m``, and every name holding a lookup -> the child module it calls."""
    text = _INLINE.sub(lambda m: f"__lookup_{m.group(1)}", forward)
    modules = {local: attr for local, _, attr in _LOCAL.findall(text)}
    held = {f"__lookup_{local}": attr for local, attr in modules.items()}
    return text, {**held, **{var: held.get(call, "") for var, call in _LOOKUP.findall(text)}}


def _only_normalised(name: str, text: str) -> bool:
    """The lookup ``name`` is used by its normalisation only (made, then normalised; or inline)."""
    return _uses(name, text) == (1 if name.startswith("__lookup_") else 2)


def _uses(name: str, text: str) -> int:
    return len(re.findall(rf"\b{re.escape(name)}\b", text))


def _straight_score(vectors: dict[str, str], text: str) -> bool:
    """The user and item vectors (``side -> name``) meet in the score and nowhere else:
    ``torch.sum(torch.mul(u, i), [-1])`` (in one line or two), each used once beyond its
    making. A vector that goes on through anything else (a projection, a layer) before
    the score is not scored as it stands."""
    user, item = vectors.get("user"), vectors.get("item")
    if user is None or item is None:
        return False
    pair = rf"torch\.mul\((?:{re.escape(user)}, {re.escape(item)}|{re.escape(item)}, {re.escape(user)})\)"
    summed = re.search(rf"torch\.sum\({pair}, \[-1\]\)", text) is not None
    held = re.search(rf"^ +(\w+) = {pair}$", text, re.M)
    if not summed and held is not None:
        summed = _uses(held.group(1), text) == 2 and f"torch.sum({held.group(1)}, [-1])" in text
    return summed and all(_uses(v, text) == (1 if v.startswith("__lookup_") else 2) for v in (user, item))


def _scored(sides: dict[str, str], normalised: dict[str, str], text: str) -> dict[str, str] | None:
    """The config entries of a forward() whose normalised lookups go straight into the score
    (None: they do not). Only the item side normalised ranks as cosine; only the user side
    ranks as dot, and with an item bias as u·i/|u| + b_i (``scoring_sides: user``), the
    reading the ONNX graph reader gives the same module (:mod:`auditor.loading.onnx_model`)."""
    vectors = dict(normalised)
    for side in ("user", "item"):
        if side not in vectors:
            held = [v for v, s in sides.items() if s == side and not v.startswith("__lookup_")]
            raw = held or [v for v, s in sides.items() if s == side]  # a held lookup, else the inline one
            if len(raw) == 1:
                vectors[side] = raw[0]
    if not _straight_score(vectors, text):
        return None
    if "item" not in normalised:
        return {"scoring_sides": "user"}  # no cosine: the entries the ONNX reader records for the same module
    sides_ = "both" if "user" in normalised else "item"
    whose = "both tables' rows" if sides_ == "both" else "the item table's rows"
    return _cosine(sides_, f"its saved forward() L2-normalises {whose} (torch.nn.functional.normalize) before the score")


def script_scoring(forward: str, other_code: str, item_key: str, user_key: str | None) -> dict[str, str]:
    """The config entries the saved code establishes (module docstring): ``scoring`` (and
    ``scoring_sides``, ``scoring_evidence``), or ``scoring_doubt``, or none."""
    item, user = _child(item_key), _child(user_key)
    text, lookups = _lookups(forward)
    side = {var: ("item" if attr == item else "user" if attr == user else "") for var, attr in lookups.items()}
    for a, b in _COSINE.findall(text):
        if {side.get(a), side.get(b)} == {"item", "user"}:
            return _cosine("both", "its saved forward() scores by torch.cosine_similarity of the two tables' rows")
    aliases = set(_ALIAS.findall(text)) | {"torch.nn.functional.normalize", "__torch__.torch.nn.functional.normalize"}
    normalised = {side[x]: var for var, fn, x in _NORMALIZE.findall(text)
                  if fn in aliases and side.get(x) and _only_normalised(x, text)}  # fmt: skip
    if normalised and (found := _scored(side, normalised, text)) is not None:
        return found
    signs = [s.rstrip("(") for s in _SIGNS if s in forward or s in other_code]
    if not signs:
        return {}
    return {"scoring_doubt": f"its saved TorchScript code calls {', '.join(signs)} in a way popaudit cannot place"}


def _cosine(sides: str, evidence: str) -> dict[str, str]:
    return {"scoring": "cosine", "scoring_sides": sides, "scoring_evidence": evidence}


def _child(key: str | None) -> str | None:
    """The root's child module holding a table: ``item_embedding`` of ``item_embedding.weight``."""
    parts = (key or "").split(".")
    return parts[0] if len(parts) == 2 else None


__all__ = ["script_scoring"]
