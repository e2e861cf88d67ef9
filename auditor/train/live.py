"""A live model for ``popaudit retrain`` checkpoints, so probes can step the real towers.

The module is rebuilt from the recorded config and state dict; item features and user
histories (which some encoders need) and the item tower's optimizer state are read
from the checkpoint file itself, so nothing beyond ``bundle.source``, ``bundle.config``
and ``bundle.state_dict`` is asked of the loader.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from auditor.errors import ModelLoadError, ProbeError, setting
from auditor.model import CHECKPOINT_MARKER, ModelBundle
from auditor.train.losses import two_tower_loss
from auditor.train.models import NEEDS_FEATURES, NEEDS_HISTORIES, ModelSpec, TwoTower, build_model
from auditor.train.optim import make_optimizer


class PopauditLiveModel:
    """:class:`auditor.model.LiveModel` of a popaudit checkpoint."""

    module: torch.nn.Module
    loss_name: str | None

    def __init__(
        self,
        module: TwoTower,
        config: Mapping[str, Any],
        optimizer_state: Mapping[str, Any] | None = None,
    ) -> None:
        self.module = module
        self.config = dict(config)
        self.loss_name = str(config["loss"])
        self.temperature = float(config.get("temperature", 0.1))
        self._optimizer_state = optimizer_state

    def encode_items(self, module: torch.nn.Module, rows: torch.Tensor) -> torch.Tensor:
        """Embeddings (len(rows), dim) of the items at table rows ``rows``."""
        return module.item_tower(rows)  # type: ignore[operator]

    def encode_users(self, module: torch.nn.Module, rows: torch.Tensor) -> torch.Tensor:
        """Query embeddings (len(rows), dim) of the users at rows ``rows``."""
        return module.user_tower(rows)  # type: ignore[operator]

    def item_parameters(self, module: torch.nn.Module) -> list[torch.nn.Parameter]:
        """The item tower's parameters, in the order the item optimizer holds them."""
        return list(module.item_tower.parameters())  # type: ignore[union-attr]

    def loss(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        """The training loss of matched (user, item) embeddings, as in training."""
        return two_tower_loss(self.loss_name or "", users, items, self.temperature)

    def make_optimizer(self, module: torch.nn.Module) -> torch.optim.Optimizer:
        """The item tower's optimizer over ``module``'s item parameters, state loaded.

        The saved state (momentum buffers, Adam moments) is copied in, so a probe step
        acts like the next step of training would; tensors are cast to the parameters'
        dtype (a float64 probe copy works).
        """
        cfg = self.config
        missing = [key for key in ("optimizer", "lr") if cfg.get(key) is None]
        if missing:  # a hand-edited or foreign config: say so, never a bare KeyError
            raise ProbeError(
                f"the checkpoint's config records no {' and no '.join(map(repr, missing))}: the update probe steps "
                "the item tower with the optimizer training used and cannot rebuild it (the conditions still read "
                f"the declared {setting('optimizer')} and {setting('lr')})"
            )
        momentum = float(cfg.get("momentum", 0.0)) or 0.9
        opt = make_optimizer(
            str(cfg["optimizer"]),
            self.item_parameters(module),
            lr=float(cfg["lr"]),
            momentum=momentum,
            weight_decay=float(cfg.get("weight_decay", 0.0)),
        )
        if self._optimizer_state is not None:
            opt.load_state_dict(copy.deepcopy(dict(self._optimizer_state)))
        return opt

    @classmethod
    def from_checkpoint(
        cls,
        ckpt: Mapping[str, Any],
        *,
        state_dict: Mapping[str, torch.Tensor] | None = None,
        config: Mapping[str, Any] | None = None,
        source: str = "checkpoint",
    ) -> PopauditLiveModel:
        """Rebuild from a checkpoint dict (``state_dict``/``config`` override its own)."""
        recorded = config if config else ckpt.get("config") or {}
        if not isinstance(recorded, Mapping):  # a hand-edited file; dict("...") would raise ValueError
            raise ModelLoadError(f"{source}: the recorded 'config' is a {type(recorded).__name__}, not a mapping")
        config = dict(recorded)
        state_dict = state_dict if state_dict else ckpt.get("state_dict")
        if not config or not state_dict:
            raise ModelLoadError(f"{source}: a popaudit checkpoint needs 'config' and 'state_dict'")
        try:
            spec = ModelSpec.from_config(config)
        except TypeError as exc:
            raise ModelLoadError(f"{source}: the recorded config is incomplete: {exc}") from exc
        features = ckpt.get("item_features") if spec.item_encoder in NEEDS_FEATURES else None
        histories = ckpt.get("user_histories") if spec.user_encoder in NEEDS_HISTORIES else None
        with torch.random.fork_rng(devices=[]):  # the initial values are overwritten below
            module = build_model(spec, item_features=features, user_histories=histories)
        try:
            module.load_state_dict(dict(state_dict), strict=True)
        except RuntimeError as exc:
            raise ModelLoadError(f"{source}: the state dict does not fit the recorded config: {exc}") from exc
        return cls(module, config, ckpt.get("optimizer_state_dict"))

    @classmethod
    def from_bundle(cls, bundle: ModelBundle) -> PopauditLiveModel:
        """Rebuild from a loaded bundle: its state dict, config and optimizer state as the
        restricted reader read them. The file is read again (``torch.load``, weights only)
        only for the item features or user histories a feature or history tower needs, or
        to say what is wrong with a config that is not a mapping: a second read of a large
        id list costs as much as the first (2 s for 1M ids)."""
        config, reread = bundle.config, True
        if isinstance(config, Mapping):
            item = str(config.get("item_encoder", ModelSpec.item_encoder))
            reread = item in NEEDS_FEATURES or str(config.get("user_encoder", ModelSpec.user_encoder)) in NEEDS_HISTORIES
        ckpt = read_checkpoint(bundle.source) if reread else {"optimizer_state_dict": bundle.optimizer_state}
        return cls.from_checkpoint(
            ckpt, state_dict=bundle.state_dict, config=bundle.config, source=str(bundle.source)
        )


def read_checkpoint(path: Path) -> dict[str, Any]:
    """A popaudit checkpoint dict, loaded with ``weights_only=True`` (memory-mapped)."""
    try:
        ckpt = torch.load(Path(path), map_location="cpu", weights_only=True, mmap=True)
    except Exception as exc:  # torch raises several types for a bad file
        raise ModelLoadError(f"{path}: cannot read as a popaudit checkpoint: {exc}") from exc
    if not isinstance(ckpt, dict) or CHECKPOINT_MARKER not in ckpt:
        raise ModelLoadError(f"{path}: not a popaudit checkpoint (no {CHECKPOINT_MARKER!r} key)")
    return ckpt


def load_live_model(path: Path) -> PopauditLiveModel:
    """The live model of the popaudit checkpoint at ``path``."""
    path = Path(path)
    return PopauditLiveModel.from_checkpoint(read_checkpoint(path), source=str(path))
