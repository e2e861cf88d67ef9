"""The training monitor: the popularity-bias figures of an item table while it trains.

One implementation for every loop: a plain PyTorch loop calls it around
``optimizer.step()``, the adapters (Lightning, Keras, RecBole) call it from their
trainers' hooks, and ``popaudit retrain`` trains with it (its per-epoch trace is the
monitor's epoch records). Every ``interval`` optimizer steps, and at every epoch end,
it records (docs/monitor.md): ρ of counts against norms and the log–log slope, the
angles between q_i and Δq_i of the items the step moved, their growth per update, the
head share of dot vs cosine top-K for a fixed query sample, the learning rate, wall
time. Records go to a trace file (JSON lines, on disk as each is taken), to MLflow and
TensorBoard when asked, and through the alerts.

Its computations never touch the training's random state (CPU RNG forked) nor its
autograd graph (``no_grad``).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import torch

from auditor import __version__
from auditor.errors import TrainingError
from auditor.metrics.frequency_norm import item_norms
from auditor.monitor.alerts import Alerts, act, check_action
from auditor.monitor.figures import (
    UpdateSample, angle_figures, head_figures, rank_figures, table_precision, update_sample,
)
from auditor.trace_schema import AlertEvent, TraceEnd, TraceHeader, TraceRecord
from auditor.monitor.sinks import log_each, open_outputs
from auditor.monitor.sources import ItemSource, ItemTable, Queries, QuerySource, learning_rate, optimizer_settings
from auditor.monitor.settings import (
    TrainingDivergedWarning, batch_rows, check_ranks, check_settings, divergence_note, given_counts, ids_digest,
    rho_sample, start_point,
)
from auditor.monitor.trace import resume_point

DEFAULT_INTERVAL = 500
"""Optimizer steps between records: at most 5% of a ``retrain`` step (benchmarks/bench_monitor.py)."""


class TrainingMonitor:
    """Watches an item table train; see the module docstring and docs/monitor.md.

    ``items``: an ``nn.Embedding``, a (n_items, dim) tensor updated in place, or a
    callable ``encode(rows) -> vectors`` (then ``n_items`` is required). ``counts``:
    interactions per item row (or a mapping raw id -> count, with ``item_ids``), given
    up front; None: counted from the batches passed to :meth:`before_step`/:meth:`observe`.
    ``interval``: steps between step records (0: epoch records only). ``trace``: the
    JSON-lines file to write. ``alerts``: ``--fail-on``-style expressions over the
    record's figures, each acting by ``on_alert`` (``warn``, ``raise``, ``stop``).
    ``optimizer``: read for the learning rate (and named in the trace; a torch
    optimizer, or any with a ``learning_rate``, such as Keras'; or a list of torch
    optimizers, one per tower: the one holding the item table's parameter is taken). ``queries``:
    head-share queries (:data:`~auditor.monitor.sources.Queries`). Above
    ``max_exact_items`` items, ρ and the log–log slope are taken on a fixed seeded sample
    of ``sample_items`` rows (ρ then with its interval); the norms' figures and the head
    shares are always the whole table's. ``mlflow``: None logs to the
    active MLflow run when MLflow is imported and a run is active; True: to the active
    run or a new one; a run id: to that run; False: never. ``tensorboard``: a log
    folder or a ``SummaryWriter``. ``start_step``, ``start_epoch``: where a run resumed
    from a checkpoint goes on (the optimizer steps it had taken, the epoch in progress);
    a new trace records them in its header's config. ``resume``: continue the existing
    ``trace`` instead (its end record replaced by the new records), by default from where
    it ended. ``mlflow_client``: the ``MlflowClient`` of the store holding the run id
    ``mlflow`` names (a framework's own MLflow logger's), when not the default store.
    """

    def __init__(
        self,
        items: ItemTable,
        *,
        n_items: int | None = None,
        item_ids: Sequence[Any] | None = None,
        counts: np.ndarray | Sequence[float] | Mapping[Any, float] | None = None,
        interval: int = DEFAULT_INTERVAL,
        trace: Path | str | None = None,
        alerts: Iterable[str] = (),
        on_alert: str = "warn",
        optimizer: torch.optim.Optimizer | Any = None,
        queries: Queries = None,
        n_queries: int = 128,
        k: int = 10,
        head_percent: float = 1.0,
        max_exact_items: int = 200_000,
        sample_items: int = 100_000,
        seed: int = 0,
        mlflow: bool | str | None = None,
        tensorboard: Any = None,
        source: str = "pytorch",
        config: Mapping[str, Any] | None = None,
        fsync: bool = True,
        start_step: int | None = None,
        start_epoch: int | None = None,
        resume: bool = False,
        mlflow_client: Any = None,
    ) -> None:
        check_settings(interval, k, head_percent, max_exact_items, sample_items)
        self.processes, self._ranks_settled = check_ranks(counts is not None)  # above 1: angles of the whole table
        self.source = ItemSource(items, n_items)
        n = self.source.n_items
        self.interval = int(interval)
        self.optimizer = self.source.item_optimizer(optimizer)
        self.k, self.head_percent = int(k), float(head_percent)
        rng = np.random.default_rng(np.random.SeedSequence([seed, 0x5EED]))
        self._sample = rho_sample(n, max_exact_items, sample_items, rng)
        self.queries = QuerySource(queries, self.source, n_queries, rng)
        self._given = counts is not None
        self._counts = given_counts(counts, item_ids, n) if counts is not None else np.zeros(n, dtype=np.int64)
        self._pending: list[torch.Tensor] = []
        self._alerts = Alerts(alerts, check_action(on_alert), interval, n)
        self.global_step, self.epoch, config = start_point(start_step, start_epoch, resume, config)
        """The epoch in progress (1-based); :meth:`end_epoch` moves it on."""
        self.records: list[TraceRecord] = []
        self.fired: list[AlertEvent] = []
        self.should_stop = False
        """Set when an alert with the action ``stop`` fired: the training loop should stop."""
        self._snapshot: tuple[torch.Tensor | None, torch.Tensor, torch.Tensor | None] | None = None
        self._epoch_updates: list[UpdateSample] = []
        self._step_update = UpdateSample.empty()
        self._start = time.perf_counter()
        self._epoch_start = self._start
        self._closed = False
        self.header = self._make_header(source, item_ids, max_exact_items, sample_items, config)
        keep = self._resume(trace, start_step, start_epoch) if resume else None
        self._epoch_first_step = self.global_step
        self._sinks, self._writer = open_outputs(trace, self.header, fsync, (mlflow, mlflow_client), tensorboard, keep)
        self._sink_failed: set[int] = set()

    def _make_header(
        self, source: str, item_ids: Sequence[Any] | None, max_exact_items: int, sample_items: int,
        config: Mapping[str, Any] | None,
    ) -> TraceHeader:
        """The trace's first record: how this monitor measures (its settings, resolved)."""
        return TraceHeader(
            source=source, n_items=self.source.n_items, dim=self.source.dim,
            counts="given" if self._given else "running", interval=self.interval, k=self.k,
            head_percent=self.head_percent, queries=self.queries.kind, n_queries=self.queries.n,
            max_exact_items=int(max_exact_items), sample_items=int(sample_items),
            alerts=tuple(str(g) for g in self._alerts.gates), alert_action=self._alerts.action,
            optimizer=type(self.optimizer).__name__ if self.optimizer is not None else None,
            item_ids_sha256=ids_digest(item_ids), created_unix=time.time(), popaudit_version=__version__,
            config={**self._optimizer_settings(), **(config or {})},  # a caller's config (retrain's) wins
        )

    def _resume(self, trace: Path | str | None, start_step: int | None, start_epoch: int | None) -> int:
        """Continue the existing trace (``resume=True``): the step and epoch to go on from
        (:func:`~auditor.monitor.trace.resume_point`), the header with the alerts in force,
        the alerts that already fired (not fired again), and the bytes of it to keep."""
        if trace is None:
            raise TrainingError("resume continues an existing trace: give trace, the path of the run's trace")
        if not Path(trace).is_file():
            raise TrainingError(f"resume: there is no trace at {trace} to continue")
        point = resume_point(Path(trace), self.header, start_step, start_epoch)
        self.global_step, self.epoch, self.header = point.step, point.epoch, point.header
        self._alerts.remember(point.fired, point.header.alerts)
        return point.keep

    # -- the calls a training loop makes ------------------------------------------------

    def observe(self, items: torch.Tensor | np.ndarray | Sequence[int]) -> None:
        """Count the item rows of a batch (running counts only; cheap: kept until the next record)."""
        if not self._given:
            self._pending.append(batch_rows(items))

    def before_step(self, items: torch.Tensor | np.ndarray | Sequence[int] | None = None, *, count: bool = True) -> None:
        """Call before ``optimizer.step()`` with the batch's item rows (or None).

        Counts them (unless ``count`` is False: already passed to :meth:`observe`), and
        when the coming step is due for a record keeps the rows' vectors (the whole
        table when ``items`` is None, or under several processes, :attr:`processes`: the
        step moves every rank's rows), to measure the update angles.
        """
        if not self._ranks_settled:
            self._settle_ranks()
        if items is not None and count:
            self.observe(items)
        self._coming_lr = (self._lr(),)  # the rate this step trains at (a scheduler may step before after_step)
        if not self._due(self.global_step + 1):
            return
        if items is None or self.processes > 1:
            self._snapshot = (None, self.source.table().clone(), None)
            return
        rows, copies = torch.unique(batch_rows(items), return_counts=True)
        self._check_rows(rows)
        self._snapshot = (rows, self.source.rows(rows).clone(), copies)

    def after_step(self, *, loss: float | torch.Tensor | None = None) -> TraceRecord | None:
        """Call after ``optimizer.step()`` with the batch's ``loss`` when known (read only when
        the step takes a record); returns the record when this step took one."""
        self.global_step += 1
        self._step_lr = self._coming_lr[0] if self._coming_lr is not None else self._lr()
        self._coming_lr = None
        if self._snapshot is not None:
            rows, before, copies = self._snapshot
            self._snapshot = None
            after = self.source.table() if rows is None else self.source.rows(rows)
            self._step_update = update_sample(before, after, copies)
            self._epoch_updates.append(self._step_update)
        if not self._due(self.global_step):
            return None
        record = self._record("step", self._step_update, loss=loss, lr=self._step_lr)
        self._step_update = UpdateSample.empty()
        return record

    @contextmanager
    def step(
        self, items: torch.Tensor | np.ndarray | Sequence[int] | None = None, *, loss: float | torch.Tensor | None = None
    ) -> Iterator[None]:
        """``with monitor.step(batch_items, loss=loss): optimizer.step()``: :meth:`before_step`
        and :meth:`after_step` in one; ``loss``, the batch's, goes in the step's record (read
        only when the step takes one), so a ``loss`` alert can fire at that step."""
        self.before_step(items)
        yield
        self.after_step(loss=loss)

    def end_epoch(self, *, epoch: int | None = None, loss: float | torch.Tensor | None = None) -> TraceRecord:
        """Record the end of an epoch (``epoch``: its number, default the one in progress)
        with its mean ``loss`` when known; the update angles measured during it are pooled."""
        if epoch is not None:
            self.epoch = int(epoch)
        seconds = time.perf_counter() - self._epoch_start
        lr = self._step_lr if self.global_step > self._epoch_first_step else self._lr()  # its last step's rate
        record = self._record("epoch", UpdateSample.pooled(self._epoch_updates), loss=loss, lr=lr, seconds=seconds)
        self._epoch_updates = []
        self.epoch += 1
        self._epoch_start = time.perf_counter()
        self._epoch_first_step = self.global_step
        return record

    def close(self, reason: str | None = None) -> None:
        """Write the end record and close the trace and trackers (idempotent). ``reason``:
        why training ended; by default the alert that asked it to stop, else ``completed``
        (a plain loop that breaks on :attr:`should_stop` ends as the adapters do)."""
        if self._closed:
            return
        self._closed = True
        begun = self.epoch if self.global_step > self._epoch_first_step else self.epoch - 1
        reason = reason or self.stop_reason or "completed"
        if reason == self.stop_reason and self.global_step > self._stop_step:  # a loop that did not stop at once
            reason += f"; training went on to step {self.global_step}"
        if self.diverged is not None:  # said wherever training ended: a trace of a NaN run is no quiet one
            last = self.records[-1]
            reason += "; " + divergence_note(self.diverged, (last.step, last.n_nonfinite), self.source.n_items)
        end = TraceEnd(self.global_step, max(begun, 0) or None, reason)
        if self._writer is not None:
            self._writer.write(end.to_json())
            self._writer.close()
        for sink in self._sinks:
            sink.close()

    def __enter__(self) -> TrainingMonitor:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if exc is None:
            self.close()
        elif not self._closed:
            self.close(f"error: {type(exc).__name__}: {exc}")

    @property
    def counts(self) -> np.ndarray:
        """Interactions per item row so far (running) or as given."""
        self._flush_counts()
        return self._counts

    # -- inside ---------------------------------------------------------------------

    stop_reason: str | None = None
    """Why the first alert that asked training to stop did (None: none did)."""
    _stop_step = 0
    """The step of the alert that asked training to stop."""
    _coming_lr: tuple[float | None] | None = None
    """The rate read at :meth:`before_step`, which the coming step trains at (None: none read)."""
    _step_lr: float | None = None
    _groups_key: tuple[int, int, int] | None = None
    _lr_groups: tuple[dict[str, Any], ...] = ()
    """The rate the last step trained at: its record's and its epoch record's ``lr``."""
    diverged: tuple[int, int] | None = None
    """(step, rows) of the first record that found item rows NaN or infinite (None: none did)."""

    def _settle_ranks(self) -> None:
        """:func:`check_ranks` again, until a process group answers: a monitor made before
        ``init_process_group`` is judged by the group at its first step or record, as one made
        after (its trace then ends with the error)."""
        try:
            self.processes, self._ranks_settled = check_ranks(self._given)
        except TrainingError as error:
            self.close(f"error: TrainingError: {error}")
            raise

    def _due(self, step: int) -> bool:
        return self.interval > 0 and step % self.interval == 0

    def _check_rows(self, rows: torch.Tensor) -> None:
        if rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= self.source.n_items):
            bad = int(rows.min()) if int(rows.min()) < 0 else int(rows.max())
            raise TrainingError(f"batch item row {bad} is outside the item table (rows 0..{self.source.n_items - 1})")

    def _flush_counts(self) -> None:
        if not self._pending:
            return
        rows = torch.cat(self._pending)
        self._pending = []
        self._check_rows(rows)
        self._counts += torch.bincount(rows, minlength=self.source.n_items).cpu().numpy()

    def _record(
        self, kind: str, update: UpdateSample, *, loss: float | torch.Tensor | None, lr: float | None,
        seconds: float | None = None,
    ) -> TraceRecord:
        tic = time.perf_counter()
        if not self._ranks_settled:
            self._settle_ranks()
        self._flush_counts()
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            record = self._measure(kind, update, loss, seconds)
        record = replace(record, lr=lr, monitor_s=time.perf_counter() - tic)
        self.records.append(record)
        if self._writer is not None:
            self._writer.write(record.to_json())
        if record.n_nonfinite and self.diverged is None:
            self.diverged = (record.step, record.n_nonfinite)
            warnings.warn(
                f"{record.n_nonfinite:,} of {self.source.n_items:,} item rows are NaN or infinite at step {record.step}: "
                "training diverged; ρ, the slope and the head shares are unmeasured from here (alert on n_nonfinite>0)",
                TrainingDivergedWarning, stacklevel=3,
            )
        log_each(self._sinks, record, self._sink_failed)
        for event in self._alerts.fire(record):
            self._alert(event)
        return record

    def _measure(self, kind: str, update: UpdateSample, loss: float | torch.Tensor | None, seconds: float | None) -> TraceRecord:
        # One pass over the whole table: every row's norm (mean_norm, n_nonfinite: a NaN row
        # anywhere is found) and the head shares' exact top-K. Only ρ and the slope, whose
        # rank sort is what grows with the catalogue, are taken on the fixed sample above
        # max_exact_items (rows sampled from the same norms, so a sample equals check's rows).
        vectors = self.source.table()
        precision = table_precision(vectors)  # the stored dtype's rounding, before any widening
        served = vectors.dtype  # queries are rounded (and judged zero) in it, as served
        if vectors.dtype not in (torch.float32, torch.float64):  # half precision: numpy has no bfloat16
            vectors = vectors.float()
        norms = item_norms(vectors.to("cpu").numpy())
        finite = np.isfinite(norms)
        # a table with a NaN or infinite row anywhere has no ρ, sampled or not (as the audit's)
        picked = slice(None) if self._sample is None or not finite.all() else self._sample.numpy()
        ranks = rank_figures(norms[picked], self._counts[picked], population=self.source.n_items, precision=precision)
        heads = head_figures(self.queries.vectors(served).to(vectors.dtype), vectors, self._counts, self.k,
                             self.head_percent) if finite.all() else None
        angles = angle_figures(update)
        now = time.perf_counter()
        return TraceRecord(
            kind=kind, step=self.global_step, epoch=self.epoch, elapsed_s=now - self._start, wall_time=time.time(),  # type: ignore[arg-type]
            spearman=ranks.spearman, spearman_n=ranks.n, spearman_method=ranks.method,  # type: ignore[arg-type]
            spearman_ci=ranks.ci, loglog_slope=ranks.slope, mean_norm=float(norms.mean()),
            n_nonfinite=int((~finite).sum()), n_counted=int(self._counts.sum()),
            angle_n=angles.n, angle_share_90_1=angles.share_90_1, angle_share_90_10=angles.share_90_10,
            angle_median=angles.median, growth_per_update=angles.growth, growth_basis=angles.growth_basis,
            head_share_dot=heads.dot if heads else None, head_share_cosine=heads.cosine if heads else None,
            head_share_ratio=heads.ratio if heads else None, n_zero_queries=self.queries.n_zero if heads else 0,
            lr=None, loss=None if loss is None else float(loss), seconds=seconds,
        )

    def _optimizer_settings(self) -> dict[str, float]:
        """The item optimizer's momentum and weight decay for the header (C1's evidence)."""
        groups = self.source.groups_of(self.optimizer) or getattr(self.optimizer, "param_groups", [])
        return {} if self.optimizer is None else optimizer_settings(self.optimizer, groups)

    def _lr(self) -> float | None:
        # Read before every step: the item table's param groups are found once (a scan of every
        # group's tensors), again only when the optimizer or its number of groups changes.
        groups = getattr(self.optimizer, "param_groups", None)
        key = (id(self.optimizer), id(groups), len(groups) if isinstance(groups, list) else 0)
        if self._groups_key != key:
            self._groups_key, self._lr_groups = key, tuple(self.source.groups_of(self.optimizer))
        return learning_rate(self.optimizer, list(self._lr_groups))

    def _alert(self, event: AlertEvent) -> None:
        self.fired.append(event)
        if self._writer is not None:
            self._writer.write(event.to_json())
        if event.action == "stop":
            self.should_stop = True
            if self.stop_reason is None:  # the first alert that asked (several may fire at one record)
                self.stop_reason = f"stopped by alert {event.alert} at step {event.step}"
                self._stop_step = event.step
        if event.action == "raise":
            self.close(f"raised by alert {event.alert} at step {event.step}")
        act(event)

