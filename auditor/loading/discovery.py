"""Finding the item and user tables among the tensors of a state dict.

Discovery works on names and shapes only, so it never needs more than the chosen
tensors in memory (safetensors and mmap-loaded checkpoints stay lazy).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from auditor.errors import AmbiguousTableError, ModelLoadError, NoItemTableError, setting

if TYPE_CHECKING:  # tensors are passed in; names and shapes need no torch (mitigate of a .npy table)
    import torch

ITEM_WORDS = ("item", "movie", "product", "video", "song", "track", "article", "poi", "doc", "candidate", "target")
USER_WORDS = ("user", "query", "customer", "member", "account")
# Words that mark an embedding-style table (higher score than an MLP weight of the tower).
_TABLE_WORDS = ("emb", "table", "lookup", "factor", "vector")
_LINEAR_WORDS = ("linear", "fc", "proj", "dense")
_ATTENTION_WORDS = ("attention", "attn")
"""An attention layer's ``query``/``key``/``value`` projections (a sequence model's encoder): the
query side's layers, never its table of vectors."""
ONEHOT_RATIO = 4
"""A Linear weight (d, n) over one-hot ids: n must be at least this many times d."""


def _tokens(component: str) -> list[str]:
    """Lower-case words of one dotted-name component (snake_case and camelCase split)."""
    spaced = re.sub(r"([a-z])([A-Z])", r"\1 \2", component)
    return [re.sub(r"\d+", "", t).lower() for t in re.split(r"[^A-Za-z0-9]+", spaced) if t]


def _has_word(tokens: list[str], words: tuple[str, ...]) -> bool:
    for tok in tokens:
        for w in words:
            # "poi"/"doc" are prefixes of unrelated words (point, docker): whole token only.
            if tok == w or tok == w + "s" or (len(w) > 3 and tok.startswith(w)):
                return True
    return False


def table_role(key: str) -> str | None:
    """``item``, ``user``, ``both`` or None, from the innermost name component that says so."""
    for component in reversed(key.split(".")):
        toks = _tokens(component)
        item, user = _has_word(toks, ITEM_WORDS), _has_word(toks, USER_WORDS)
        if item and user:
            return "both"
        if item:
            return "item"
        if user:
            return "user"
    return None


@dataclass(frozen=True)
class TensorInfo:
    """Name-level facts about one tensor of a state dict."""

    key: str
    shape: tuple[int, ...]
    floating: bool

    @property
    def is_candidate(self) -> bool:
        return len(self.shape) == 2 and self.floating and not self.key.rsplit(".", 1)[-1].startswith("bias")

    @property
    def one_column(self) -> bool:
        """A (n, 1) tensor: a per-row scalar (an ``Embedding(n, 1)`` bias), whose norm is its
        absolute value; a table only when no wider candidate is there (:func:`_widest`). So is
        a (1, n) one whose name says ``bias``: a ``Linear(n, 1)`` bias's weight (Loaders F6)."""
        return len(self.shape) == 2 and (self.shape[1] == 1 or (self.shape[0] == 1 and "bias" in self.key.lower()))

    @property
    def onehot_linear(self) -> bool:
        """A ``*.weight`` of a linear/fc/proj/dense layer whose input (ids) is much wider."""
        parts = self.key.split(".")
        if parts[-1] != "weight" or len(self.shape) != 2:
            return False
        toks = [t for p in parts[:-1] for t in _tokens(p)]
        return _has_word(toks, _LINEAR_WORDS) and self.shape[1] >= ONEHOT_RATIO * self.shape[0]

    def score(self, role: str) -> int:
        """Name score for ``role`` (0: the name does not say ``role``)."""
        found = table_role(self.key)
        toks = [t for p in self.key.split(".") for t in _tokens(p)]
        if found not in (role, "both") or any(t in _ATTENTION_WORDS for t in toks):
            return 0
        score = 10 if found == role else 5
        if any(t.startswith(w) for t in toks for w in _TABLE_WORDS):
            score += 5
        if any(t in ("pos", "position", "positional") for t in toks):
            score -= 4
        if _has_word(toks, _LINEAR_WORDS) and not self.onehot_linear:
            score -= 3
        return max(score, 1)

    def describe(self) -> str:
        # Say why a 2-D tensor is no candidate: an int/bool/complex table is a common mix-up.
        return f"{self.key} {list(self.shape)}" + ("" if self.floating else " (not floating-point)")


def tensor_infos(tensors: Mapping[str, torch.Tensor]) -> list[TensorInfo]:
    """Name, shape and dtype class of every tensor in a state dict."""
    return [TensorInfo(k, tuple(int(s) for s in t.shape), bool(t.is_floating_point())) for k, t in tensors.items()]


@dataclass
class TableChoice:
    """The tensors chosen as item and user tables, and what the reader should be told."""

    item: TensorInfo
    user: TensorInfo | None
    warnings: list[str]


def _candidates_listing(infos: list[TensorInfo]) -> str:
    cands = [i for i in infos if i.is_candidate]
    if not cands:
        return "(none)"
    return "; ".join(c.describe() for c in cands)


def resolve_key(key: str, infos: list[TensorInfo], flag: str, source: Path) -> TensorInfo:
    """The tensor named ``key`` exactly, or the one whose name ends with it (``flag``:
    how messages name the setting that gave ``key``)."""
    by_key = {i.key: i for i in infos}
    for k in (key, key.removeprefix("module.")):
        if k in by_key:
            return by_key[k]
    matches = [i for i in infos if i.key.endswith(key) or i.key.endswith(key.removeprefix("module."))]
    dotted = [i for i in matches if i.key.endswith("." + key)]
    if len(dotted) == 1:
        return dotted[0]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise ModelLoadError(
            f"{flag} {key!r} matches several tensors in {source}: "
            + "; ".join(m.describe() for m in matches)
            + ". Give the full key."
        )
    raise ModelLoadError(
        f"{flag} {key!r} is not a tensor in {source}; 2-D tensors available: {_candidates_listing(infos)}"
    )


def _pick(infos: list[TensorInfo], role: str, exclude: str | None, source: Path) -> TensorInfo | None:
    """The unique best-scoring tensor for ``role``; None when no name says ``role``."""
    scored = [(i.score(role), i) for i in infos if i.is_candidate and i.key != exclude]
    scored = [(s, i) for s, i in scored if s > 0]
    if not scored:
        return None
    wide = {id(i) for i in _widest([i for _, i in scored])}
    scored = [(s, i) for s, i in scored if id(i) in wide]
    best = max(s for s, _ in scored)
    top = [i for s, i in scored if s == best]
    if len(top) > 1:
        raise AmbiguousTableError(
            f"several tensors in {source} could be the {role} table ("
            + ", ".join(t.key for t in top)
            + f"); pass {setting(role + '_key')} with one of the candidates: {_candidates_listing(infos)}"
        )
    return top[0]


def _widest(candidates: list[TensorInfo]) -> list[TensorInfo]:
    """``candidates`` without the (n, 1) ones when a wider one is among them: a per-row
    scalar beside a table is its bias (``item_bias.embeddings`` beside ``item_embedding``),
    never a rival table to choose between."""
    wide = [i for i in candidates if not i.one_column]
    return wide or candidates


def choose_tables(
    infos: list[TensorInfo], source: Path, item_key: str | None = None, user_key: str | None = None,
    unread: Mapping[str, str] | None = None,
) -> TableChoice:
    """Find the item table (required) and the user table (optional) among ``infos``.

    Candidates are 2-D floating tensors; the unique best name score wins, ties raise
    :class:`AmbiguousTableError` listing every candidate with its shape. ``unread``: the
    file's tensors of a layout popaudit does not read (key -> what it is): an item table
    among them is named as unreadable, never taken for absent or replaced by a guess.
    """
    warnings: list[str] = []
    user = resolve_key(user_key, infos, setting("user_key"), source) if user_key else None
    if item_key:
        _refuse_unread_item(unread or {}, source, item_key)
        item = resolve_key(item_key, infos, setting("item_key"), source)
    else:
        picked = _pick(infos, "item", user.key if user else None, source)
        if picked is None:
            _refuse_unread_item(unread or {}, source)
            rest = _widest([
                i
                for i in infos
                if i.is_candidate and table_role(i.key) is None and (user is None or i.key != user.key)
            ])
            if not rest:
                raise NoItemTableError(
                    f"no item embedding table in {source}: no 2-D floating tensor"
                    + (f" (tensors: {'; '.join(i.describe() for i in infos[:20])})" if infos else " (no tensors)")
                )
            if len(rest) > 1:
                raise AmbiguousTableError(
                    f"cannot tell which tensor in {source} is the item table (no name says item); "
                    f"pass {setting('item_key')} with one of the candidates: {_candidates_listing(infos)}"
                )
            picked = rest[0]
            named = [i.describe() for i in infos if i.is_candidate and i.key != picked.key][:3]
            besides = f" besides the user side's {', '.join(named)}" if named else ""
            warnings.append(
                f"no tensor name in {source} says 'item'; using {picked.describe()} as the item table: the only "
                f"2-D tensor{besides}"
            )
        item = picked
    if user is None:
        user = _pick(infos, "user", item.key, source)
    if user is not None and user.key == item.key:
        raise ModelLoadError(
            f"{setting('item_key')} and {setting('user_key')} both name {item.key!r} in {source}"
        )
    _refuse_unnamed_layer(item, user, source)
    _refuse_scalar_table(item, user, source, infos, {"item": item_key, "user": user_key})
    return TableChoice(item, user, warnings)


def _refuse_scalar_table(
    item: TensorInfo, user: TensorInfo | None, source: Path, infos: list[TensorInfo], keys: Mapping[str, str | None],
) -> None:
    """A one-column tensor (a per-row scalar: a bias) as one side's table beside a wider
    table on the other is refused, naming both (QA12 Loaders F4): a bias is never a table
    while a wider one is there (:func:`_widest`), and a ``--user-key`` naming the item table
    left only the item bias for the item side, refused as a bare dimension mismatch that
    named neither tensor. ``keys``: role -> the key option given for it."""
    if user is None or item.one_column == user.one_column or item.onehot_linear or user.onehot_linear:
        return
    role, other = ("item", "user") if item.one_column else ("user", "item")
    scalar, table = (item, user) if role == "item" else (user, item)
    how = (f"named by {setting(role + '_key')}" if keys[role] else
           "the best candidate left" + (f" once {setting(other + '_key')} took {table.key!r}" if keys[other] else ""))
    raise ModelLoadError(
        f"the {role} table of {source} would be {scalar.describe()} ({how}): one value per row, a per-row scalar such as "
        f"{_a_bias(role)}, not an embedding table, beside the {other} table {table.describe()}"
        + (f" ({setting(other + '_key')})" if keys[other] else "")
        + f". Pass {setting(role + '_key')} with the {role} table; 2-D tensors available: {_candidates_listing(infos)}"
    )


def _a_bias(role: str) -> str:
    return f"an {role} bias" if role == "item" else f"a {role} bias"


def _refuse_unnamed_layer(item: TensorInfo, user: TensorInfo | None, source: Path) -> None:
    """A ``*.weight`` item table whose rows, not columns, match the user table's dimension is
    a linear layer (dim × inputs) by its shape. Its inputs may be one-hot item ids (its
    columns are the items) or item features (then it holds no item vectors at all): the
    shapes cannot tell, so it is read transposed only when its name says a linear layer,
    and otherwise refused here, saying so, rather than as a bare dimension mismatch."""
    if user is None or item.onehot_linear or len(item.shape) != 2 or len(user.shape) != 2:
        return
    rows, columns = item.shape
    dim = user.shape[0] if user.onehot_linear else user.shape[1]  # a user layer is read transposed too
    if item.key.rsplit(".", 1)[-1] != "weight" or columns == dim or rows != dim:
        return
    raise ModelLoadError(
        f"the item table {item.key!r} of {source} has shape {list(item.shape)}: read as {rows} item rows of "
        f"dimension {columns}, it does not match the user table {user.key!r} {list(user.shape)} (dimension {dim}), "
        f"but its {rows} rows do: it looks like a linear layer (dim × inputs). popaudit reads such a layer as one over "
        f"one-hot item ids, its {columns} columns the items, only when its name says a linear layer "
        f"({', '.join(_LINEAR_WORDS)}), since over item features it holds no item vectors. If its columns are the "
        f"items, save its transpose ({columns} × {rows}) as the item table or name the layer so; if its inputs are "
        "item features, save the item vectors it computes as the item table"
    )


def _refuse_unread_item(unread: Mapping[str, str], source: Path, item_key: str | None = None) -> None:
    """ModelLoadError naming the tensors whose name says item (or that ``item_key`` names)
    but whose layout popaudit does not read (sparse, quantized ...): the item table is
    there, in another form."""
    def says_item(key: str) -> bool:
        return key == item_key or key.endswith(f".{item_key}") if item_key else table_role(key) in ("item", "both")

    named = [(key, what) for key, what in unread.items() if says_item(key)]
    if named:
        listed = "; ".join(f"{key} is {what}" for key, what in named[:5])
        raise ModelLoadError(
            f"the item table of {source} is in a form popaudit does not read ({listed}): it reads dense "
            "floating-point tensors, so save it dense (tensor.to_dense() for a sparse one, tensor.dequantize() for a "
            f"quantized one), or name another table with {setting('item_key')}"
        )


def rows_alias(tensor: torch.Tensor) -> bool:
    """True when two elements of ``tensor`` share memory: with dimensions of more than one
    element ordered by stride, each stride must pass every element the smaller ones reach."""
    reach = 0
    for stride, size in sorted((s, n) for n, s in zip(tensor.shape, tensor.stride()) if n > 1):
        if stride <= reach:
            return True
        reach += (size - 1) * stride
    return False


def table_to_numpy(tensor: torch.Tensor, info: TensorInfo, what: str, warnings: list[str]) -> np.ndarray:
    """A contiguous float32 (rows, dim) array; transposes one-hot linear weights (and says so)."""
    if not tensor.is_floating_point():
        raise ModelLoadError(f"{what} {info.key!r} holds {tensor.dtype} values, not floating-point embeddings")
    if rows_alias(tensor):
        raise ModelLoadError(
            f"{what} {info.key!r} of size {list(tensor.shape)} has stride {list(tensor.stride())}: its rows share "
            "memory (zero or overlapping strides), so it is no table of separate item vectors"
        )
    arr = tensor.detach().cpu().float().numpy()
    if info.onehot_linear:
        warnings.append(
            f"{what} {info.key!r} has shape {list(arr.shape)}: read as a linear layer over one-hot ids "
            f"and transposed to {[arr.shape[1], arr.shape[0]]}"
        )
        arr = arr.T
    return np.ascontiguousarray(arr, dtype=np.float32)
