"""The CLI's :class:`~auditor.progress.Progress`: rich bars on a terminal, plain lines
elsewhere (CI, nohup, Slurm, ``> log.txt``), nothing with ``-q``.

Plain lines are throttled so a log stays readable whatever the work's grain:

* every ``note`` is a line (an epoch's summary, a failed batch row, the file being read);
* a track whose units are slow (on average at least ``TASK_SECONDS`` each: a batch row,
  a probe) prints a line per completed unit, and so does every ``tasks`` track (an
  experiment's runs), however fast;
* a track of fast units (record batches, training batches) prints at most one line per
  ``INTERVAL_SECONDS``, and a closing line when it printed any or ran that long: it ends
  "· done", or "· interrupted" when Ctrl-C (KeyboardInterrupt) left the track
  ("· terminated by SIGTERM" for SIGTERM: :func:`~auditor.errors.interruption`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from auditor.errors import interruption
from auditor.progress import Advance, Progress

if TYPE_CHECKING:
    from rich.console import Console

INTERVAL_SECONDS = 10.0
"""At most one progress line per this many seconds for a track of fast units."""
TASK_SECONDS = 1.0
"""Units that take at least this long on average are tasks: a line per completed one."""


class RichProgress(Progress):
    """Progress on stderr: rich bars on a terminal, else plain throttled lines; silent
    when not ``enabled`` (``-q``). ``task_seconds`` 0: every unit of a track is a task
    worth a line (a command whose only track counts finished audits)."""

    def __init__(
        self, enabled: bool = True, console: Console | None = None, *, task_seconds: float = TASK_SECONDS
    ) -> None:
        if console is None:
            from rich.console import Console  # on first use: `popaudit --help` needs no rich

            console = Console(stderr=True, highlight=False)
        self.console = console
        self.enabled = enabled
        plain = enabled and not self.console.is_terminal
        self.plain = PlainLines(self._write, task_seconds=task_seconds) if plain else None

    def _write(self, line: str) -> None:
        file = self.console.file
        file.write(line + "\n")
        file.flush()

    @contextmanager
    def track(self, description: str, total: float | None = None) -> Iterator[Advance]:
        if not self.enabled:
            yield _no_progress
        elif self.plain is not None:
            with self.plain.track(description, total) as advance:
                yield advance
        else:
            with _bar(self.console, description, total) as advance:
                yield advance

    @contextmanager
    def tasks(self, description: str, total: float | None = None) -> Iterator[Advance]:
        if self.plain is None:
            with self.track(description, total) as advance:
                yield advance
        else:  # off a terminal: a line per finished unit, however fast
            with self.plain.track(description, total, task_seconds=0.0) as advance:
                yield advance

    def note(self, message: str) -> None:
        if self.plain is not None:
            self.plain.note(message)
        elif self.enabled:
            self.console.print(message, style="dim", markup=False, highlight=False)  # [brackets] stay


@contextmanager
def _bar(console: Console, description: str, total: float | None) -> Iterator[Advance]:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress as RichBar,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = [SpinnerColumn(), TextColumn("{task.description}"), BarColumn()]
    if total is not None:
        columns += [MofNCompleteColumn(), TimeRemainingColumn()]
    columns.append(TimeElapsedColumn())
    with RichBar(*columns, console=console, transient=True) as bar:
        task = bar.add_task(description, total=total)

        def advance(n: float = 1) -> None:
            bar.advance(task, n)

        yield advance


class PlainLines:
    """Progress as timestamped plain lines through ``write`` (see the module's rules)."""

    def __init__(
        self,
        write: Callable[[str], None],
        *,
        interval: float = INTERVAL_SECONDS,
        task_seconds: float = TASK_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.write, self.interval, self.task_seconds, self.clock = write, interval, task_seconds, clock

    def note(self, message: str) -> None:
        self.write(f"[{time.strftime('%H:%M:%S')}] {message}")

    @contextmanager
    def track(
        self, description: str, total: float | None = None, *, task_seconds: float | None = None
    ) -> Iterator[Advance]:
        """``task_seconds``: this track's threshold for a line per unit (None: the instance's)."""
        threshold = self.task_seconds if task_seconds is None else task_seconds
        start = last_line = self.clock()
        done = 0.0
        done_at_line = 0.0
        lines = 0

        def advance(n: float = 1) -> None:
            nonlocal done, done_at_line, last_line, lines
            done += n
            now = self.clock()
            units = done - done_at_line
            slow_units = units >= 1 and (now - last_line) / units >= threshold
            if slow_units or now - last_line >= self.interval:
                self.note(self._status(description, done, total, now - start))
                last_line, done_at_line, lines = now, done, lines + 1

        try:
            yield advance
        except KeyboardInterrupt as stop:  # where Ctrl-C stopped it (never "done": a log reader keys on that)
            if lines or self.clock() - start >= self.interval:
                self.note(self._status(description, done, total, self.clock() - start) + " · " + interruption(stop)[0])
            raise
        # Any other error: no closing line (its Error: message follows).
        elapsed = self.clock() - start
        finished = total is not None and done >= total
        if (lines or elapsed >= self.interval) and not (finished and done_at_line == done):
            self.note(self._status(description, done, total, elapsed) + " · done")

    @staticmethod
    def _status(description: str, done: float, total: float | None, elapsed: float) -> str:
        count = f"{done:,.0f}"
        if total is not None:
            count += f"/{total:,.0f}" + (f" ({done / total:.0%})" if total > 0 else "")
        return f"{description}: {count}, {_duration(elapsed)} elapsed"


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _no_progress(n: float = 1) -> None:
    """Progress is not shown (-q)."""
