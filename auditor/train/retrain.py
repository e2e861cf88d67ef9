"""``popaudit retrain`` as one library call: read the data, hold out a split, train, save.

The command parses its options into a :class:`~auditor.train.loop.TrainConfig` and
:class:`~auditor.train.watch.WatchOptions`, calls :func:`retrain` and prints what it
returns.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from auditor.progress import SILENT, Progress
from auditor.train.data import TrainingData, times_use
from auditor.train.models import NEEDS_HISTORIES
from auditor.train.loop import TrainConfig, TrainResult, save_checkpoint, train
from auditor.train.split import HoldoutSplit, split_holdout
from auditor.train.threads import set_threads
from auditor.train.watch import WatchOptions


@dataclass(frozen=True)
class Retrained:
    """What :func:`retrain` trained and wrote."""

    result: TrainResult
    data: TrainingData
    """The interactions as read (synthetic or a log), before any holdout."""
    holdout: HoldoutSplit | None
    seconds: float
    """Training time (reading, splitting and saving not counted)."""
    threads: int
    """torch threads the training used."""

    def history_order_warning(self) -> str | None:
        """The log's order stood in for time in the user tower's histories (it has no usable time column)."""
        return self.data.history_order_warning() if self.result.config.user_encoder in NEEDS_HISTORIES else None

    @property
    def train_data(self) -> TrainingData:
        """What the model was trained on: the data less the held-out interactions."""
        return self.holdout.train if self.holdout is not None else self.data


def retrain(
    read: Callable[[str | None], TrainingData],
    config: TrainConfig,
    output: Path,
    *,
    holdout_fraction: float | None = None,
    split: str = "auto",
    watch: WatchOptions | None = None,
    threads: int | None = None,
    progress: Progress = SILENT,
) -> Retrained:
    """Train a two-tower model as ``config`` says and write its checkpoint to ``output``.

    ``read(times)`` gives the interactions, with their times for what ``times`` says
    (:func:`~auditor.train.data.times_use`: a time split, or the order of the user tower's histories). With ``holdout_fraction``, that share of each user's interactions is held out
    (:func:`~auditor.train.split.split_holdout` by ``split``, seeded by the config's
    seed), never trained on, and stored in the checkpoint. ``threads``: torch threads
    (None: :func:`~auditor.train.threads.set_threads`' default). Raises TrainingError
    (training diverged), InputError and the monitor's AlertTripped (``watch``).
    """
    n_threads = set_threads(threads)
    # times: for a time split, and for the recent items of a history tower (latest by time)
    data = read(times_use(holdout_fraction is not None and split != "random", config.user_encoder in NEEDS_HISTORIES))
    holdout = split_holdout(data, holdout_fraction, split, seed=config.seed) if holdout_fraction is not None else None
    tic = time.perf_counter()
    result = train(holdout.train if holdout is not None else data, config, progress=progress, watch=watch)
    seconds = time.perf_counter() - tic
    save_checkpoint(result, output, holdout)
    return Retrained(result=result, data=data, holdout=holdout, seconds=seconds, threads=n_threads)
