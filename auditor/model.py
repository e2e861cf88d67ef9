"""Value objects handed from loading to measuring: the model and the item statistics.

Data flows one way (docs/architecture.md): loaders build a :class:`ModelBundle` and
:class:`ItemStats`; metrics, retrieval and conditions read them and never reach back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:  # annotations only: the values here never need torch loaded
    import torch

CHECKPOINT_MARKER = "popaudit_checkpoint"
CHECKPOINT_VERSION = 1
"""A ``popaudit retrain`` checkpoint is a dict whose ``CHECKPOINT_MARKER`` key holds the
format version: written by :mod:`auditor.train.loop`, read by the loader and the live model."""


@runtime_checkable
class LiveModel(Protocol):
    """A live two-tower model the numeric probes can evaluate and step.

    Built by ``popaudit retrain`` checkpoints, TorchScript/trusted-pickle modules (when
    their structure is understood) and plugins. Probes always work on a deep copy of
    ``module``; implementations must not keep hidden state outside it.
    """

    module: torch.nn.Module
    """Holds every trainable parameter of both towers."""

    loss_name: str | None
    """``infonce-cos``, ``infonce-dot``, ``cosine`` or a plugin's name; None if unknown."""

    def encode_items(self, module: torch.nn.Module, rows: torch.Tensor) -> torch.Tensor:
        """Embeddings (len(rows), dim) of the items at table rows ``rows`` (int64)."""
        ...

    def encode_users(self, module: torch.nn.Module, rows: torch.Tensor) -> torch.Tensor:
        """Query embeddings (len(rows), dim) of the users at rows ``rows`` (int64)."""
        ...

    def item_parameters(self, module: torch.nn.Module) -> list[torch.nn.Parameter]:
        """The parameters of the item tower (those C1-C3 are about)."""
        ...

    def loss(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        """Training loss (scalar) of a batch of matched user/item embeddings."""
        ...

    def make_optimizer(self, module: torch.nn.Module) -> torch.optim.Optimizer | None:
        """The optimizer the model was trained with, over ``module``'s parameters."""
        ...


@runtime_checkable
class LogIdRule(Protocol):
    """How a framework numbered raw ids as table rows, when only the training log tells
    which id each row holds (RecBole numbers ids in order of first appearance)."""

    def apply(
        self, bundle: ModelBundle, log: Path, fmt: str, user_col: str | None, item_col: str | None
    ) -> None:
        """Set ``bundle``'s item (and user) ids and their sources from ``log``; raise
        IdMappingError when the rule cannot be reproduced from it."""
        ...


@dataclass
class ModelBundle:
    """Everything popaudit could read from a model file.

    ``item_table`` is the (n_items, dim) float32 matrix of item embeddings whose norms are
    audited; row r is the item whose raw id is ``item_ids[r]`` (or r when ids are None).
    """

    source: Path
    format: str
    """How it was read: state_dict, checkpoint, lightning, recbole, popaudit, torchscript,
    pickle, safetensors, npy, parquet, or a plugin's name."""
    item_table: np.ndarray
    item_key: str | None = None
    user_table: np.ndarray | None = None
    user_key: str | None = None
    item_ids: np.ndarray | None = None
    """Raw item id of each row (from the file or --item-ids); None means row index = id."""
    user_ids: np.ndarray | None = None
    """Raw user id of each user-table row (from the file or --user-ids); None: row = id."""
    item_ids_source: str | None = None
    """Where ``item_ids`` came from, for the report (None: rows are taken as ids)."""
    user_ids_source: str | None = None
    """Where ``user_ids`` came from, for the report."""
    item_frequencies: np.ndarray | None = None
    """Training frequency per row, when the checkpoint recorded it (popaudit retrain)."""
    state_dict: Mapping[str, torch.Tensor] = field(default_factory=dict)
    optimizer_state: Mapping[str, Any] | None = None
    config: Mapping[str, Any] | None = None
    """Recorded training settings (config / hparams / hyper_parameters)."""
    live: LiveModel | None = None
    module: Any = None
    """With ``--trust-pickle`` only: the real object the file unpickles to (``torch.load`` or
    ``torch.jit.load``), for a plugin's ``popaudit_live_model`` hook; None otherwise, since
    popaudit reads model files without running code from them."""
    train_pairs: InteractionPairs | None = None
    """(user, item-row) pairs recorded in the checkpoint (popaudit retrain), for probes."""
    holdout_pairs: InteractionPairs | None = None
    """Held-out (user, item-row) pairs a checkpoint recorded (``retrain --holdout-fraction``):
    never trained on, for accuracy when no holdout file is given."""
    item_biases: np.ndarray | None = None
    """float32 (n_items,): the model's per-item bias term (LightFM, cornac, implicit BPR),
    a second channel for popularity beside the norms; None when the model has none."""
    user_rows_unknown: str | None = None
    """Why the raw user id of each user-table row is unknown although the rows are not the
    ids (a framework numbered them and the rule could not be reproduced): retrieval then
    queries every user row, nothing excluded, and says so."""
    log_id_rule: LogIdRule | None = None
    """A framework's own rule giving the raw ids of the rows from the training log
    (RecBole); applied once the log is known, before the log is aligned with the rows."""
    warnings: list[str] = field(default_factory=list)
    replaced_globals: dict[str, int] | None = None
    """Globals the file's pickle named that popaudit replaced by inert placeholders ->
    count; {} for files the built-in readers read with no such global (or no pickle);
    None when unknown (a plugin's loader, a full unpickle)."""

    @property
    def n_items(self) -> int:
        return int(self.item_table.shape[0])

    @property
    def dim(self) -> int:
        return int(self.item_table.shape[1])


@dataclass
class ItemStats:
    """Training-log statistics aligned with the rows of the item table."""

    frequencies: np.ndarray
    """int64 (n_items,): interactions per table row."""
    n_interactions: int
    """Interactions read (including those whose item is not in the table)."""
    n_unmapped: int = 0
    """Interactions whose item id has no row in the table (excluded from frequencies)."""
    n_unmapped_ids: int = 0
    """Distinct item ids in the log that have no table row."""
    user_counts: np.ndarray | None = None
    """int64 (n_items,): distinct users per row, when the log has a user column."""
    n_users: int | None = None
    source: Path | None = None
    from_checkpoint: bool = False
    """True when frequencies came from a popaudit checkpoint, not an interaction log."""


@dataclass
class InteractionPairs:
    """(user, item-row) pairs of a log, for history queries and probe batches."""

    user_index: np.ndarray
    """int64: dense user index 0..n_users-1 in order of first appearance."""
    item_rows: np.ndarray
    """int64: table row of the item (only interactions whose item has a row)."""
    user_ids: np.ndarray
    """Raw user id of each dense user index."""
    source: Path | None = None
    """The log the pairs were read from (None: pairs recorded in a checkpoint)."""

    def __len__(self) -> int:
        return int(self.item_rows.shape[0])
