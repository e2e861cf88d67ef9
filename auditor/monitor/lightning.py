"""The training monitor as a PyTorch Lightning callback (extra ``popaudit[lightning]``).

::

    from auditor.monitor.lightning import PopauditCallback

    callback = PopauditCallback(
        "item_embedding",  # the item table: an attribute of the LightningModule (or the table itself)
        batch_items=lambda batch: batch["item"],  # the batch's item rows (running counts, angles)
        trace="trace.jsonl", alerts=["spearman>0.5"], on_alert="stop",
    )
    lightning.Trainer(callbacks=[callback], max_epochs=5).fit(model, loader)

Hooks: ``on_train_batch_start`` counts the batch's items, ``on_before_optimizer_step``
keeps the rows about to move: those of every micro-batch since the last step under
gradient accumulation (``accumulate_grad_batches``), so a measured step covers all the
rows it moves and growth is per appearance over them; ``on_train_batch_end`` measures
after the step, ``on_train_epoch_end`` takes the epoch record (mean of the batches' losses,
as ``training_step`` returned them: Lightning hands callbacks the loss divided by
``accumulate_grad_batches``, which is undone), ``on_fit_end`` closes the trace. An
alert with the action ``stop`` sets ``trainer.should_stop``. Imports ``lightning``
(or, without it, ``pytorch_lightning``); ``import auditor`` never does.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from auditor.errors import TrainingError
from auditor.monitor.monitor import TrainingMonitor
from auditor.monitor.settings import second_fit, shard_counts
from auditor.monitor.sources import ItemSource, ItemTable, named_table

try:
    import lightning.pytorch as pl
    from lightning.pytorch.loggers import MLFlowLogger
except ImportError:  # the older package name
    import pytorch_lightning as pl  # type: ignore[no-redef]
    from pytorch_lightning.loggers import MLFlowLogger  # type: ignore[assignment]


class PopauditCallback(pl.Callback):
    """Runs a :class:`~auditor.monitor.TrainingMonitor` inside ``Trainer.fit``.

    ``items``: the item table (:data:`~auditor.monitor.sources.ItemTable`) or the dotted
    name of an attribute of the LightningModule holding it (read when training starts,
    once the module is on its device). ``batch_items``: a function of a batch returning its item rows; None
    means counts must be given (``counts=``) and angles compare the whole table.
    Every other keyword goes to :class:`~auditor.monitor.TrainingMonitor` (the
    optimizer, unless given, is the trainer's one that holds the item table: with one
    optimizer per tower, the item tower's, and only its steps are measured).
    """

    def __init__(
        self,
        items: ItemTable | str,
        *,
        batch_items: Callable[[Any], torch.Tensor] | None = None,
        **monitor_options: Any,
    ) -> None:
        super().__init__()
        if batch_items is None and monitor_options.get("counts") is None:  # a monitor shown nothing counts nothing
            raise TrainingError(
                "give batch_items (the item rows of a batch: running counts and angles) or counts (interactions "
                "per item row): with neither, the monitor counts nothing and ρ and its alerts are never measured"
            )
        self._items = items
        self._batch_items = batch_items
        self._options = {"source": "lightning", **monitor_options}
        self.monitor: TrainingMonitor | None = None
        self._started = False
        """A fit has begun with this callback (a second one is refused)."""
        self._pending: list[torch.Tensor] = []
        """Item rows of the micro-batches since the last optimizer step."""
        self._stepped = False
        self._losses: list[float] = []
        self._step_losses: list[float] = []
        """The losses of the micro-batches since the last optimizer step."""
        self._world = 1
        """Processes training (DDP): rank 0 alone watches; angles then compare the whole table."""

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Refuses a second fit, and an item table that is none, before any batch is read."""
        if self._started:
            raise second_fit(self._options.get("trace"))
        self._started = True
        ItemSource(self._table(pl_module), self._options.get("n_items"),
                   self._items if isinstance(self._items, str) else None)

    def _table(self, pl_module: pl.LightningModule) -> ItemTable:
        """The item table: given, or the LightningModule's attribute at the dotted name."""
        if not isinstance(self._items, str):
            return self._items
        found: ItemTable = named_table(pl_module, self._items, "the LightningModule",
                                       "a dotted name such as 'tower.item_embedding' reaches a sub-module's")
        return found

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """The monitor, once the training data is set up: its header's config records the
        optimizer steps of an epoch (C5 projects the steps a run stopped within an epoch took).
        Under several processes only global rank 0 makes one (it alone writes the trace and
        the trackers), and the counts must be given: each rank sees only its shard."""
        self._world = int(trainer.world_size)
        if self._world > 1 and self._options.get("counts") is None:
            raise shard_counts(self._world)  # on every rank, before any of them writes
        if not trainer.is_global_zero:
            return
        items = self._table(pl_module)
        options = dict(self._options)
        if "optimizer" not in options and trainer.optimizers:  # one per tower: the monitor takes the item table's
            options["optimizer"] = list(trainer.optimizers)
        batches = trainer.num_training_batches
        if isinstance(batches, int) and batches > 0:  # inf for an iterable of unknown length
            per_epoch = math.ceil(batches / trainer.accumulate_grad_batches)  # the last window steps too
            options["config"] = {"steps_per_epoch": per_epoch, **(options.get("config") or {})}
        if options.get("mlflow") is None:  # Lightning's own MLflow logger: its run (no fluent run is active)
            logger = next((lg for lg in trainer.loggers if isinstance(lg, MLFlowLogger)), None)
            if logger is not None:
                options["mlflow"], options["mlflow_client"] = logger.run_id, logger.experiment
        # a fit resumed from a checkpoint (ckpt_path) goes on at Lightning's step and epoch
        options.setdefault("start_step", _steps_taken(trainer, pl_module))
        options.setdefault("start_epoch", trainer.current_epoch + 1)
        self.monitor = TrainingMonitor(items, **options)

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int) -> None:
        rows = self._batch_items(batch) if self._batch_items is not None else None
        if rows is not None and self.monitor is not None:
            self.monitor.observe(rows)
        if rows is not None:
            self._pending.append(torch.as_tensor(rows).reshape(-1))

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: torch.optim.Optimizer) -> None:
        if self.monitor is None or not self._steps_items(optimizer):
            return
        # under DDP the monitor compares the whole table (TrainingMonitor.processes): one rule for every loop
        pending = torch.cat(self._pending) if self._pending else None
        self._pending = []
        self.monitor.before_step(pending, count=False)  # counted at batch start
        self._stepped = True

    def _steps_items(self, optimizer: Any) -> bool:
        """Whether this optimizer's step moves the item table: with one optimizer per tower
        (manual optimization) the snapshot is kept around the item optimizer's step only
        (another's pre-step hook would replace it after the item rows moved)."""
        watched = self.monitor.optimizer if self.monitor is not None else None
        if watched is None or not hasattr(watched, "param_groups"):
            return True
        return getattr(optimizer, "optimizer", optimizer) is watched or optimizer is watched

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int) -> None:
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if isinstance(loss, torch.Tensor):  # automatic optimization hands on the loss ÷ accumulate_grad_batches
            scale = trainer.accumulate_grad_batches if pl_module.automatic_optimization else 1
            self._losses.append(float(loss.detach()) * scale)
            self._step_losses.append(self._losses[-1])
        if self.monitor is not None and self._stepped:
            self._stepped = False
            # the step's loss: the mean over the micro-batches it stepped on (one without accumulation)
            step_loss = sum(self._step_losses) / len(self._step_losses) if self._step_losses else None
            self._step_losses = []
            self.monitor.after_step(loss=step_loss)
        elif self.monitor is None:
            self._step_losses = []
        self._pass_stop(trainer)

    def _pass_stop(self, trainer: pl.Trainer) -> None:
        """``trainer.should_stop`` when an alert asked to stop; under several processes rank
        0's decision is shared with every rank (all of them call this at each batch and epoch end)."""
        stop = self.monitor is not None and self.monitor.should_stop
        if self._world > 1:
            stop = bool(trainer.strategy.reduce_boolean_decision(stop, all=False))
        if stop:
            trainer.should_stop = True

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        loss = sum(self._losses) / len(self._losses) if self._losses else None
        self._losses = []
        if self.monitor is not None:
            self.monitor.end_epoch(epoch=trainer.current_epoch + 1, loss=loss)
        self._pass_stop(trainer)

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.monitor is not None:
            self.monitor.close(self.monitor.stop_reason or "completed")

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        if self.monitor is not None:
            self.monitor.close(f"error: {type(exception).__name__}: {exception}")


def _steps_taken(trainer: pl.Trainer, pl_module: pl.LightningModule) -> int:
    """The optimizer steps taken before this fit (a checkpoint's, when it resumes one):
    ``trainer.global_step``; under manual optimization, where that counts every optimizer's
    steps (one per tower: twice a batch), the batches that stepped, as the monitor counts."""
    if pl_module.automatic_optimization:
        return int(trainer.global_step)
    return int(getattr(trainer.fit_loop.epoch_loop, "_batches_that_stepped", trainer.global_step))
