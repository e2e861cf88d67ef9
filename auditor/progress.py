"""Progress reporting that the library can call without printing anything.

Library code receives a :class:`Progress` and wraps long loops in ``progress.track``;
the CLI passes a rich-backed implementation, tests and batch workers the silent default.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

Advance = Callable[[float], None]


class Progress:
    """Silent progress sink; subclasses display it."""

    @contextmanager
    def track(self, description: str, total: float | None = None) -> Iterator[Advance]:
        """Context manager yielding ``advance(n)`` to call as work completes."""
        yield _ignore

    def note(self, message: str) -> None:
        """A one-line status message (e.g. which file is being read)."""


def _ignore(_: float = 1) -> None:
    return None


SILENT = Progress()
