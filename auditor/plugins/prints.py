"""Where a plugin's prints go: stderr, never into machine output on stdout.

A report, a results table or a listing may be written to stdout (``-o /dev/stdout``,
``--json /dev/stdout``, ``plugins --json``), and a plugin's ``print`` (at import, in a
hook, in a live model) would land in front of it. ``check`` and ``mitigate`` run plugin
code in a child whose stdout is stderr (``cli/_isolation.py``); every other process that
runs plugin code (a batch worker, an inline batch row, ``popaudit plugins``) runs it
inside :func:`prints_to_stderr`.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def prints_to_stderr() -> Iterator[None]:
    """Within the block, file descriptor 1 and ``sys.stdout`` are stderr (Python prints
    and native writes alike); both are restored after it. Nesting is safe: each block
    restores what it found, a closed descriptor 1 included."""
    _flush(sys.stdout)
    try:
        saved: int | None = os.dup(1)
    except OSError:  # descriptor 1 closed (`>&-`): opened onto stderr here, closed again after
        saved = None
    previous = sys.stdout
    try:
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        yield
    finally:
        _flush(sys.stdout)
        sys.stdout = previous
        if saved is None:
            os.close(1)
        else:
            os.dup2(saved, 1)
            os.close(saved)


def _flush(stream: object) -> None:
    """Flush ``stream`` if it can be (a closed or replaced stream is left alone)."""
    with contextlib.suppress(Exception):
        stream.flush()  # type: ignore[attr-defined]
