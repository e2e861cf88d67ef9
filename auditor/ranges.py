"""The range of every numeric setting: one table for options, manifest cells and library calls.

A number a user (or a manifest row written by someone else) sets bounds the work an audit
does: a ``bootstrap`` of 10**9 resamples or a cut-off K of 10**8 would hang a batch, a
``jobs`` of 10**6 would fork without end. Every numeric setting has its range here, and
the click option types (:mod:`auditor.cli._common`), the manifest cell conversion
(:mod:`auditor.batch.manifest`) and the config checks (:mod:`auditor.config`) all read
this table; README.md lists it. Ranges are generous: they bound hostile values, not
real workloads.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from auditor.errors import InputError, setting


@dataclass(frozen=True)
class Range:
    """Inclusive bounds (exclusive where ``*_open``); ``integer`` for whole numbers."""

    low: float
    high: float
    integer: bool = True
    low_open: bool = False
    high_open: bool = False
    why: str = ""
    """What the bounds protect (README)."""
    least_nonzero: float | None = None
    """Values in (0, least_nonzero) are out of range: 0 switches the thing off, and below
    this much it means nothing (``bootstrap``: :data:`MIN_BOOTSTRAP`)."""

    def contains(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):  # numpy's numbers are Real
            return False
        if not isinstance(value, (int, float)):
            value = int(value) if isinstance(value, numbers.Integral) else float(value)
        if self.integer and not float(value).is_integer():
            return False
        if not math.isfinite(float(value)):
            return False
        if self.least_nonzero is not None and 0 < value < self.least_nonzero:
            return False
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return bool(above and below)

    def describe(self) -> str:
        """``an integer from 0 to 100,000`` / ``a number > 0 and <= 1`` / ``0 or an
        integer from 100 to 100,000``."""
        if self.least_nonzero is not None:
            return f"{_number(self.low)} or {replace(self, low=self.least_nonzero, least_nonzero=None).describe()}"
        if self.integer and not (self.low_open or self.high_open):
            return f"an integer from {_number(self.low)} to {_number(self.high)}"
        low = f"{'>' if self.low_open else '>='} {_number(self.low)}"
        high = f"{'<' if self.high_open else '<='} {_number(self.high)}"
        return f"{'an integer' if self.integer else 'a number'} {low} and {high}"

    def check(self, name: str, value: Any) -> None:
        """InputError naming setting ``name`` when ``value`` is outside the range."""
        if not self.contains(value):
            raise InputError(f"{setting(name)} must be {self.describe()}, got {value!r}")


def _number(value: float) -> str:
    """``100,000``, ``0.5``; ``1e+30`` for a float bound no one reads digit by digit (as
    int, 1e30 is 1,000,000,000,000,000,019,884,624,838,656)."""
    whole = isinstance(value, int) or (float(value).is_integer() and abs(value) < 1e15)
    return f"{int(value):,}" if whole else f"{value:g}"


DAY = 86_400
MIN_BOOTSTRAP = 100
"""The fewest resamples a percentile 95% interval is drawn from: its ends are about the
2.5th and 97.5th of them, so from 1 or 2 resamples an "interval" is those resamples
(and can exclude its own estimate); 0 means no interval (not measured)."""
RANGES: dict[str, Range] = {
    # check and batch: the audit
    "bootstrap": Range(0, 100_000, least_nonzero=MIN_BOOTSTRAP,
                       why="resamples of the 95% intervals, each sorting the catalogue; 0: none; below 100 "
                       "they mean nothing"),
    "max_queries": Range(1, 10_000_000, why="queries retrieved (each holds K results per scoring)"),
    "ks": Range(1, 10_000, why="cut-off K of every top list (queries x K results per scoring)"),
    "seed": Range(0, 2**64 - 1, why="seeds numpy accepts"),
    "id_offset": Range(0, 2**63 - 1, why="an int64 id minus the offset is a row"),
    "alphas": Range(0.0, 1.0, integer=False, why="0 is cosine, 1 is dot"),
    "accuracy_tolerance": Range(0.0, 1.0, integer=False, low_open=True, why="a share of dot's NDCG"),
    "max_memory": Range(1, 2**50, why="bytes (up to 1 PiB)"),
    "momentum": Range(0.0, 1.0, integer=False, why="declared SGD momentum (1 or more diverges)"),
    "weight_decay": Range(0.0, 1e6, integer=False, why="declared weight decay"),
    "lr": Range(0.0, 1e30, integer=False, low_open=True, why="declared learning rate"),
    # check and batch: the popularity groups (auditor/config.py GroupPolicy) and the gain/lose table
    "head_mass": Range(0.0, 1.0, integer=False, low_open=True, why="share of the popularity mass in the head"),
    "tail_mass": Range(0.0, 1.0, integer=False, low_open=True, why="share of the popularity mass in the tail"),
    "popular_percent": Range(0.0, 100.0, integer=False, low_open=True, why="percent of items popular for users"),
    "niche_fraction": Range(0.0, 1.0, integer=False, low_open=True, why="share of users who are niche"),
    "blockbuster_fraction": Range(0.0, 1.0, integer=False, low_open=True, why="share of users who are blockbuster"),
    "short_head_mass": Range(0.0, 1.0, integer=False, low_open=True, why="Elliot's short head: share of the mass"),
    "top_items": Range(0, 10_000, why="items listed on each side of the gain/lose table"),
    # check and batch: the run
    "plugin_timeout": Range(0.0, 7 * DAY, integer=False, why="seconds; 0: no limit"),
    "row_timeout": Range(0.0, 7 * DAY, integer=False, why="seconds per batch row; 0: no limit"),
    "jobs": Range(1, 512, why="worker processes"),
    "flush_interval": Range(0.0, DAY, integer=False, why="seconds between rewrites of the results"),
    # retrain and experiment
    "epochs": Range(1, 10_000, why="passes over the interactions"),
    "dim": Range(1, 4_096, why="embedding dimension"),
    "hidden_dim": Range(1, 16_384, why="hidden width"),
    "history_length": Range(1, 10_000, why="items per user history"),
    "batch_size": Range(2, 1_000_000, why="interactions per batch"),
    "n_users": Range(1, 10_000_000, why="synthetic users"),
    "n_items": Range(2, 10_000_000, why="synthetic items"),
    "n_interactions": Range(1, 100_000_000, why="synthetic interactions"),
    "zipf": Range(0.0, 10.0, integer=False, why="Zipf exponent"),
    "temperature": Range(0.0, 1e3, integer=False, low_open=True, why="InfoNCE temperature"),
    "train_lr": Range(0.0, 1e30, integer=False, low_open=True, why="learning rate (a huge one diverges, said as such)"),
    "train_momentum": Range(0.0, 1.0, integer=False, low_open=True, high_open=True, why="momentum optimizer"),
    "init_std": Range(0.0, 1e3, integer=False, low_open=True, why="initialisation std"),
    "threads": Range(1, 1_024, why="torch threads"),
    "seeds": Range(1, 1_000, why="seeds per setting"),
    "k": Range(1, 10_000, why="cut-off K of the experiments"),
    "holdout_fraction": Range(0.0, 1.0, integer=False, low_open=True, high_open=True, why="share held out"),
}


def check_ranges(values: dict[str, Any]) -> None:
    """InputError for the first value of ``values`` (setting -> value, or a tuple of
    values for ``ks`` and ``alphas``) outside its range; None values are not set."""
    for name, value in values.items():
        found = RANGES.get(name)
        if found is None or value is None:
            continue
        for one in value if isinstance(value, (tuple, list)) else (value,):
            found.check(name, one)


SEQUENCES = {"ks": "cut-offs, such as (10, 100)", "alphas": "exponents, such as (0.25, 0.5)"}
"""The settings that hold several values, and what one of them looks like."""


def plain_numbers(values: dict[str, Any], optional: Iterable[str] = ()) -> dict[str, Any]:
    """``values`` (setting -> value, a sequence of values for :data:`SEQUENCES`) as one
    normal form, before any check compares them: numpy's and every other
    ``numbers.Integral`` / ``numbers.Real`` scalar as a Python int / float (``np.int64(10)``
    is the integer 10), a whole number as an int where the setting is one, and a sequence
    as a tuple without repeats, first kept (as the command line's ``-k 10 -k 10``). A value
    that is no number, a sequence setting given one value, or None for a setting not
    ``optional`` (None: not set) is an InputError naming the setting; ranges are checked
    later (:func:`check_ranges`)."""
    out: dict[str, Any] = {}
    for name, value in values.items():
        if value is None and name in optional:
            out[name] = None
            continue
        if value is None or name not in SEQUENCES:
            out[name] = _plain(name, value)
            continue
        if isinstance(value, (str, bytes, numbers.Number)) or not isinstance(value, Iterable):
            raise InputError(f"{setting(name)} must be a sequence of {SEQUENCES[name]}, got {value!r}")
        out[name] = tuple(dict.fromkeys(_plain(name, one) for one in value))
    return out


def plain_paths(values: dict[str, Any], sequences: Iterable[str] = ()) -> dict[str, Any]:
    """``values`` (path setting -> value) as ``pathlib.Path`` (None kept: not set): a str
    or any ``os.PathLike`` naming a file; a setting in ``sequences`` (``plugins``) a tuple of
    them. Anything else (an in-memory table, a tensor, a dict, a number, bytes, an empty
    str, a str holding a NUL byte) is an InputError naming the setting when the config is built, never a TypeError
    deep in the run or an unhashable config."""
    out: dict[str, Any] = {}
    for name, value in values.items():
        if name not in sequences:
            out[name] = None if value is None else _path(name, value)
        elif isinstance(value, (str, bytes, os.PathLike)) or not isinstance(value, (tuple, list)):
            raise InputError(f"{setting(name)} must be a sequence of paths, such as (Path('my_plugin.py'),), "
                             f"got {type(value).__name__}")
        else:
            out[name] = tuple(_path(name, one) for one in value)
    return out


def word_or_path(name: str, value: Any, words: tuple[str, ...]) -> str | Path:
    """Setting ``name``'s value: one of ``words`` as given (a str), else a file refused as
    :func:`plain_paths` refuses one (a Path, even one spelled like a word, names a file)."""
    if isinstance(value, str) and value in words:
        return value
    try:
        return _path(name, value)
    except InputError as error:
        raise InputError(f"{error}, or one of the words {', '.join(words)}") from None


def _path(name: str, value: Any) -> Path:
    """One path setting's value as a Path (:func:`plain_paths`)."""
    spelled = os.fspath(value) if isinstance(value, (str, os.PathLike)) else None
    if isinstance(spelled, str) and "\x00" in spelled:  # no file system takes one: open() raises a bare ValueError
        raise InputError(f"{setting(name)} must be a path to a file, got {spelled!r}, which holds a NUL byte "
                         "(\\x00) no file name can hold")
    if isinstance(spelled, str) and spelled.strip():
        return Path(spelled)
    module = type(value).__module__.split(".")[0]
    kind = ("an empty path" if isinstance(spelled, str)
            else type(value).__name__ if module == "builtins" else f"{module}.{type(value).__name__}")
    hint = ("; save an in-memory table to a file (numpy.save, torch.save, DataFrame.to_parquet) and pass its path"
            if hasattr(value, "shape") or isinstance(value, dict) else "")
    raise InputError(f"{setting(name)} must be a path to a file (a str or pathlib.Path), got {kind}{hint}")


def _plain(name: str, value: Any) -> Any:
    """One value of setting ``name`` as a Python number (:func:`plain_numbers`)."""
    limits = RANGES[name]
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        limits.check(name, value)  # refused, naming the setting and what it takes
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    number = float(value)
    if not isinstance(value, float):  # np.float32(0.3) is 0.3 as it prints, not 0.30000001192092896
        try:
            number = float(str(value))
        except ValueError:  # Fraction(3, 10) prints 3/10
            pass
    return int(number) if limits.integer and number.is_integer() else number


def seed_run(first: int, count: int) -> list[int]:
    """The seeds an experiment runs, ``first`` (``seed``) and the ``count - 1`` after it
    (``seeds``): each within the seed range, which torch and numpy take no seed beyond, so
    an InputError naming both settings where the last would pass it (not a failure after
    the first runs trained)."""
    RANGES["seed"].check("seed", first)
    RANGES["seeds"].check("seeds", count)
    high = int(RANGES["seed"].high)
    if first + count - 1 > high:
        raise InputError(
            f"{setting('seed')} {first} with {setting('seeds')} {count} would run seeds up to {first + count - 1:,}, "
            f"past the largest seed {high:,}: give {setting('seed')} at most {high - count + 1:,}"
        )
    return list(range(first, first + count))


__all__ = ["MIN_BOOTSTRAP", "RANGES", "Range", "SEQUENCES", "check_ranges", "plain_numbers", "seed_run"]
