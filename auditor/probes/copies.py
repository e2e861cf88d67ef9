"""Working copies of the live model, and its item encoder as a function of parameters.

Every probe runs on a copy (float64 where the model runs in it), never on the user's
module; torch.func needs the encoder as ``f(parameters) -> embeddings``.
"""

from __future__ import annotations

import copy
import io
from collections.abc import Callable

import torch
from torch.func import functional_call

from auditor.errors import ProbeError
from auditor.model import LiveModel
from auditor.plugins.manager import PLUGIN_FAILURES, reraise_interrupt

ItemFunction = Callable[[dict[str, torch.Tensor]], torch.Tensor]


def tolerance(dtype: torch.dtype) -> float:
    """Relative tolerance below which a probe quantity counts as zero for ``dtype``
    (16-bit floats: eight units in the last place, their rounding alone)."""
    if dtype == torch.float64:
        return 1e-9
    if dtype.is_floating_point and torch.finfo(dtype).bits < 32:
        return max(1e-4, 8 * torch.finfo(dtype).eps)
    return 1e-4


def probe_dtype(params: torch.dtype, output: torch.dtype) -> torch.dtype:
    """The precision a probe's figures carry: the coarser of the parameters' dtype and the
    dtype the encoder returns (float64 parameters behind a ``.float()`` cast give float32
    outputs, whose rounding a float64 tolerance would read as curvature or sharing)."""
    if not output.is_floating_point:
        return params
    return output if torch.finfo(output).eps > torch.finfo(params).eps else params


def one_dtype(users: torch.Tensor, items: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The towers' outputs cast to one dtype, the coarser of theirs, before ``live.loss``.

    The probes turn the module to float64, so a tower that ends in ``.float()`` returns
    float32 beside the other tower's float64, which the loss's ``u @ qᵀ`` refuses; in
    training both ran in the module's float32, which the coarser dtype reproduces."""
    if not (users.dtype.is_floating_point and items.dtype.is_floating_point) or users.dtype == items.dtype:
        return users, items
    dtype = probe_dtype(users.dtype, items.dtype)
    return users.to(dtype), items.to(dtype)


def working_copy(
    live: LiveModel, *, float64: bool = True, device: str = "cpu"
) -> tuple[torch.nn.Module, torch.dtype]:
    """A deep copy of ``live.module`` in float64 when the model runs in it, else as is,
    on ``device`` (``--device``; the probes' inputs follow the copy there)."""
    if float64:
        try:
            module64 = _on(_clone(live.module).double(), device)
            with torch.no_grad():
                live.encode_items(module64, torch.zeros(1, dtype=torch.int64, device=device))
            return module64, torch.float64
        except PLUGIN_FAILURES as exc:  # a model that cannot run in float64 is probed as is
            reraise_interrupt(exc)  # anything else its code raises, checked_live calls it again to say
    module = _on(_clone(live.module), device)
    dtype = next((p.dtype for p in module.parameters()), torch.float32)
    return module, dtype


def _on(module: torch.nn.Module, device: str) -> torch.nn.Module:
    """``module`` on ``device`` (the CPU copy itself when ``device`` is the CPU)."""
    return module if device == "cpu" else module.to(device)


def module_device(module: torch.nn.Module) -> torch.device:
    """Where ``module``'s parameters are (the CPU for a module without any)."""
    return next((p.device for p in module.parameters()), torch.device("cpu"))


def _clone(module: torch.nn.Module) -> torch.nn.Module:
    """A deep copy; TorchScript modules go through save/load, because deepcopy leaves
    their parameters non-leaf (an optimizer then refuses them)."""
    if isinstance(module, torch.jit.ScriptModule):
        buffer = io.BytesIO()
        torch.jit.save(module, buffer)
        buffer.seek(0)
        loaded: torch.nn.Module = torch.jit.load(buffer, map_location="cpu")  # type: ignore[no-untyped-call]
        return loaded
    return copy.deepcopy(module)


class _ItemEncoder(torch.nn.Module):
    """Wraps ``live.encode_items`` as a forward so torch.func can substitute parameters."""

    _live: LiveModel

    def __init__(self, live: LiveModel, module: torch.nn.Module) -> None:
        super().__init__()
        self.inner = module
        object.__setattr__(self, "_live", live)  # not a submodule: live only holds code

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        return self._live.encode_items(self.inner, rows)


def _item_parameter_dict(live: LiveModel, module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Item-tower parameters by their name in the :class:`_ItemEncoder` wrapper."""
    names = {id(p): name for name, p in module.named_parameters(remove_duplicate=False)}
    out: dict[str, torch.Tensor] = {}
    for p in live.item_parameters(module):
        if id(p) not in names:
            raise ProbeError("live.item_parameters returned a tensor that is not a parameter of the module")
        out[f"inner.{names[id(p)]}"] = p.detach()
    if not out:
        raise ProbeError("the live model reports no item-tower parameters")
    return out


def item_function(
    live: LiveModel, module: torch.nn.Module, rows: torch.Tensor
) -> tuple[ItemFunction, dict[str, torch.Tensor]]:
    """(f, θ): the embeddings of ``rows`` as a function of the item-tower parameters, and θ."""
    wrapper = _ItemEncoder(live, module)
    params = _item_parameter_dict(live, module)
    rows = rows.to(module_device(module))

    def f(ps: dict[str, torch.Tensor]) -> torch.Tensor:
        out: torch.Tensor = functional_call(wrapper, ps, (rows,))
        return out

    return f, params
