"""Output files are written atomically: a temp file beside the target, then a rename."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from auditor.errors import InputError


@contextmanager
def atomic_path(target: Path) -> Iterator[Path]:
    """Yield a temporary path in ``target``'s folder; rename it onto ``target`` on success.

    A crash or an exception leaves any existing ``target`` untouched and no temp file.
    """
    target = Path(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create folder {target.parent}: {exc.strerror}") from exc
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    # mkstemp creates 0600; give the report the mode a plain open() would (umask applies).
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp_path, 0o666 & ~umask)
    try:
        yield tmp_path
        os.replace(tmp_path, target)
    finally:
        tmp_path.unlink(missing_ok=True)


def write_atomic(target: Path, data: str | bytes) -> None:
    """Write text (UTF-8) or bytes to ``target`` atomically."""
    with atomic_path(target) as tmp:
        if isinstance(data, bytes):
            tmp.write_bytes(data)
        else:
            tmp.write_text(data, encoding="utf-8")
