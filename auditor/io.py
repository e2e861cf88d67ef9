"""Files in and out: inputs must be regular files; outputs are written atomically.

Outputs go to a temp file beside the target that is renamed onto it, so a crash never
leaves half a report. A symlink at the target is replaced by the new file, never
followed: a link someone planted (``report.json -> ~/.bashrc``) cannot make popaudit
write over what it points at. Targets that are not regular files (``/dev/null``,
``/dev/stdout``, a FIFO, a device) are written directly: renaming onto them would
replace the special file with a regular one. A FIFO is opened without blocking first:
one with no reader is refused instead of hanging the run. Every write error (a full
disk included) is an :class:`~auditor.errors.OutputError` naming the target.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from auditor.errors import InputError, OutputError

_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def file_kind(mode: int) -> str:
    """What a non-regular file is, in words (from ``os.stat().st_mode``)."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def file_sha256(path: Path | str) -> str:
    """SHA-256 of a file's bytes (hex), read in 1 MiB blocks; OSError when it cannot be
    read (each caller says what that means for it)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def require_regular_file(
    path: Path | str, what: str = "file", *, folder_ok: bool = False, error: type[InputError] = InputError
) -> Path:
    """``path`` as a Path, or InputError when it is missing, a special file or (unless
    ``folder_ok``: a plugin may read a model saved as a folder) a folder.

    Reading a FIFO blocks forever and a device such as /dev/zero never ends, so every
    input is checked before it is opened (symlinks are followed). ``error``: the
    InputError subclass to raise (QueryError for query files, ...).
    """
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise error(f"{what} not found: {path}") from None
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror}") from exc
    if stat.S_ISDIR(mode):
        if folder_ok:
            return path
        raise error(f"{what} {path} is a folder, not a file")
    if not stat.S_ISREG(mode):
        raise error(f"{what} {path} is {file_kind(mode)}, not a regular file; popaudit reads regular files only")
    return path


def is_special_file(path: Path | str) -> bool:
    """True when ``path`` exists and is neither a regular file nor a folder (``/dev/null``,
    ``/dev/stdout``, a FIFO, a device; symlinks followed). An output there is written
    directly, and nothing can be put beside it (a Markdown report's figures)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


_is_special = is_special_file


def _write_error(target: Path, exc: OSError) -> OutputError:
    reason = exc.strerror or str(exc) or type(exc).__name__
    return OutputError(f"cannot write {target}: {reason}")


def torch_save(obj: Any, path: Path, target: Path | None = None, *, zip_format: bool = True) -> None:
    """``torch.save`` to ``path``; torch's failed writes (RuntimeError for a full disk or
    ``/dev/full``) become an OutputError naming ``target`` (default: ``path``)."""
    import torch  # heavy: loaded only by the commands that write checkpoints

    try:
        torch.save(obj, path, _use_new_zipfile_serialization=zip_format)
    except RuntimeError as exc:
        raise serializer_error(target or path, exc) from exc


def serializer_error(target: Path, exc: BaseException) -> OutputError:
    """The OutputError for a serializer that reports a failed write its own way (torch's
    writer raises RuntimeError for a full disk or ``/dev/full``): worded for the user."""
    detail = str(exc).rsplit("] ", 1)[-1].strip(" .") or type(exc).__name__
    return OutputError(f"cannot write {target}: the write failed ({detail}); is the disk full or the target not a file?")


@contextmanager
def atomic_path(target: Path) -> Iterator[Path]:
    """Yield the path to write ``target``'s content to.

    For a regular target: a temporary file in the same folder, renamed onto ``target``
    on success (a crash or an exception leaves any existing ``target`` untouched and no
    temp file). A symlink at ``target`` is replaced by the file, never followed (what it
    points at is left as it is). For a special target (``/dev/null``, ``/dev/stdout``, a
    FIFO with a reader): the target itself; a FIFO without a reader is an OutputError.
    Write errors become :class:`OutputError`.
    """
    target = Path(target)
    if _is_special(target):  # /dev/stdout is a link to a pipe or terminal: keep its name
        held = _hold_fifo(target)
        try:
            # While a FIFO is held open for writing, opening it again never blocks and its
            # reader never sees an early end: the writer gets it through /proc/self/fd.
            yield target if held is None else Path(f"/proc/self/fd/{held}")
        except OSError as exc:
            raise _write_error(target, exc) from exc
        finally:
            if held is not None:
                os.close(held)
        return
    if target.is_dir() and not target.is_symlink():
        raise OutputError(f"cannot write {target}: it is a folder")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        blocker = next((p for p in (target.parent, *target.parent.parents) if p.exists()), None)
        reason = f"{blocker} is a file, not a folder" if blocker and not blocker.is_dir() else exc.strerror
        raise OutputError(f"cannot create folder {target.parent} for {target}: {reason}") from exc
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:  # read-only folder, no permission: name the target, not the temp file
        raise OutputError(f"cannot write {target}: {exc.strerror} (folder {target.parent})") from exc
    os.close(fd)
    tmp_path = Path(tmp)
    try:  # from here on, any failure removes the temp file
        # mkstemp creates 0600; give the report the mode a plain open() would (umask applies).
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp_path, 0o666 & ~umask)
        try:
            yield tmp_path
            os.replace(tmp_path, target)
        except OSError as exc:  # ENOSPC, EIO, EDQUOT ... while writing or renaming
            raise _write_error(target, exc) from exc
    finally:
        tmp_path.unlink(missing_ok=True)


def _hold_fifo(target: Path) -> int | None:
    """A blocking write descriptor of ``target`` when it is a FIFO with a reader (None for
    any other special file, or where /proc/self/fd cannot reopen it); OutputError when
    no process reads it: opening it for writing would block forever. Opened without
    blocking, a FIFO with no reader fails with ENXIO."""
    try:
        if not stat.S_ISFIFO(os.stat(target).st_mode):
            return None
        fd = os.open(target, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise OutputError(
                f"cannot write {target}: it is a FIFO (named pipe) that no process is reading; start the "
                "reader first, or write to a file"
            ) from exc
        return None  # other errors surface, worded, when the writer opens it
    os.set_blocking(fd, True)
    if not os.path.exists(f"/proc/self/fd/{fd}"):  # no procfs: write the FIFO by name
        os.close(fd)
        return None
    return fd


def refuse_linked_folder(folder: Path, owner: str) -> None:
    """OutputError when ``folder`` (one popaudit creates beside an output: a Markdown
    report's figures) is a symlink: files are written into a folder the user named, or
    into a real one popaudit made, never through a link to somewhere else."""
    if Path(folder).is_symlink():
        raise OutputError(
            f"cannot write the files of {owner} into {folder}: it is a symbolic link (to "
            f"{os.readlink(folder)}), and popaudit never writes through a link it was not given; "
            "remove the link or choose another output path"
        )


def write_atomic(target: Path, data: str | bytes) -> None:
    """Write text (UTF-8) or bytes to ``target`` (atomically when it is a regular file)."""
    with atomic_path(target) as path:
        with open(path, "wb") as fh:
            fh.write(data if isinstance(data, bytes) else data.encode("utf-8"))


def check_not_inputs(outputs: Mapping[str, Path | None], inputs: Mapping[str, Path | None]) -> None:
    """Raise InputError when an output would overwrite an input (never destroy an input).

    Both mappings go from what named the path (``-o``, ``--interactions``, ``row 3
    model``) to the path; ``None`` entries are skipped. Paths are compared as the files
    they resolve to (symlinks followed, hard links by inode), so ``./log.csv``,
    ``log.csv`` and a link to it are the same file. Special files (``/dev/null``) are
    never inputs worth protecting from an output. Two outputs naming the same regular
    file are refused too (one would silently replace the other); list every file a run
    writes, a Markdown report's figures included (see
    :func:`auditor.plugins.renderers.planned_outputs`), under a name that says whose it is.
    """
    existing = {
        flag: Path(p) for flag, p in inputs.items()
        if p is not None and Path(p).exists() and not _is_special(Path(p))
    }
    named: dict[str, str] = {}
    for out_flag, out in outputs.items():
        if out is None or _is_special(Path(out)):
            continue
        real = os.path.realpath(out)
        if real in named:
            raise InputError(f"{named[real]} and {out_flag} both name {out}; give each output its own file")
        named[real] = out_flag
        if not Path(out).exists():
            continue
        for in_flag, src in existing.items():
            if os.path.samefile(out, src):
                raise InputError(
                    f"{out_flag} {out} is the input file given as {in_flag}; popaudit never "
                    "overwrites an input: choose another output path"
                )
