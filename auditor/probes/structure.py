"""The item tower's structure: which layer types it is built from (evidence for C2/C3)."""

from __future__ import annotations

import torch

from auditor.model import LiveModel
from auditor.probe_results import TowerKind, TowerLayers

_NONLINEAR = {
    "relu", "relu6", "leakyrelu", "prelu", "rrelu", "elu", "selu", "celu", "gelu", "silu",
    "mish", "sigmoid", "tanh", "softplus", "softsign", "hardtanh", "hardswish",
    "hardsigmoid", "logsigmoid", "softmax", "logsoftmax", "glu", "tanhshrink",
    "layernorm", "rmsnorm", "groupnorm", "batchnorm1d", "batchnorm2d", "instancenorm1d",
    "multiheadattention", "transformerencoderlayer", "transformerencoder",
    "transformerdecoderlayer", "lstm", "gru", "rnn", "bilinear",
}
_LINEAR = {"linear", "lazylinear", "conv1d", "conv2d"}
_EMBEDDING = {"embedding", "embeddingbag"}
_NEUTRAL = {"dropout", "identity", "flatten", "unflatten", "sequential", "modulelist",
            "moduledict", "alphadropout"}


def item_tower_layers(live: LiveModel, module: torch.nn.Module) -> TowerLayers:
    """The layer types of the item tower, as far as the module's structure shows them.

    The tower is the smallest submodule holding every item parameter; when that is the
    whole model (towers side by side), only the layers owning item parameters are listed
    and activations between them cannot be attributed.
    """
    item_params = list(live.item_parameters(module))
    item_ids = {id(p) for p in item_params}
    owners = [
        name
        for name, m in module.named_modules()
        if any(id(p) in item_ids for p in m.parameters(recurse=False))
    ]
    n_params = int(sum(p.numel() for p in item_params))
    modules = dict(module.named_modules())  # get_submodule is not supported on ScriptModules
    prefix = _common_prefix(owners)
    tower = modules[prefix] if prefix else module
    other = {id(p) for p in tower.parameters()} - item_ids
    if other:  # the common ancestor also holds user-tower parameters
        # Widen each owner to its largest ancestor holding item parameters only (so an
        # ``item_mlp`` Sequential shows its activations); code in the shared parent's
        # forward stays invisible, hence not attributable.
        roots: dict[str, torch.nn.Module] = {}
        for name in owners:
            parts = name.split(".") if name else []
            best = name
            for cut in range(len(parts) - 1, 0, -1):
                candidate = ".".join(parts[:cut])
                if {id(p) for p in modules[candidate].parameters()} <= item_ids:
                    best = candidate
                else:
                    break
            roots[best] = modules[best]
        leaves = [m for root in roots.values() for m in root.modules() if not list(m.children())]
        attributable = False
    else:
        leaves = [m for m in tower.modules() if not list(m.children())]
        attributable = True
    types = [_type_name(m) for m in leaves]
    kinds = {_kind(t) for t in types} - {"neutral"}
    kind: TowerKind
    if kinds == {"embedding"} and len(owners) == 1:
        kind = "embedding"
    elif kinds <= {"linear"} and len(owners) == 1 and attributable:
        kind = "linear"
    elif "nonlinear" in kinds:
        kind = "nonlinear"
    elif "unknown" in kinds or not kinds:
        kind = "unknown"
    else:
        kind = "composed"  # e.g. an embedding followed by a shared linear layer
    return TowerLayers(
        tower=prefix or "(whole module)", layers=tuple(types), attributable=attributable, kind=kind,
        n_parameters=n_params,
    )


def _common_prefix(names: list[str]) -> str:
    if not names:
        return ""
    parts = [n.split(".") if n else [] for n in names]
    common: list[str] = []
    for segment in zip(*parts):
        if len(set(segment)) != 1:
            break
        common.append(segment[0])
    return ".".join(common)


def _type_name(m: torch.nn.Module) -> str:
    # TorchScript modules keep the Python class name in ``original_name``.
    return str(getattr(m, "original_name", None) or type(m).__name__)


def _kind(type_name: str) -> str:
    low = type_name.lower()
    if low in _EMBEDDING:
        return "embedding"
    if low in _LINEAR:
        return "linear"
    if low in _NONLINEAR:
        return "nonlinear"
    if low in _NEUTRAL:
        return "neutral"
    return "unknown"
