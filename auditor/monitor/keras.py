"""The training monitor as a Keras 3 callback, torch backend (extra ``popaudit[keras]``).

::

    os.environ["KERAS_BACKEND"] = "torch"  # before Keras is imported
    from auditor.monitor.keras import PopauditCallback

    callback = PopauditCallback("item_embedding", counts=item_counts, trace="trace.jsonl",
                                alerts=["spearman>0.5"], on_alert="stop")
    model.fit(dataset, epochs=5, callbacks=[callback])

Keras callbacks never see the batch's data, so the counts are given up front
(interactions per item row) and each measured step compares the whole table before and
after it: the angles are those of every item the step moved. An ``Embedding(mask_zero=True)``
has its row 0 (the mask, no item) left out, as ``check`` leaves it out of the saved model. An alert with the action
``stop`` sets ``model.stop_training``. Imports ``keras``; ``import auditor`` never does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import keras
import numpy as np

from auditor.errors import TrainingError
from auditor.monitor.monitor import TrainingMonitor
from auditor.monitor.settings import second_fit
from auditor.loading.keras_mask import masked_layers
from auditor.monitor.sources import item_like


def _owner(model: Any, variable: Any) -> Any:
    """The model's ``Embedding`` layer whose table ``variable`` is (None: none is)."""
    layers = model._flatten_layers() if hasattr(model, "_flatten_layers") else model.layers
    return next((lay for lay in layers if isinstance(lay, keras.layers.Embedding) and lay.embeddings is variable), None)


def without_mask_row(options: dict[str, Any], rows: int) -> dict[str, Any]:
    """``counts`` and ``item_ids`` for the rows 1..n of a mask_zero table of ``rows`` rows:
    given for the n items as they are, given one per table row with row 0's left out (its
    count must be 0: id 0 is the mask, Keras never trains an item at it)."""
    out: dict[str, Any] = {}
    for key in ("counts", "item_ids"):
        value = options.get(key)
        if value is None or isinstance(value, Mapping) or len(value) == rows - 1:
            continue
        if len(value) != rows:  # the monitor's own length check would quote rows - 1 and not the mask rule
            raise TrainingError(
                f"{key} has {len(value)} entries, but the item layer is an Embedding(mask_zero=True) of {rows} rows, "
                f"whose row 0 is the mask (id 0, no item): give one per id 1..{rows - 1} ({rows - 1} entries), or "
                f"{rows} entries, one per table row"
            )
        if key == "counts" and float(np.asarray(value, dtype=np.float64)[0]) != 0:
            raise TrainingError(
                f"counts: the item layer is an Embedding(mask_zero=True), whose row 0 is the mask (id 0, no item), yet "
                f"counts[0] is {np.asarray(value)[0]:g}: give the counts of ids 1..{rows - 1} ({rows - 1} entries), or "
                f"{rows} entries with 0 first"
            )
        out[key] = value[1:]
    return out


class PopauditCallback(keras.callbacks.Callback):  # type: ignore[misc]  # Keras ships no type information
    """Runs a :class:`~auditor.monitor.TrainingMonitor` inside ``model.fit``.

    ``items``: the name of the model's ``Embedding`` layer holding the item table, the
    layer itself, or its variable. ``counts``: interactions per item row (required).
    Every other keyword goes to :class:`~auditor.monitor.TrainingMonitor` (the
    learning rate is read from the model's optimizer).
    """

    def __init__(self, items: Any, *, counts: Any, **monitor_options: Any) -> None:
        super().__init__()
        if keras.backend.backend() != "torch":
            raise TrainingError(
                f"the popaudit Keras callback needs the torch backend (KERAS_BACKEND=torch), not {keras.backend.backend()}"
            )
        if counts is None:
            raise TrainingError("Keras callbacks do not see the batches: give counts, the interactions per item row")
        self._items = items
        self._options = {"source": "keras", "counts": counts, **monitor_options}
        self.monitor: TrainingMonitor | None = None
        self._began = False

    def _table(self) -> tuple[Any, bool]:
        """The torch parameter the optimizer updates in place, and whether its row 0 is the
        mask of an ``Embedding(mask_zero=True)`` (check's rule on the layer's config)."""
        items = self._items
        if isinstance(items, str):
            embeddings = [layer.name for layer in self.model.layers if isinstance(layer, keras.layers.Embedding)]
            try:
                items = self.model.get_layer(items)
            except ValueError:  # Keras' "No such layer": say which layers can be passed, and how
                raise TrainingError(
                    f"items: the Keras model has no layer {items!r} (its Embedding layers: "
                    f"{', '.join(embeddings) or 'none'}); name the item table's layer: "
                    f"PopauditCallback({item_like(embeddings)!r}, counts=...)"
                ) from None
        layer = items if isinstance(items, keras.layers.Embedding) else _owner(self.model, items)
        if isinstance(items, keras.layers.Embedding):
            items = items.embeddings
        if isinstance(items, keras.Variable):
            masked = layer is not None and bool(masked_layers({"class_name": type(layer).__name__,
                                                               "config": layer.get_config()}))
            return items.value, masked
        raise TrainingError(
            f"items must name an Embedding layer of the model, or be one or its variable, not {type(items).__name__}"
        )

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        if self._began:
            raise second_fit(self._options.get("trace"))
        self._began = True

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        """The monitor, at the first epoch of the fit: there the epoch is known (a fit resumed
        with ``initial_epoch`` begins after 0), and the optimizer's ``iterations`` are the
        steps taken before it."""
        if self.monitor is not None:
            return
        options = dict(self._options)
        options.setdefault("optimizer", self.model.optimizer)
        steps = (self.params or {}).get("steps")
        if isinstance(steps, int) and steps > 0:  # the steps of an epoch: C5 projects a stopped run's steps taken
            options["config"] = {"steps_per_epoch": steps, **(options.get("config") or {})}
        iterations = getattr(self.model.optimizer, "iterations", None)
        options.setdefault("start_step", 0 if iterations is None else int(keras.ops.convert_to_numpy(iterations)))
        options.setdefault("start_epoch", int(epoch) + 1)
        table, masked = self._table()
        if masked:  # row 0 is the mask, no item: watched as check reads the saved model (rows 1..n)
            table = table[1:]
            options.update(without_mask_row(options, table.shape[0] + 1))
        self.monitor = TrainingMonitor(table, **options)

    def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        if self.monitor is not None:
            self.monitor.before_step(None)

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        if self.monitor is None:
            return
        # Keras reports the epoch's running mean of the batch losses; read only when the step takes a record
        self.monitor.after_step(loss=(logs or {}).get("loss"))
        if self.monitor.should_stop:
            self.model.stop_training = True

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if self.monitor is None:
            return
        loss = (logs or {}).get("loss")
        self.monitor.end_epoch(epoch=epoch + 1, loss=None if loss is None else float(loss))
        if self.monitor.should_stop:
            self.model.stop_training = True

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        if self.monitor is not None:
            self.monitor.close(self.monitor.stop_reason or "completed")
