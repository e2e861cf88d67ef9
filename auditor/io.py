"""Output files are written atomically: a temp file beside the target, then a rename."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Mapping
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
        blocker = next((p for p in (target.parent, *target.parent.parents) if p.exists()), None)
        reason = f"{blocker} is a file, not a folder" if blocker and not blocker.is_dir() else exc.strerror
        raise InputError(f"cannot create folder {target.parent} for {target}: {reason}") from exc
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:  # read-only folder, no permission: name the target, not the temp file
        raise InputError(f"cannot write {target}: {exc.strerror} (folder {target.parent})") from exc
    os.close(fd)
    tmp_path = Path(tmp)
    try:  # from here on, any failure removes the temp file
        # mkstemp creates 0600; give the report the mode a plain open() would (umask applies).
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp_path, 0o666 & ~umask)
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


def check_not_inputs(outputs: Mapping[str, Path | None], inputs: Mapping[str, Path | None]) -> None:
    """Raise InputError when an output path names an input file (never overwrite an input).

    Both mappings go from the option that named the path (``-o``, ``--interactions``) to
    the path; ``None`` entries are skipped. Links and relative paths are resolved, so
    ``./log.csv`` and ``log.csv`` are the same file.
    """
    existing = {flag: Path(p) for flag, p in inputs.items() if p is not None and Path(p).exists()}
    for out_flag, out in outputs.items():
        if out is None or not Path(out).exists():
            continue
        for in_flag, src in existing.items():
            if os.path.samefile(out, src):
                raise InputError(
                    f"{out_flag} {out} is the input file given as {in_flag}; popaudit never "
                    "overwrites an input: choose another output path"
                )
