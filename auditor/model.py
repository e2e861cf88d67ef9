"""Value objects handed from loading to measuring: the model, the item statistics, the
query population and the held-out sets.

Data flows one way (docs/architecture.md): loaders build a :class:`ModelBundle` and
:class:`ItemStats`; metrics, retrieval and conditions read them and never reach back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
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

    Built by ``popaudit retrain`` checkpoints and plugins (``popaudit_live_model``, which
    may wrap a TorchScript or trusted-pickle module: popaudit does not run those itself,
    not knowing which methods encode items and users). Probes always work on a deep copy of
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
    item_dtype: str | None = None
    """The dtype the file stores the item table in (``bfloat16``, ``float16``, ``float64``...),
    which ``item_table`` (float32) no longer shows: the rounding its norms carry
    (:func:`~auditor.metrics.norm_rounding.norm_precision`). Set by :func:`~auditor.loading.finish_bundle`."""
    user_table: np.ndarray | None = None
    user_key: str | None = None
    item_ids: np.ndarray | None = None
    """Raw item id of each row (from the file or --item-ids); None means row index = id."""
    user_ids: np.ndarray | None = None
    """Raw user id of each user-table row (from the file or --user-ids); None: row = id."""
    item_ids_source: str | None = None
    """Where ``item_ids`` came from, for the report (None: rows are taken as ids)."""
    item_padding_row: int | None = None
    """The stored item tensors' row left out as padding (Keras mask_zero, nn.Embedding
    padding_idx: :mod:`auditor.loading.padding_rows`); an item bias drops it too."""
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
    """float32 (n_items,): the model's per-item bias term (LightFM, cornac, implicit BPR, a
    state dict's ``item_bias`` tensor), a second channel for popularity beside the norms,
    served with the table (:mod:`auditor.loading.item_bias`); None when the model has none."""
    nonfinite_user_rows: np.ndarray | None = None
    """int64 user-table rows holding NaN or infinite values (None: none), recorded at load
    (:func:`auditor.loading.validation.validate_user_table`); each reader of user rows
    refuses those it would use."""
    user_rows_unknown: str | None = None
    """Why the raw user id of each user-table row is unknown although the rows are not the
    ids (a framework numbered them and the rule could not be reproduced): retrieval then
    queries every user row, nothing excluded, and says so."""
    log_id_rule: LogIdRule | None = None
    """A framework's own rule giving the raw ids of the rows from the training log
    (RecBole); applied once the log is known, before the log is aligned with the rows."""
    graph_ops: Mapping[str, tuple[str, ...]] | None = None
    """What the file's graph computes from the rows of each table before the score, by
    side (``item``, ``user``; an ONNX graph's nodes after each ``Gather``, in words);
    None where the file has no graph, and the tensors' names tell the sides apart."""
    warnings: list[str] = field(default_factory=list)
    replaced_globals: dict[str, int] | None = None
    """Globals the file's pickle named that popaudit replaced by inert placeholders ->
    count; {} for a file read with no such global (or holding no pickle); None: not
    recorded by the loader that read the file (a full unpickle, or a plugin's loader
    that does not report them: plugins/README.md). A plugin that reads a pickle with
    ``auditor.loading.torch_archive.read_torch_file`` passes its ``placeholders`` here."""
    loader: str = ""
    """Who read the file, for messages: ``the built-in loader``, ``plugin 'file:x.py'
    (popaudit_load_model)``; set by :func:`auditor.loading.load_model` ('' for a bundle
    built by hand)."""
    globals_unrecorded: str = ""
    """Why ``replaced_globals`` is None, as the report and the ``unsafe_globals`` gate say it
    (set by popaudit's loading: the full unpickle, or the plugin loader that read the file)."""
    item_bias_key: str | None = None
    """Where ``item_biases`` came from in the file (a state-dict key such as
    ``item_bias.weight``, implicit's ``item_factors[:, 8]``), for the report."""

    @property
    def n_items(self) -> int:
        return int(self.item_table.shape[0])

    @property
    def dim(self) -> int:
        return int(self.item_table.shape[1])

    def tensors_beside_tables(self) -> tuple[list[str], list[str]]:
        """The file's tensors other than the two tables: (item-side, unattributed) keys.

        Item-side keys name ``item`` and hold floating-point weights (a feature projection,
        an item MLP; an integer tensor, such as an index buffer, is no weight, as on the user
        side): with them the item encoder is more than the table, and an audit of the table
        alone is not of the vectors served. The item bias (``item_bias_key``) is neither: it
        is served with the table. Unattributed keys name neither tower. C2/C3 and the load
        stage's warning read this one split."""
        others = [k for k in self.state_dict if k not in (self.item_key, self.user_key, self.item_bias_key)]
        item_side = [k for k in others if "item" in k.lower() and is_weight(self.state_dict[k])]
        unclear = [k for k in others if "item" not in k.lower() and "user" not in k.lower()]
        return item_side, unclear

    def user_side_tensors(self) -> list[str]:
        """The file's floating-point tensors beside the tables that name the user (query)
        tower: with them the queries the model serves are not the user rows. One number per
        user row (a bias, a count) changes every score of that user alike and ranks nothing,
        and an integer tensor (an id map) is no weight: neither counts."""
        rows = None if self.user_table is None else int(self.user_table.shape[0])
        found = []
        for key, tensor in self.state_dict.items():
            low = key.lower()
            if key in (self.item_key, self.user_key) or "item" in low or not ("user" in low or "query" in low):
                continue
            shape = tuple(getattr(tensor, "shape", ()))
            if is_weight(tensor) and not (rows is not None and shape in ((rows,), (rows, 1))):
                found.append(key)
        return found


def is_weight(tensor: object) -> bool:
    """A floating-point tensor (a weight); integer buffers (index maps, counters) are not."""
    return bool(getattr(tensor, "is_floating_point", lambda: False)())


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
    from_counts_file: bool = False
    """True when the counts came from a counts file (``frequencies``), not a log."""


@dataclass
class InteractionPairs:
    """(user, item-row) pairs of a log, for history queries and probe batches."""

    user_index: np.ndarray
    """int64: dense user index 0..n_users-1 in order of first appearance (recorded: table row)."""
    item_rows: np.ndarray
    """int64: table row of the item (only interactions whose item has a row)."""
    user_ids: np.ndarray
    """Raw user id of each dense user index (recorded: each row's, as ``--user-ids`` names it)."""
    source: Path | None = None
    """The log the pairs were read from (None: pairs recorded in a checkpoint)."""

    def __len__(self) -> int:
        return int(self.item_rows.shape[0])


@dataclass(frozen=True)
class QueryPopulation:
    """The queries every scoring serves, who they are, and what each has seen."""

    vectors: np.ndarray
    """float32 (n_queries, dim): no zero rows."""
    source: str
    """``users``, ``history`` or ``file`` (module docstring)."""
    description: str
    """Who is queried, in one sentence (the report's ``queries`` definition)."""
    raw_ids: np.ndarray | None = None
    """Raw user id of each query (None: a query file, no identity)."""
    source_rows: np.ndarray | None = None
    """Row of the user table (``users``) or query file (``file``) of each query; None: histories."""
    seen_indptr: np.ndarray | None = None
    """CSR (n_queries + 1,) over ``seen_rows``: each query's training item rows (None: unknown)."""
    seen_rows: np.ndarray | None = None
    keep_seen: bool = False
    """Training items stay among the candidates (``keep_seen``)."""
    seen_source: str = ""
    """Where the training items came from (the log's path, or the checkpoint's pairs)."""
    what: str = ""
    """What the vectors were read from, for messages (``query file q.npy``)."""
    n_eligible: int = 0
    """Users (or file rows) the sample was drawn from."""
    eligible_ids: np.ndarray | None = None
    """Raw ids of every eligible user, sampled or not (to tell held-out users apart)."""
    sampled: bool = False
    seed: int = 0
    n_zero: int = 0
    """Queries dropped for a zero vector."""
    unserved_ids: np.ndarray | None = None
    """Raw ids of the trained users dropped for a zero vector (None: none, or no identity):
    served nothing, they stay in the population, as rows after the queries' (:attr:`row_ids`)."""
    unserved_seen: tuple[np.ndarray, np.ndarray] | None = None
    """CSR ``(indptr, item_rows)`` of each unserved user's training items (None: unknown)."""
    n_user_rows: int | None = None
    """Rows of the user table (None: none was queried)."""
    n_untrained_rows: int | None = None
    """User-table rows of users who never appear in the training log (not queried; None: unknown)."""
    n_unmatched_users: int = 0
    """Training-log users without a user-table row (cannot be queried)."""
    warnings: tuple[str, ...] = ()

    @property
    def n_queries(self) -> int:
        return int(self.vectors.shape[0])

    @property
    def exclude(self) -> tuple[np.ndarray, np.ndarray] | None:
        """CSR of each query's excluded item rows, or None when nothing is excluded."""
        if self.keep_seen or self.seen_indptr is None or self.seen_rows is None:
            return None
        return self.seen_indptr, self.seen_rows

    @property
    def n_unserved(self) -> int:
        return 0 if self.unserved_ids is None else int(self.unserved_ids.shape[0])

    @property
    def n_rows(self) -> int:
        """The population's rows: the queries, then the unserved users (docs/measures.md)."""
        return self.n_queries + self.n_unserved

    @property
    def row_ids(self) -> np.ndarray | None:
        """Raw user id of each row: the queries', then the unserved users'."""
        ids = self.raw_ids
        return ids if ids is None or self.unserved_ids is None else np.concatenate([ids, self.unserved_ids])

    @property
    def row_profiles(self) -> tuple[np.ndarray, np.ndarray] | None:
        """CSR of each row's training items (None: unknown), what the user groups are drawn among."""
        if self.seen_indptr is None or self.seen_rows is None or self.unserved_seen is None:
            return None if self.seen_indptr is None or self.seen_rows is None else (self.seen_indptr, self.seen_rows)
        indptr, rows = self.unserved_seen
        return np.concatenate([self.seen_indptr, indptr[1:] + self.seen_indptr[-1]]), np.concatenate([self.seen_rows, rows])

    @property
    def seen_items(self) -> str:
        """``excluded``, ``kept`` (``keep_seen``) or ``unknown`` (no user identity or no log)."""
        if self.seen_indptr is None:
            return "unknown"
        return "kept" if self.keep_seen else "excluded"


@dataclass(frozen=True)
class HeldOutQueries:
    """The held-out items of the queried users who have some, at their query positions:
    what held-out accuracy scores the served lists against (docs/measures.md)."""

    positions: np.ndarray
    """int64: the population position (row of every scoring's lists) of each evaluated user."""
    indptr: np.ndarray
    """int64 CSR over ``items``: evaluated user u's held-out rows are ``items[indptr[u]:indptr[u + 1]]``."""
    items: np.ndarray
    """int64: held-out item rows, distinct and ascending within each user."""
    source: str
    """The holdout (a file, or a checkpoint's recorded split)."""
    user_ids: np.ndarray
    """Raw user id of each evaluated user: the trade-off's bootstrap resamples them in this id's order."""
    n_interactions: int = 0
    """Held-out interactions: a file's rows, or those a recorded split took out of training."""
    n_dropped: int = 0
    """Held-out interactions left out (empty ids, items without a row, users without a row)."""
    n_dropped_users: int = 0
    """Held-out users without a user-table row."""
    n_not_in_training: int = 0
    """Held-out users absent from the training log (no trained vector) left out of the accuracy."""
    n_not_sampled: int = 0
    """Held-out users who trained but were sampled out of the queries (``max_queries``)."""
    warnings: tuple[str, ...] = ()
    repeats_dropped: bool = False
    """Held-out repeats of a training pair were dropped before they were stored (a popaudit
    checkpoint's recorded split); False: kept, misses with training items excluded (RecBole's)."""
    n_repeats_dropped: int = 0
    """Of ``n_interactions``, those the recorded split dropped as repeats (not evaluated)."""
    fingerprint: str = ""  # the held-out pairs' content (loading/fingerprint.py)
    n_queried: int = 0
    """The queried users' positions come first (only read with :attr:`untrained`)."""
    untrained: QueryPopulation | None = None
    """Held-out users absent from the training log who are evaluated all the same, queried
    by the user vectors RecBole scores them with (RecBole's split: its own test ranks them
    so; ``what`` says which), their positions following the queried users'; accuracy alone
    ranks them, served lists included (None: none)."""

    @property
    def n_untrained(self) -> int:
        """Evaluated users absent from the training log (:attr:`untrained`)."""
        return 0 if self.untrained is None else self.untrained.n_queries

    def queried_only(self) -> HeldOutQueries:
        """Without the :attr:`untrained` users (counted as absent from the training log
        again): for lists served to the queried users alone."""
        if self.untrained is None:
            return self
        keep, counts = self.positions < self.n_queried, np.diff(self.indptr)
        indptr = np.concatenate([[0], np.cumsum(counts[keep])]).astype(np.int64)
        return replace(self, positions=self.positions[keep], indptr=indptr, items=self.items[np.repeat(keep, counts)],
                       user_ids=self.user_ids[keep], untrained=None,
                       n_not_in_training=self.n_not_in_training + int((~keep).sum()))

    @property
    def n(self) -> int:
        return int(self.positions.shape[0])

    def none_evaluated(self) -> str | None:
        """Why no held-out user is evaluated (None: some are), counted: the ``not_measured``
        reason of an accuracy with no user to average over."""
        if self.n:
            return None
        parts = [f"{count:,} {what}" for count, what in (
            (self.n_not_in_training, "absent from the training log (no trained vector, no history)"),
            (self.n_dropped_users, "without a row in the user table"),
            (self.n_not_sampled, "trained but not among the queried users"),
        ) if count]  # fmt: skip
        why = "; ".join(parts) if parts else "none left: every held-out interaction was left out (see the warnings)"
        return f"no held-out user of {self.source} can be evaluated, so accuracy is undefined; its users: {why}"
