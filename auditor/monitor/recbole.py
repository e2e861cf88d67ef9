"""The training monitor inside RecBole's trainer (RecBole 1.2; no import of RecBole here).

::

    from recbole.trainer import Trainer
    from auditor.monitor.recbole import monitored

    trainer = monitored(Trainer)(config, model, trace="trace.jsonl", alerts=["spearman>0.5"])
    trainer.fit(train_data, valid_data)

:func:`monitored` returns a subclass of the given trainer class (``Trainer``, or a
model's own, e.g. from ``recbole.utils.get_trainer``) with :class:`PopauditTrainerMixin`
in front. Each epoch it hooks the optimizer (``register_step_pre_hook`` and
``register_step_post_hook``, so RecBole's own ``_train_epoch`` runs unchanged and every
real step is seen, AMP's scaler included) and takes the epoch record with RecBole's mean
batch loss. The item table is the model's ``item_embedding`` (another attribute by
name) without RecBole's padding row 0, so rows and ids are those ``popaudit check``
reads from a RecBole checkpoint; the counts are the training split's interactions per
item, given up front. Actions: ``warn`` and ``raise`` (RecBole's ``fit`` has no stop
request a callback can make).
"""

from __future__ import annotations

from typing import Any, TypeVar

import numpy as np
import torch

from auditor.errors import TrainingError
from auditor.monitor.alerts import check_action
from auditor.monitor.monitor import TrainingMonitor
from auditor.monitor.sources import embedding_names, item_like, named_table

T = TypeVar("T", bound=type)


class PopauditTrainerMixin:
    """Put before a RecBole trainer class (see :func:`monitored`); keyword arguments after
    ``(config, model)`` configure the :class:`~auditor.monitor.TrainingMonitor`, ``items``
    names the model's item embedding (default ``item_embedding``)."""

    model: Any
    optimizer: torch.optim.Optimizer

    def __init__(self, *args: Any, items: str = "item_embedding", **monitor_options: Any) -> None:
        super().__init__(*args)
        check_action(monitor_options.get("on_alert", "warn"), ("warn", "raise"))
        self.popaudit_items = items
        self.popaudit_options = {"source": "recbole", **monitor_options}
        self.popaudit: TrainingMonitor | None = None
        self._popaudit_hooked: torch.optim.Optimizer | None = None
        self._popaudit_weight()  # a wrong items= fails here, before fit trains

    def _popaudit_weight(self) -> torch.Tensor:
        """The model's item table (``items=``, a dotted name) as a 2-D weight; TrainingError
        listing the model's embeddings and the keyword to pass when it has none there."""
        model = type(self.model).__name__
        names = [n for n, m in self.model.named_modules() if n and isinstance(m, torch.nn.Embedding)]
        fix = (f"name its item table with items=, e.g. monitored(Trainer)(config, model, "
               f"items={item_like(names)!r})")
        table = named_table(self.model, self.popaudit_items, f"the RecBole model {model}", fix)
        weight = table.weight if isinstance(table, torch.nn.Embedding) else table
        if not isinstance(weight, torch.Tensor) or weight.ndim != 2:
            raise TrainingError(
                f"items: the model's {self.popaudit_items} is a {type(table).__name__}, not an embedding table "
                f"(its embeddings: {embedding_names(self.model)}); {fix}"
            )
        return weight

    def _train_epoch(self, train_data: Any, epoch_idx: int, loss_func: Any = None, show_progress: bool = False) -> Any:
        monitor = self._popaudit_monitor(train_data)
        try:
            total = super()._train_epoch(  # type: ignore[misc]  # RecBole's trainer, after this mixin
                train_data, epoch_idx, loss_func=loss_func, show_progress=show_progress
            )
        except BaseException as exc:
            monitor.close(f"error: {type(exc).__name__}: {exc}")
            raise
        loss = sum(total) if isinstance(total, tuple) else total
        monitor.end_epoch(epoch=epoch_idx + 1, loss=None if loss is None else float(loss) / max(1, len(train_data)))
        return total

    def fit(self, *args: Any, **kwargs: Any) -> Any:
        """RecBole's ``fit``; the trace ends with the error wherever ``fit`` raises (in an
        epoch, its evaluation or a checkpoint's save), else as completed."""
        try:
            result = super().fit(*args, **kwargs)  # type: ignore[misc]
        except BaseException as exc:
            if self.popaudit is not None:  # closed already when an epoch raised (its reason stands)
                self.popaudit.close(f"error: {type(exc).__name__}: {exc}")
            raise
        if self.popaudit is not None:
            self.popaudit.close()
        return result

    def _popaudit_monitor(self, train_data: Any) -> TrainingMonitor:
        """The monitor (made at the first epoch, when the data is known) with the trainer's
        current optimizer hooked."""
        if self.popaudit is None:
            dataset = train_data.dataset
            weight = self._popaudit_weight()
            items = dataset.inter_feat[dataset.iid_field]
            counts = np.bincount(np.asarray(items, dtype=np.int64), minlength=weight.shape[0])[1:]
            tokens = dataset.field2id_token[dataset.iid_field][1:]
            self.popaudit = TrainingMonitor(
                weight.detach()[1:], counts=counts, item_ids=[str(t) for t in tokens],
                **{"optimizer": self.optimizer, **self.popaudit_options},
            )
        if self._popaudit_hooked is not self.optimizer:  # hooked once per optimizer
            monitor = self.popaudit

            def after(*_: Any) -> None:
                monitor.after_step()

            self.optimizer.register_step_pre_hook(lambda *_: monitor.before_step(None))
            self.optimizer.register_step_post_hook(after)
            self._popaudit_hooked = self.optimizer
        return self.popaudit


def monitored(trainer_class: T) -> T:
    """``trainer_class`` (RecBole's ``Trainer`` or a subclass) with the monitor mixed in."""
    name = f"Popaudit{trainer_class.__name__}"
    return type(name, (PopauditTrainerMixin, trainer_class), {"__doc__": PopauditTrainerMixin.__doc__})  # type: ignore[return-value]
