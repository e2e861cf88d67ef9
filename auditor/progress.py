"""Progress reporting that the library can call without printing anything.

Library code receives a :class:`Progress` and wraps long loops in ``progress.track``;
the CLI passes a rich-backed implementation, tests and batch workers the silent default.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

Advance = Callable[[float], None]


class Progress:
    """Silent progress sink; subclasses display it."""

    @contextmanager
    def track(self, description: str, total: float | None = None) -> Iterator[Advance]:
        """Context manager yielding ``advance(n)`` to call as work completes."""
        yield _ignore

    @contextmanager
    def tasks(self, description: str, total: float | None = None) -> Iterator[Advance]:
        """As :meth:`track`, for units that are each a finished piece of work (an experiment's
        run): a display that throttles fast units still shows each of these (off a terminal, a
        line per unit). Default: :meth:`track`."""
        with self.track(description, total) as advance:
            yield advance

    def note(self, message: str) -> None:
        """A one-line status message (e.g. which file is being read)."""


def tasks_of(progress: Progress, description: str, total: float | None = None) -> AbstractContextManager[Advance]:
    """``progress.tasks(...)``, or ``track`` for an object with only ``track`` and ``note``
    (the library takes any object with :class:`Progress`'s methods: docs/api.md)."""
    tasks = getattr(progress, "tasks", None)
    return tasks(description, total) if tasks is not None else progress.track(description, total)


def _ignore(_: float = 1) -> None:
    return None


SILENT = Progress()
