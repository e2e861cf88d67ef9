"""Optimizer steps in plain eager mode, without importing torch's compiler stack.

torch.optim marks its bookkeeping (``add_param_group``, ``zero_grad``, ``state_dict``,
``load_state_dict``) as "not to be compiled", and that mark imports ``torch._dynamo``
on first use; ``step`` imports it too, for graph breaks. Nothing is compiled here, yet
the import (sympy and the compiler stack with it) costs about two seconds, more than
the whole audit of a small model. Inside :func:`compiler_free` the marks resolve to
the methods themselves and :func:`eager_step` runs the step's own code under no_grad,
which is what the wrapper does outside compilation. Once ``torch._dynamo`` is loaded
(the caller compiles, say), both leave torch exactly as it is.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.optim import optimizer as optim_module

_MARKED_METHODS = ("add_param_group", "zero_grad", "state_dict", "load_state_dict")
"""Optimizer methods torch wraps with its lazy ``_disable_dynamo``."""
_DISABLE_ATTRIBUTE = "__dynamo_disable"
"""Where that wrapper caches the disabled function (torch/_compile.py)."""


def _compiler_loaded() -> bool:
    return "torch._dynamo" in sys.modules


@contextmanager
def compiler_free() -> Iterator[None]:
    """Optimizer bookkeeping without importing ``torch._dynamo`` for the block's duration."""
    if _compiler_loaded():
        yield
        return
    marked: list[Any] = []
    for name in _MARKED_METHODS:
        inner = getattr(getattr(torch.optim.Optimizer, name, None), "__wrapped__", None)
        if inner is not None and not hasattr(inner, _DISABLE_ATTRIBUTE):
            setattr(inner, _DISABLE_ATTRIBUTE, inner)
            marked.append(inner)
    try:
        yield
    finally:
        for inner in marked:  # a later compile finds torch's wrapper untouched
            if getattr(inner, _DISABLE_ATTRIBUTE, None) is inner:
                delattr(inner, _DISABLE_ATTRIBUTE)


def eager_step(optimizer: torch.optim.Optimizer) -> None:
    """``optimizer.step()``; without the graph-break wrapper when that changes nothing.

    The wrapper only sets grad mode to the optimizer's ``differentiable`` flag and marks
    graph breaks; step hooks run in its outer layer, so an optimizer with hooks, a
    differentiable one, or a loaded compiler takes the ordinary call.
    """
    if _compiler_loaded() or optimizer.defaults.get("differentiable") or _has_hooks(optimizer):
        optimizer.step()
        return
    raw = inspect.unwrap(type(optimizer).step)
    with torch.no_grad():
        raw(optimizer)


def _has_hooks(optimizer: torch.optim.Optimizer) -> bool:
    """Whether step pre/post hooks are registered, globally or on ``optimizer``."""
    registries = (
        getattr(optim_module, "_global_optimizer_pre_hooks", None),
        getattr(optim_module, "_global_optimizer_post_hooks", None),
        getattr(optimizer, "_optimizer_step_pre_hooks", None),
        getattr(optimizer, "_optimizer_step_post_hooks", None),
    )
    return any(r is None or len(r) > 0 for r in registries)
