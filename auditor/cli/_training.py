"""Options ``retrain`` and ``experiment`` share: the training data, torch threads,
parallel jobs and the held-out split, each defined once; and ``--plugin`` refused (they
run no plugin hook)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click.core import ParameterSource

from auditor.cli._common import option_group, ranged
from auditor.config import INTERACTION_FORMATS
from auditor.progress import SILENT, Progress
from auditor.train import OPTION_APPLIES, SPLITS, hidden_width_problem, inapplicable

if TYPE_CHECKING:
    from auditor.train.data import TrainingData

F = TypeVar("F", bound=Callable[..., Any])

SYNTHETIC_OPTIONS = ("n_users", "n_items", "n_interactions", "zipf")
FILE_OPTIONS = ("data_format", "user_col", "item_col", "time_col")


@dataclass(frozen=True)
class DataChoice:
    """The ``--data`` options: a log, or synthetic data of the given sizes."""

    source: str = "synthetic"
    data_format: str = "auto"
    user_col: str | None = None
    item_col: str | None = None
    time_col: str | None = None
    n_users: int = 1000
    n_items: int = 1000
    n_interactions: int = 50_000
    zipf: float = 1.0

    @property
    def path(self) -> Path | None:
        """The log, None for synthetic data."""
        return None if self.source == "synthetic" else Path(self.source)

    def read(self, seed: int = 0, *, times: str | None = None, progress: Progress = SILENT) -> TrainingData:
        """The log's interactions (times too, for what ``times`` says), or synthetic data for ``seed``."""
        from auditor.train.data import read_interactions, synthetic_interactions

        if self.path is None:
            return synthetic_interactions(self.n_users, self.n_items, self.n_interactions, self.zipf, seed=seed)
        progress.note(f"reading {self.path}")
        return read_interactions(
            self.path, fmt=self.data_format, user_col=self.user_col, item_col=self.item_col,
            time_col=self.time_col, times=times, progress=progress,
        )


def _given(name: str) -> bool:
    """Whether option ``name`` was set on the command line (or the environment)."""
    source = click.get_current_context().get_parameter_source(name)
    return source in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)


def refuse_inapplicable(settings: dict[str, Any]) -> None:
    """A usage error for a training option given where it does nothing (the table
    :data:`auditor.train.OPTION_APPLIES`): ignoring it would run another model than the
    one asked for (``--momentum 0.9`` with plain SGD trains the all-hold reference)."""
    for option in OPTION_APPLIES:
        if _given(option) and (why := inapplicable(option, settings)) is not None:
            raise click.UsageError(f"--{option.replace('_', '-')} {why}")
    if (why := hidden_width_problem(str(settings.get("user_encoder")), int(settings.get("hidden_dim", 0)))) is not None:
        raise click.UsageError(f"--hidden-dim {why}")  # before any work (the model would refuse it after reading)


_DATA_OPTIONS = option_group(
    click.option("--data", "source", default="synthetic", show_default=True, metavar="synthetic|PATH", help="Training data: 'synthetic' (Zipf popularity, topical users) or an interaction log (MovieLens u.data/ratings.dat/ratings.csv, RecBole .inter, Parquet, CSV/TSV)."),
    click.option("--data-format", type=click.Choice(INTERACTION_FORMATS), default="auto", show_default=True, help="Format of the --data file when its name does not tell."),
    click.option("--user-col", help="User column of the --data file (auto-detected from common names)."),
    click.option("--item-col", help="Item column of the --data file (auto-detected from common names)."),
    click.option("--time-col", help="Time column of the --data file, for --split time and the transformer user tower's recent items (auto-detected: timestamp, time, ts, datetime, ...)."),
    click.option("--n-users", type=ranged("n_users"), default=1000, show_default=True, help="Synthetic data: users."),
    click.option("--n-items", type=ranged("n_items"), default=1000, show_default=True, help="Synthetic data: items."),
    click.option("--n-interactions", type=ranged("n_interactions"), default=50_000, show_default=True, help="Synthetic data: interactions."),
    click.option("--zipf", type=ranged("zipf"), default=1.0, show_default=True, help="Synthetic data: Zipf exponent of item popularity."),
)


def data_options(command: F) -> F:
    """Add the data options; the command receives them as ``data: DataChoice``.

    Options of the other kind of data (``--n-users`` with a log, ``--user-col`` with
    synthetic data) are usage errors: silently ignoring them would mislead.
    """

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        values = {name: kwargs.pop(name) for name in DataChoice.__dataclass_fields__}
        choice = DataChoice(**values)
        wrong = SYNTHETIC_OPTIONS if choice.path is not None else FILE_OPTIONS
        given = [name for name in wrong if _given(name)]
        if given:
            flag = "--" + given[0].replace("_", "-")
            kind = "synthetic data (without --data PATH)" if choice.path is not None else "a --data PATH log"
            raise click.UsageError(f"{flag} applies to {kind} only")
        return command(*args, data=choice, **kwargs)

    return _DATA_OPTIONS(wrapper)  # type: ignore[return-value]


threads_option = click.option(
    "--threads", type=ranged("threads"),
    help="torch threads per training process. [default: the cores this process may use (CPU affinity, "
    "cgroup quota) that the load average leaves idle, at most 8; with -j N, that divided by N]",
)
"""--threads."""

jobs_option = click.option(
    "-j", "--jobs", type=ranged("jobs"), default=1, show_default=True,
    help="Train the grid's runs in N parallel processes, one progress display. Results equal -j 1's "
    "(at the same --threads: the transformer user tower's float sums depend on the thread count).",
)
"""-j/--jobs."""


def holdout_options(default_fraction: float | None) -> Callable[[F], F]:
    """--holdout-fraction (default ``default_fraction``; None: no holdout) and --split."""
    default_text = "no holdout" if default_fraction is None else f"{default_fraction:g}"
    return option_group(
        click.option("--holdout-fraction", type=ranged("holdout_fraction"), default=default_fraction, help=f"Hold out this fraction of each user's interactions (never trained on; stored in the checkpoint, so check measures accuracy on them): floor(F*n), at least 1 for users with 2 or more, none for users with 1. [default: {default_text}]"),
        click.option("--split", type=click.Choice(SPLITS), default="auto", show_default=True, help="Which interactions are held out: each user's latest (time: needs a time column), or a seeded random draw; auto: time when the log has a time column, else random."),
    )


def refuse_plugins(why: str) -> Callable[[F], F]:
    """For a command that runs no plugin hook, under :func:`common_options`: ``--plugin``
    is a usage error (exit 2) saying ``why``, and is left out of ``--help``, rather than a
    plugin accepted and never used."""

    def refuse(ctx: click.Context, _param: click.Parameter, value: tuple[str, ...]) -> None:
        if value:
            command = " ".join(ctx.command_path.split()[1:])  # without the program's name
            raise click.UsageError(f"--plugin does not apply to {command}: {why}", ctx)

    refuse.refuses_plugins = True  # type: ignore[attr-defined]  # read by _group.refuses_plugins
    return click.option("--plugin", "plugins", multiple=True, hidden=True, expose_value=False, callback=refuse)
