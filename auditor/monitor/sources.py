"""Where the monitor reads item vectors and queries from.

An item table is an ``nn.Embedding``, a tensor or parameter (n_items, dim) updated in
place by the optimizer (a view such as ``weight[1:]`` works, and skips a padding row),
or a callable ``encode(rows) -> vectors`` for towers that compute their vectors (an
MLP over features, say). Everything here runs under ``torch.no_grad`` and returns
detached tensors; nothing is copied except what a caller asks to keep.
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Union

import numpy as np
import torch

from auditor.errors import TrainingError
from auditor.loading.zero_queries import queried_rows
from auditor.monitor.settings import MonitorInputWarning

ItemTable = Union[torch.nn.Embedding, torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]
"""What :class:`~auditor.monitor.TrainingMonitor` accepts as the item table."""
Queries = Union[torch.Tensor, np.ndarray, Callable[[], torch.Tensor], None]
"""Head-share queries: fixed vectors, a callable returning the current query vectors
(e.g. the user tower on a fixed user sample), or None: a fixed sample of item rows."""

CHUNK = 65_536
"""Rows per call of an encoder callable when the whole table is read."""


@contextmanager
def quiet() -> Iterator[None]:
    """Around every call of user code: no autograd graph, and torch's CPU random state
    restored afterwards (a tower with dropout must not shift the training's randomness)."""
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        yield


class ItemSource:
    """The current item vectors, whole or by rows, from any :data:`ItemTable`."""

    def __init__(self, items: ItemTable, n_items: int | None = None, name: str | None = None) -> None:
        """``name``: the dotted name ``items`` was found at (the Lightning callback's), so that
        a message lists the embeddings inside it by the names to pass."""
        self._encode: Callable[[torch.Tensor], torch.Tensor] | None = None
        self._embedding: torch.nn.Embedding | None = None
        self._tensor: torch.Tensor | None = None
        if isinstance(items, torch.nn.Embedding):
            self._embedding = items
            shape = tuple(items.weight.shape)
        elif isinstance(items, torch.Tensor):
            if items.ndim != 2:
                raise TrainingError(f"the item table must be a 2-D tensor (n_items, dim), got shape {tuple(items.shape)}")
            self._tensor = items
            shape = tuple(items.shape)
        elif callable(items):
            if n_items is None and isinstance(items, torch.nn.Module):  # a tower or a whole model, not a table
                raise TrainingError(
                    f"items is a {type(items).__name__} module, not an item table: give its item nn.Embedding "
                    f"(its embeddings: {embedding_names(items, name)}), or n_items for an item tower that encodes rows"
                )
            if n_items is None:
                raise TrainingError("an item encoder callable needs n_items: how many item rows it encodes")
            self._encode = items
            with quiet():
                probe = items(torch.zeros(1, dtype=torch.int64))
            if not isinstance(probe, torch.Tensor) or probe.ndim != 2 or probe.shape[0] != 1:
                raise TrainingError("the item encoder must return a (rows, dim) tensor for a 1-D tensor of item rows")
            shape = (int(n_items), int(probe.shape[1]))
        else:
            raise TrainingError(
                f"items must be an nn.Embedding, a (n_items, dim) tensor or a callable, not {type(items).__name__}"
            )
        if n_items is not None and int(n_items) != shape[0]:
            raise TrainingError(f"n_items is {n_items} but the item table has {shape[0]} rows")
        self.n_items, self.dim = int(shape[0]), int(shape[1])
        if self.n_items < 1 or self.dim < 1:
            raise TrainingError(f"the item table is empty (shape {shape})")

    @property
    def parameter(self) -> torch.Tensor | None:
        """The tensor the optimizer updates, when the table is one (else None)."""
        return self._embedding.weight if self._embedding is not None else self._tensor

    def groups_of(self, optimizer: object) -> list[dict[str, Any]]:
        """The param groups of a torch ``optimizer`` that hold the item table's parameter
        (or its base, for a view such as ``weight[1:]``), matched by identity; [] when none
        does, when the table is a callable, or for an optimizer without param groups."""
        param = self.parameter
        groups = getattr(optimizer, "param_groups", None)
        if param is None or not isinstance(groups, list):
            return []
        view_of = getattr(param, "_base", None)
        base = param if view_of is None else view_of
        return [g for g in groups if any(_holds(p, param, base) for p in g.get("params", ()))]

    def item_optimizer(self, optimizer: object) -> object:
        """The optimizer that steps the item table: of ``optimizer``, or of a list or tuple of
        optimizers (one per tower, say), the one whose param groups hold the table. One
        optimizer is checked as a list of one is: a torch optimizer that does not hold a
        table it could be matched in (another tower's, given by mistake) is refused, since
        the trace would name its kind and rate and C1 would judge the run by them. An
        optimizer that cannot be matched (a callable encoder's, a Keras optimizer, which
        steps every trainable variable) is taken as given, when it is the only one."""
        if optimizer is None:
            return None
        given = list(optimizer) if isinstance(optimizer, (list, tuple)) else [optimizer]
        holders = [o for o in given if self.groups_of(o)]
        if len(holders) == 1:
            return holders[0]
        if not holders and len(given) == 1 and not self._matchable(given[0]):
            return given[0]
        if len(given) == 1:
            raise TrainingError(
                f"optimizer: the optimizer given ({_holdings(given[0])}) does not hold the item table's parameter "
                f"({_shape(self.parameter)}; matched by identity or shared memory): pass the optimizer that steps the "
                "item table (with one optimizer per tower, the item tower's), whose kind and learning rate the trace "
                "records and C1 and C5 read"
            )
        names = ", ".join(type(o).__name__ for o in given)
        found = "several of them hold" if holders else "none of them holds (matched by parameter identity)"
        raise TrainingError(
            f"optimizer: {len(given)} optimizers were given ({names}) and {found} the item table: "
            "pass the one optimizer that steps the item table"
            + ("" if holders else f" (they hold: {'; '.join(_holdings(o) for o in given[:4])})")
        )

    def _matchable(self, optimizer: object) -> bool:
        """Whether the table can be looked for in ``optimizer``: a torch optimizer (param
        groups) and a table that is a tensor (not a callable encoder)."""
        return self.parameter is not None and isinstance(getattr(optimizer, "param_groups", None), list)

    def rows(self, rows: torch.Tensor) -> torch.Tensor:
        """The current vectors of ``rows`` (int64), detached."""
        param = self.parameter
        if param is not None:
            return param.detach()[rows.to(param.device)]
        assert self._encode is not None
        with quiet():
            return self._encode(rows).detach()

    def table(self) -> torch.Tensor:
        """Every row's current vector, detached (a view of the parameter where there is one)."""
        param = self.parameter
        if param is not None:
            return param.detach()
        with torch.no_grad():
            parts = [
                self.rows(torch.arange(start, min(start + CHUNK, self.n_items), dtype=torch.int64))
                for start in range(0, self.n_items, CHUNK)
            ]
        return torch.cat(parts)


def _holds(held: object, param: torch.Tensor, base: torch.Tensor) -> bool:
    """Whether an optimizer's parameter ``held`` is the item table ``param``: the same
    tensor or its base (a view such as ``weight[1:]``), or one sharing its memory (a table
    given as ``weight.detach()`` or ``weight.data``)."""
    if held is param or held is base:
        return True
    if not isinstance(held, torch.Tensor) or held.device != param.device:
        return False
    if held.layout != torch.strided or param.layout != torch.strided:
        return False  # a sparse tensor has no storage to compare
    address = param.untyped_storage().data_ptr()
    return address != 0 and held.untyped_storage().data_ptr() == address


def _shape(tensor: torch.Tensor | None) -> str:
    return "shape (" + ", ".join(str(n) for n in tensor.shape) + ")" if tensor is not None else "no shape"


def _holdings(optimizer: object) -> str:
    """``optimizer`` named with what it holds (``Adam holding 1 parameter, shape (200, 16)``),
    for messages about an optimizer that does not hold the item table."""
    params = [p for g in getattr(optimizer, "param_groups", []) for p in g.get("params", ())
              if isinstance(p, torch.Tensor)]
    shapes = ", ".join(_shape(p).removeprefix("shape ") for p in params[:3]) + (
        f" and {len(params) - 3} more" if len(params) > 3 else "")
    plural = "" if len(params) == 1 else "s"
    held = f"{len(params)} parameter{plural}" + (f", shape{plural} {shapes}" if params else "")
    return f"{type(optimizer).__name__} holding {held}"


def embedding_names(module: torch.nn.Module, prefix: str | None = None) -> str:
    """The dotted names of the ``nn.Embedding``s inside ``module`` (what an item table is
    named by; under ``prefix``, the name ``module`` was reached by), for messages; ``none``
    when it holds none."""
    names = [f"{prefix}.{name}" if prefix else name
             for name, sub in module.named_modules() if name and isinstance(sub, torch.nn.Embedding)]
    return ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "") if names else "none"


RECORDED_SETTINGS = ("momentum", "weight_decay")
"""The item optimizer's settings a trace header's config records: what C1 reads beside its name."""


def optimizer_settings(optimizer: object, groups: list[dict[str, Any]]) -> dict[str, float]:
    """:data:`RECORDED_SETTINGS` of the item table's optimizer as it starts: a torch
    optimizer's from ``groups`` (its param groups holding the table) where every group has
    the setting and they agree; another's (Keras') from its attributes (a Keras
    ``weight_decay`` of None is none: 0). A setting the optimizer lacks (Adam has no
    ``momentum``) or that its groups disagree on is left out."""
    out: dict[str, float] = {}
    for key in RECORDED_SETTINGS:
        if hasattr(optimizer, "param_groups"):
            values = [g.get(key) for g in groups]
        else:
            value = getattr(optimizer, key, "absent")
            values = [0.0 if key == "weight_decay" and value is None else value]
        numbers = {float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if values and len(numbers) == 1 and len(values) == sum(isinstance(v, (int, float)) for v in values):
            out[key] = numbers.pop()
    return out


def learning_rate(optimizer: object, groups: list[dict[str, Any]]) -> float | None:
    """The item table's learning rate now: a torch optimizer's from ``groups`` (its param
    groups holding the table, else all of them) when they agree; another's (Keras')
    ``learning_rate``, a schedule evaluated at the optimizer's ``iterations`` (the step to come)."""
    if optimizer is None:
        return None
    if not hasattr(optimizer, "param_groups"):
        rate = getattr(optimizer, "learning_rate", None)
        return None if rate is None else float(rate)
    lrs = {float(g["lr"]) for g in groups or getattr(optimizer, "param_groups") if "lr" in g}
    return lrs.pop() if len(lrs) == 1 else None


def item_like(names: list[str]) -> str:
    """Which of ``names`` (a model's embeddings) to show in a message's example: the first
    named like an item table, else the first (``item_embedding`` when there is none)."""
    return next((n for n in names if "item" in n.lower()), names[0] if names else "item_embedding")


def named_table(module: torch.nn.Module, name: str, owner: str, fix: str) -> Any:
    """The attribute at the dotted ``name`` of ``module`` (an adapter's ``items=``), or a
    TrainingError naming ``owner`` (what ``module`` is, for the message), the embeddings
    ``module`` holds by the names to pass, and ``fix`` (how to pass one, in the adapter's words)."""
    try:
        return operator.attrgetter(name)(module)
    except AttributeError:
        raise TrainingError(
            f"items: {owner} has no attribute {name!r} (its embeddings: {embedding_names(module)}); {fix}"
        ) from None


class QuerySource:
    """The head share's fixed query sample, read as current vectors at each record."""

    def __init__(self, queries: Queries, items: ItemSource, n_queries: int, rng: np.random.Generator) -> None:
        self._fixed: torch.Tensor | None = None
        self._call: Callable[[], torch.Tensor] | None = None
        self._rows: torch.Tensor | None = None
        self._items = items
        if queries is None:
            picked = np.sort(rng.choice(items.n_items, min(n_queries, items.n_items), replace=False))
            self._rows = torch.from_numpy(picked.astype(np.int64))
            self.kind, self.n = "items", int(picked.shape[0])
        elif isinstance(queries, (torch.Tensor, np.ndarray)):
            fixed = torch.as_tensor(queries)
            if fixed.ndim != 2 or fixed.shape[1] != items.dim:
                raise TrainingError(
                    f"queries must be (n_queries, {items.dim}) to match the item table, got shape {tuple(fixed.shape)}"
                )
            self._fixed = fixed.detach()
            self.kind, self.n = "vectors", int(fixed.shape[0])
        elif callable(queries):
            self._call = queries
            self.kind, self.n = "callable", 0
        else:
            raise TrainingError(f"queries must be a tensor, an array, a callable or None, not {type(queries).__name__}")

    n_zero = 0
    """Query vectors left out at the last read: zero as served (:meth:`vectors`)."""
    _warned = False

    def vectors(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """(n_queries, dim), detached, in ``dtype`` (the table's: as served), less the vectors
        zero as served: they score every item 0 and rank nothing, so they are not queried, by
        ``check``'s rule (:func:`~auditor.loading.zero_queries.queried_rows`); :attr:`n_zero`
        counts them, and the first read that finds any warns."""
        with quiet():
            if self._fixed is not None:
                out = self._fixed
            elif self._call is not None:
                out = self._call().detach()
            else:
                assert self._rows is not None
                out = self._items.rows(self._rows)
        if out.ndim != 2 or out.shape[1] != self._items.dim:
            raise TrainingError(f"the queries callable returned shape {tuple(out.shape)}, not (n, {self._items.dim})")
        self.n = int(out.shape[0])
        out = out if dtype is None else out.to(dtype)
        queried = torch.from_numpy(queried_rows((out != 0).cpu().numpy())).to(out.device)
        self.n_zero = self.n - int(queried.sum())
        if self.n_zero and not self._warned:
            self._warned = True
            unmeasured = "so the head shares are unmeasured" if self.n_zero == self.n else "left out of the head shares"
            warnings.warn(f"{self.n_zero:,} of {self.n:,} query vectors are zero (they score every item 0): "
                          f"{unmeasured}, as check leaves them out; each record's n_zero_queries counts them",
                          MonitorInputWarning, stacklevel=5)
        return out[queried] if self.n_zero else out
