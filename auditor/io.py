"""Files in and out: inputs must be regular files; outputs are written atomically.

What an output path names decides how it is written (:func:`output_plan`, the one
policy every command's outputs go through):

- a regular file, or nothing yet: a temp file beside the target renamed onto it, so a
  crash never leaves half a report; a file replaced keeps its mode, as one rewritten in
  place would (a new file gets the mode the umask gives);
- a descriptor of this process (``/dev/stdout``, ``/dev/stderr``, ``/dev/fd/N``,
  ``/proc/self/fd/N``, or a link whose chain leads there), recognised by its name, never
  by what the descriptor holds: the finished content is copied onto the descriptor at
  its offset (a ``> file`` or ``>> file`` redirect, a pipe, a terminal alike). Renaming
  a temp file onto ``/dev/stdout`` when stdout is redirected to a file would replace the
  ``/dev/stdout`` link itself, for every later process;
- a FIFO or a character device (``/dev/null``), named or reached through a link: written
  directly. A FIFO is opened without blocking first: one with no reader is refused
  instead of hanging the run;
- anything else is refused: a symlink to a regular file, a folder or nothing (popaudit
  neither writes through a link, which someone may have planted: ``report.json ->
  ~/.bashrc``, nor replaces it, which would break the link its owner made), a folder, a
  block device or a socket; but a file continued by its path (a resumed training trace)
  is rewritten at the link's end with ``follow_link=True`` (the link stays).

Every write error (a full disk included) is an :class:`~auditor.errors.OutputError`
naming the target.
"""

from __future__ import annotations

import errno
import hashlib
import itertools
import os
import re
import stat
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

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


SAMPLE_BLOCK = 1 << 20
"""Bytes of each block :func:`sampled_sha256` reads (at the start, middle and end)."""


def sampled_sha256(path: Path | str, size: int) -> str:
    """SHA-256 (hex) of a file's size and three :data:`SAMPLE_BLOCK` blocks (first, middle,
    last): a cheap content check of a file too large to hash whole, which catches a
    rewrite that changes any of them. OSError when it cannot be read."""
    digest = hashlib.sha256(str(size).encode())
    with open(path, "rb") as fh:
        for offset in (0, max(0, size // 2 - SAMPLE_BLOCK // 2), max(0, size - SAMPLE_BLOCK)):
            fh.seek(offset)
            digest.update(fh.read(SAMPLE_BLOCK))
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
    """True when ``path`` is not written by a temp file renamed onto it: a descriptor of
    this process (``/dev/stdout``, by name), or an existing path that is neither a regular
    file nor a folder (``/dev/null``, a FIFO, a device; symlinks followed). Nothing can be
    put beside it (a Markdown report's figures, a results journal)."""
    if descriptor_named(path) is not None:
        return True
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


_MAX_LINKS = 40  # as the kernel's ELOOP limit
_STREAM_NAMES = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}


def descriptor_named(path: Path | str) -> int | None:
    """The descriptor of this process that ``path`` names, or None: ``/dev/stdin``,
    ``/dev/stdout``, ``/dev/stderr``, ``/dev/fd/N``, ``/proc/self/fd/N``,
    ``/proc/<this pid>/fd/N``, or a symlink whose chain passes through one
    (``/dev/stdout -> /proc/self/fd/1``). Read from the names, link by link,
    never from the file the descriptor holds (``os.stat('/dev/stdout')`` is a regular
    file when stdout is redirected to one)."""
    own = re.compile(rf"/proc/(?:self|thread-self|{os.getpid()})(?:/task/\d+)?/fd")
    current = Path(path)
    try:
        if os.path.abspath(current) in _STREAM_NAMES:  # by name, even where the link was replaced by a file
            return _STREAM_NAMES[os.path.abspath(current)]
    except ValueError:
        return None
    for _ in range(_MAX_LINKS):
        try:
            if current.name.isdigit() and own.fullmatch(os.path.realpath(current.parent)):
                return int(current.name)
            if not current.is_symlink():
                return None
            current = current.parent / os.readlink(current)
        except (OSError, ValueError):
            return None
    return None


@dataclass(frozen=True)
class OutputPlan:
    """How an output path is written (see the module docstring): ``atomic`` (temp file and
    rename), ``descriptor`` (copied onto descriptor ``fd``) or ``direct`` (a FIFO or a
    character device, written by its name)."""

    how: Literal["atomic", "descriptor", "direct"]
    fd: int | None = None


def output_plan(target: Path | str) -> OutputPlan:
    """How ``target`` is written; OutputError when popaudit does not write there (a
    symlink to a regular file, a folder or nothing; a folder; a block device; a socket;
    a descriptor that is not open). Called before a run (by :func:`check_not_inputs`) and
    again when writing."""
    target = Path(target)
    fd = descriptor_named(target)
    if fd is not None:
        try:
            os.fstat(fd)
        except OSError:
            raise OutputError(f"cannot write {target}: it names descriptor {fd}, which is not open") from None
        return OutputPlan("descriptor", fd)
    link = target.is_symlink()
    try:
        mode: int | None = os.stat(target).st_mode
    except (OSError, ValueError):
        mode = None
    if mode is not None and (stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)):
        return OutputPlan("direct")
    if link:
        raise OutputError(
            f"cannot write {target}: it is a symbolic link (to {os.readlink(target)}), and popaudit neither "
            "writes through a link nor replaces it; remove the link or choose another output path"
        )
    if mode is None or stat.S_ISREG(mode):
        _check_folder(target)
        return OutputPlan("atomic")
    if stat.S_ISDIR(mode):
        raise OutputError(f"cannot write {target}: it is a folder")
    raise OutputError(f"cannot write {target}: it is {file_kind(mode)}; popaudit writes regular files, FIFOs, "
                      "character devices such as /dev/null, and its own descriptors (/dev/stdout)")


def _write_error(target: Path, exc: OSError) -> OutputError:
    reason = exc.strerror or str(exc) or type(exc).__name__
    return OutputError(f"cannot write {target}: {reason}")


def torch_save(obj: Any, path: Path, target: Path | None = None, *, zip_format: bool = True) -> None:
    """``torch.save`` to ``path``; torch's failed writes (RuntimeError for a full disk or
    ``/dev/full``) become an OutputError naming ``target`` (default: ``path``).

    Written through a file handle: torch then names the archive's inner folder ``archive``,
    where given a path it names it after the file, here the atomic write's random temp
    name, so the same object would never give the same bytes twice."""
    import torch  # heavy: loaded only by the commands that write checkpoints

    try:
        with open(path, "wb") as handle:
            torch.save(obj, handle, _use_new_zipfile_serialization=zip_format)
    except RuntimeError as exc:
        raise serializer_error(target or path, exc) from exc


def serializer_error(target: Path, exc: BaseException) -> OutputError:
    """The OutputError for a serializer that reports a failed write its own way (torch's
    writer raises RuntimeError for a full disk or ``/dev/full``): worded for the user."""
    detail = str(exc).rsplit("] ", 1)[-1].strip(" .") or type(exc).__name__
    return OutputError(f"cannot write {target}: the write failed ({detail}); is the disk full or the target not a file?")


@contextmanager
def atomic_path(target: Path, *, follow_link: bool = False) -> Iterator[Path]:
    """Yield the path to write ``target``'s content to, as :func:`output_plan` says.

    For a regular target: a temporary file in the same folder, renamed onto ``target``
    on success (a crash or an exception leaves any existing ``target`` untouched and no
    temp file). For a descriptor (``/dev/stdout``): a temporary file whose content is
    copied onto the descriptor on success. For a FIFO with a reader or a character
    device: the target itself; a FIFO without a reader is an OutputError. A target
    popaudit does not write (a symlink to a file, a folder) is an OutputError, unless
    ``follow_link``: then the file the link chain ends at is the target. Write errors
    become :class:`OutputError`.
    """
    target = Path(os.path.realpath(target)) if follow_link and Path(target).is_symlink() else Path(target)
    plan = output_plan(target)
    if plan.how == "descriptor":
        assert plan.fd is not None
        with _via_descriptor(target, plan.fd) as path:
            yield path
        return
    if plan.how == "direct":  # a FIFO or /dev/null: keep its name
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
    created = _make_parent(target)
    written = False
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:  # read-only folder, no permission: name the target, not the temp file
        _remove_empty(created)
        raise OutputError(f"cannot write {target}: {exc.strerror} (folder {target.parent})") from exc
    os.close(fd)
    tmp_path = Path(tmp)
    try:  # from here on, any failure removes the temp file (and the folders made for it)
        os.chmod(tmp_path, _open_mode(target))
        try:
            yield tmp_path
            output_plan(target)  # a link or folder put there while the content was written
            os.replace(tmp_path, target)
            written = True
        except OSError as exc:  # ENOSPC, EIO, EDQUOT ... while writing or renaming
            raise _write_error(target, exc) from exc
    finally:
        tmp_path.unlink(missing_ok=True)
        if not written:
            _remove_empty(created)


def _open_mode(target: Path) -> int:
    """The mode open() would leave ``target`` with (mkstemp makes 0600): its own, or 0666 less the umask."""
    try:
        existing = os.stat(target)
        if stat.S_ISREG(existing.st_mode):
            return stat.S_IMODE(existing.st_mode)
    except OSError:
        pass
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _check_folder(target: Path) -> None:
    """OutputError when ``target``'s folder cannot be made or written: the nearest existing
    one above it is a file, or this process may not write in it (a read-only file
    system). Checked before a run, so a typo in an output found last (a batch's
    ``--html``) does not cost the run."""
    existing = next((p for p in target.parents if os.path.lexists(p)), None)
    if existing is None:
        return
    if not existing.is_dir():
        raise OutputError(f"cannot create folder {target.parent} for {target}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write {target}: folder {existing} is not writable")


def _make_parent(target: Path) -> list[Path]:
    """Create ``target``'s folder; the folders this made, deepest first. OutputError
    naming what blocks it."""
    missing = list(itertools.takewhile(lambda folder: not os.path.lexists(folder), target.parents))
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        _check_folder(target)  # a file in the way, a read-only folder: said as before a run
        raise OutputError(f"cannot create folder {target.parent} for {target}: {exc.strerror}") from exc
    return missing


def _remove_empty(folders: list[Path]) -> None:
    """Remove the folders a failed write made (deepest first), where still empty: a run
    that writes nothing leaves no trace (another process's file in one keeps it)."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return


@contextmanager
def _via_descriptor(target: Path, fd: int) -> Iterator[Path]:
    """A temp file (in the temp folder) whose content goes onto descriptor ``fd`` once
    written: at the descriptor's offset, as a shell's ``>&N`` would (an append redirect
    stays appended), and nothing at all when the writer fails."""
    try:
        handle, tmp = tempfile.mkstemp(prefix="popaudit-out.", suffix=".tmp")
    except OSError as exc:
        raise OutputError(f"cannot write {target}: no temporary file ({exc.strerror})") from exc
    os.close(handle)
    tmp_path = Path(tmp)
    try:
        try:
            yield tmp_path
            for stream in (sys.stdout, sys.stderr):  # what this process printed goes first
                if stream is not None and not stream.closed:
                    stream.flush()
            _copy_onto(tmp_path, fd)
        except OSError as exc:
            raise _write_error(target, exc) from exc
    finally:
        tmp_path.unlink(missing_ok=True)


def _copy_onto(source: Path, fd: int) -> None:
    """Every byte of ``source`` written to ``fd`` (short writes continued)."""
    with open(source, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            view = memoryview(block)
            while view:
                view = view[os.write(fd, view):]


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


def write_atomic(target: Path, data: str | bytes, *, follow_link: bool = False, durable: bool = False) -> None:
    """Write text (UTF-8) or bytes to ``target`` (atomically when it is a regular file;
    ``follow_link``: see :func:`atomic_path`). ``durable``: on the disk before the rename
    (fsync), so a power loss leaves the old content or the new, never an empty file; for a
    file that cannot be written again (a training trace), not for a report a rerun rewrites."""
    with atomic_path(target, follow_link=follow_link) as path:
        with open(path, "wb") as fh:
            fh.write(data if isinstance(data, bytes) else data.encode("utf-8"))
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
