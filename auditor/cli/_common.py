"""What every command shares: --debug/--plugin options, error handling, progress bars."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress as RichBar,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from auditor.errors import AuditError
from auditor.progress import Advance, Progress

F = TypeVar("F", bound=Callable[..., Any])

stderr = Console(stderr=True, highlight=False)


def common_options(command: F) -> F:
    """Add ``--plugin`` and ``--debug`` and turn AuditError into ``Error: ...`` + exit code."""

    @click.option(
        "--plugin",
        "plugins",
        multiple=True,
        type=click.Path(path_type=Path, dir_okay=False),
        help="Load a single-file plugin (repeatable).",
    )
    @click.option("--debug", is_flag=True, help="Show full tracebacks on errors.")
    @functools.wraps(command)
    def wrapper(*args: Any, debug: bool = False, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except AuditError as exc:
            if debug:
                raise
            fail(str(exc), exc.exit_code)
        except KeyboardInterrupt:
            fail("interrupted", 130)
        except (MemoryError, OSError) as exc:
            if debug:
                raise
            fail(f"{type(exc).__name__}: {exc}", 1)

    return wrapper  # type: ignore[return-value]


def fail(message: str, code: int = 1) -> None:
    """Print ``Error: message`` on stderr and exit with ``code``."""
    click.echo(f"Error: {message}", err=True)
    sys.exit(code)


class RichProgress(Progress):
    """Progress bars on stderr (hidden when stderr is not a terminal)."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled and stderr.is_terminal

    @contextmanager
    def track(self, description: str, total: float | None = None) -> Iterator[Advance]:
        if not self.enabled:
            yield lambda n=1: None
            return
        columns = [SpinnerColumn(), TextColumn("{task.description}"), BarColumn()]
        if total is not None:
            columns += [MofNCompleteColumn(), TimeRemainingColumn()]
        columns.append(TimeElapsedColumn())
        with RichBar(*columns, console=stderr, transient=True) as bar:
            task = bar.add_task(description, total=total)
            yield lambda n=1: bar.advance(task, n)

    def note(self, message: str) -> None:
        if self.enabled:
            stderr.print(f"[dim]{message}[/dim]")
