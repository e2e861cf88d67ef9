"""The hostile-input corpus: data-driven cases and the one runner that checks them all.

A :class:`Case` builds its files in a fresh folder (nothing binary is committed: every
file is made by the case itself), names the command line, and states what a demanding
user expects:

(a) the documented exit code (0 ran, 1 error, 2 usage error, 3 gate; ``auditor/errors.py``);
(b) an ``Error:`` message matching a regex that names the file, option or column at
    fault, and never a Python traceback;
(c) nothing lost: every file the case made is byte-for-byte (sha256), mtime and kind
    unchanged afterwards, no file appears that the case did not allow (no stray temp
    file, no half-written report), the run's ``$TMPDIR`` is left empty, and no marker
    file proves that code from an input ran.

Cases that need a real process (a FIFO that could block, ``sys.exit`` in a plugin,
``/dev/stdout``) run ``python -m auditor`` with a timeout; the rest run in-process
through click's CliRunner, as the other CLI tests do. A case the product fails today is
listed in its area's ``PRODUCT_FAILURES`` with the reason, and runs as a strict xfail.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import multiprocessing.util
import os
import re
import shlex
import stat
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from auditor.cli import cli

_REAL_TMP = "/tmp" if os.access("/tmp", os.W_OK) else tempfile.gettempdir()
"""Where each case's $TMPDIR is made: a short path (batch workers put a Unix socket,
at most 107 bytes long, under it)."""

FAST = ("--bootstrap", "0", "--no-probes", "-q")
"""Options that keep a real audit of a small table well under a second."""

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_GATE = 0, 1, 2, 3
"""The documented exit codes (README 'Exit codes', auditor/errors.py)."""


# ---------------------------------------------------------------------------- cases


@dataclass(frozen=True)
class Built:
    """What a case's ``build`` made: the command line and what the run may leave behind."""

    args: Sequence[str]
    """Command line after ``popaudit`` (paths relative to the case folder, the cwd)."""
    outputs: Sequence[str] = ()
    """Glob patterns (relative to the case folder) of files the run may create."""
    must_exist: Sequence[str] = ()
    """Outputs that must exist afterwards."""
    markers: Sequence[Path] = ()
    """Files that exist only if code from an input ran (must not exist afterwards)."""
    outside: Sequence[Path] = ()
    """Paths outside the case folder the run must not create (removed if it does)."""
    check: Callable[[Path, Outcome], None] | None = None
    """More assertions on the result, given the case folder."""
    in_tmp: Callable[[Path], None] | None = None
    """Makes files in the run's $TMPDIR before it starts (what an earlier, killed run left),
    which the run must clean up: $TMPDIR must still be empty afterwards."""
    replaced: Sequence[str] = ()
    """Files the case made that the run may rewrite (an earlier run's results that
    ``--resume`` continues); every other file must stay as it was."""


@dataclass(frozen=True)
class Case:
    """One hostile input and what the user expects of popaudit on it."""

    id: str
    build: Callable[[Path], Built]
    exit_code: int
    error: str | None
    """Regex the ``Error:`` message must match (from the first line that starts with
    ``Error:`` to the end of stderr, re.S); None: the run must print no such line."""
    stderr: str | None = None
    """Regex the whole stderr must match (e.g. a batch row's failure line)."""
    stdout: str | None = None
    """Regex stdout must match."""
    absent: str | None = None
    """Regex that must match nowhere in stdout or stderr (leaked content, a wrong claim)."""
    process: bool = False
    """Run ``python -m auditor`` in a subprocess (hangs, sys.exit, /dev/stdout)."""
    timeout: float = 60.0
    product_failure: str | None = None
    """Why the product fails this case today: the case runs as a strict xfail."""
    peak_memory: int | None = None
    """Bytes the run may peak at (its largest resident set, children included); measured
    in a subprocess, so it implies ``process``."""
    slow: bool = False
    skip: Callable[[], str | None] | None = None
    """Returns a reason to skip on this machine, or None."""
    stdout_limit: int | None = None
    """Stdout is a file on a disk that fills up after this many bytes (RLIMIT_FSIZE: a
    write past it fails with EFBIG, "File too large", as a full disk fails with ENOSPC);
    implies ``process``. The outcome's stdout is what reached the file."""
    stdout_gone: str | None = None
    """``"reader"``: stdout is a pipe whose reader closed it before the run (``| true``);
    ``"closed"``: descriptor 1 is not open (``>&-``). Implies ``process``."""


@dataclass
class Outcome:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def params(cases: Sequence[Case], failures: Sequence[Case] = ()) -> list[Any]:
    """pytest params for ``cases`` and the product's known failures (strict xfails)."""
    ids = [c.id for c in (*cases, *failures)]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    assert not duplicates, duplicates
    out = []
    for case in (*cases, *failures):
        marks: list[Any] = [pytest.mark.timeout(case.timeout + 60)]
        if case in failures:
            assert case.product_failure, case.id
            marks.append(pytest.mark.xfail(strict=True, reason=case.product_failure))
        if case.slow:
            marks.append(pytest.mark.slow)
        out.append(pytest.param(case, id=case.id, marks=marks))
    return out


# ---------------------------------------------------------------------------- running


def run_case(case: Case, root: Path, monkeypatch: pytest.MonkeyPatch) -> Outcome:
    """Build ``case`` under ``root``, run it and check (a), (b) and (c)."""
    if case.skip is not None and (reason := case.skip()):
        pytest.skip(reason)
    work = root / "case"
    work.mkdir()
    built = case.build(work)
    outside_before = {p: p.exists() or p.is_symlink() for p in built.outside}
    before = snapshot(work)
    # The run's $TMPDIR, empty before and after. Short: batch workers put a Unix socket
    # in it, whose path may not exceed 107 bytes.
    tmpdir = Path(tempfile.mkdtemp(prefix="hostile-", dir=_REAL_TMP))
    if built.in_tmp is not None:
        built.in_tmp(tmpdir)
    try:
        if case.process or case.peak_memory is not None or case.stdout_limit is not None or case.stdout_gone:
            outcome = _run_process(built.args, work, tmpdir, case.timeout, case.peak_memory, case.stdout_limit,
                                   case.stdout_gone)
        else:
            outcome = _run_inline(built.args, work, tmpdir, monkeypatch)
        _check(case, built, work, tmpdir, before, outcome)
    finally:
        for path, existed in outside_before.items():  # never leave a product's mess outside
            if not existed and (path.exists() or path.is_symlink()):
                _remove(path)
        _remove(tmpdir)
    return outcome


def _run_inline(args: Sequence[str], work: Path, tmpdir: Path, monkeypatch: pytest.MonkeyPatch) -> Outcome:
    monkeypatch.chdir(work)
    # multiprocessing keeps one temp folder per process (the batch forkserver's socket is
    # in it): create it in the real temp folder, then point tempfile (not $TMPDIR, which
    # the forkserver would inherit) at this run's folder.
    multiprocessing.util.get_temp_dir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmpdir))
    result = CliRunner().invoke(cli, list(args))
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        # An exception escaped the CLI: show it as the user would see it (a traceback).
        stderr += "".join(traceback.format_exception(*result.exc_info))  # type: ignore[misc]
    return Outcome(result.exit_code, result.stdout, stderr)


_PEAK_WRAPPER = """
import atexit, resource, runpy, sys
def _peak():
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    with open(peak_file, "w") as fh:
        fh.write(str(max(own, kids) * 1024))  # ru_maxrss is in KiB on Linux
atexit.register(_peak)
peak_file = sys.argv[1]
sys.argv = ["popaudit", *sys.argv[2:]]
runpy.run_module("auditor", run_name="__main__", alter_sys=True)
"""


def _run_process(args: Sequence[str], work: Path, tmpdir: Path, timeout: float,
                 peak_memory: int | None = None, stdout_limit: int | None = None,
                 stdout_gone: str | None = None) -> Outcome:
    env = {**os.environ, "TMPDIR": str(tmpdir)}
    command = [sys.executable, "-m", "auditor", *args]
    peak_file = Path(tempfile.mkdtemp(prefix="peak-", dir=_REAL_TMP)) / "rss"
    if peak_memory is not None:
        command = [sys.executable, "-c", _PEAK_WRAPPER, str(peak_file), *args]
    stdout_file = peak_file.parent / "stdout"
    read_end, write_end = os.pipe()
    os.close(read_end)  # stdout_gone "reader": the pipe's reader is gone before the run
    preexec = None if stdout_limit is None else partial(_limit_files, stdout_limit)
    try:
        with open(stdout_file, "wb") as sink:
            target: Any = subprocess.PIPE if stdout_limit is None else sink
            if stdout_gone is not None:
                target = write_end if stdout_gone == "reader" else subprocess.DEVNULL
                preexec = None if stdout_gone == "reader" else partial(os.close, 1)
            done = subprocess.run(
                command, cwd=work, env=env, timeout=timeout, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE,
                stdout=target, preexec_fn=preexec,
            )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"popaudit {shlex.join(args)} hung: still running after {timeout:.0f} s "
                    f"(output so far: {exc.stderr!r})")
    finally:
        os.close(write_end)
        peak = int(peak_file.read_text()) if peak_file.exists() else None
        printed = stdout_file.read_bytes() if stdout_limit is not None else None
        _remove(peak_file.parent)
    stdout = (done.stdout or b"") if printed is None else printed
    outcome = Outcome(done.returncode, stdout.decode(errors="replace"), done.stderr.decode(errors="replace"))
    if peak_memory is not None:
        assert peak is not None, f"the run left no peak-memory record{outcome.stderr[-2000:]}"
        assert peak <= peak_memory, (
            f"popaudit {shlex.join(args)} peaked at {peak:,} bytes of memory, more than {peak_memory:,}"
        )
    return outcome


def _limit_files(size: int) -> None:
    """In the child: no file may grow past ``size`` bytes (Python ignores SIGXFSZ, so the
    write fails with EFBIG instead of killing the process)."""
    import resource

    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))


def _check(case: Case, built: Built, work: Path, tmpdir: Path, before: dict[str, tuple[Any, ...]], outcome: Outcome) -> None:
    shown = f"\n$ popaudit {shlex.join(built.args)}\n--- exit {outcome.exit_code}\n--- stdout\n{outcome.stdout[-3000:]}\n--- stderr\n{outcome.stderr[-3000:]}"
    # (a) the documented exit code
    assert outcome.exit_code == case.exit_code, f"exit {outcome.exit_code}, expected {case.exit_code}{shown}"
    # (b) a clear Error: line, never a traceback
    assert "Traceback" not in outcome.output, f"a Python traceback{shown}"
    error_line = re.search(r"^Error: ", outcome.stderr, re.M)
    if case.error is None:
        assert not error_line, f"unexpected Error: line{shown}"
    else:
        assert error_line, f"no Error: line on stderr{shown}"
        message = outcome.stderr[error_line.start():]
        assert re.search(case.error, message, re.S), f"Error: message does not match {case.error!r}{shown}"
    if case.stderr is not None:
        assert re.search(case.stderr, outcome.stderr, re.S), f"stderr does not match {case.stderr!r}{shown}"
    if case.stdout is not None:
        assert re.search(case.stdout, outcome.stdout, re.S), f"stdout does not match {case.stdout!r}{shown}"
    if case.absent is not None:
        found = re.search(case.absent, outcome.output)
        assert not found, f"output holds {found.group(0)!r} (must not match {case.absent!r}){shown}"
    # (c) no code from an input ran, no input changed, nothing stray left behind
    ran = [str(m) for m in built.markers if m.exists()]
    assert not ran, f"code from an input ran: marker {ran} was created{shown}"
    made_outside = [str(p) for p in built.outside if p.exists() or p.is_symlink()]
    assert not made_outside, f"the run created {made_outside} outside its folder{shown}"
    after = snapshot(work)
    changed = [name for name, entry in before.items() if after.get(name) != entry and name not in built.replaced]
    assert not changed, f"input changed or removed: {changed}{shown}"
    new = sorted(set(after) - set(before))
    stray = [name for name in new if not any(fnmatch.fnmatch(name, pattern) for pattern in built.outputs)]
    assert not stray, f"stray files left behind: {stray}{shown}"
    missing = [name for name in built.must_exist if name not in after]
    assert not missing, f"expected output missing: {missing}{shown}"
    left = sorted(str(p.relative_to(tmpdir)) for p in tmpdir.rglob("*"))
    assert not left, f"temporary files left in $TMPDIR: {left}{shown}"
    if built.check is not None:
        built.check(work, outcome)


def snapshot(folder: Path) -> dict[str, tuple[Any, ...]]:
    """Every entry under ``folder`` (symlinks not followed): kind, and for a regular file
    its sha256, size and mtime; for a link its target; for a FIFO its mode and mtime."""
    entries: dict[str, tuple[Any, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(folder))
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                entries[rel] = ("link", os.readlink(path))
            elif stat.S_ISREG(st.st_mode):
                entries[rel] = ("file", sha256(path), st.st_size, st.st_mtime_ns, stat.S_IMODE(st.st_mode))
            elif stat.S_ISDIR(st.st_mode):
                entries[rel] = ("dir", stat.S_IMODE(st.st_mode))
            else:
                entries[rel] = ("special", st.st_mode, st.st_mtime_ns)
    return entries


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        for child in path.iterdir():
            _remove(child)
        path.rmdir()
    else:
        path.unlink()


# ---------------------------------------------------------------------------- inputs


N_ITEMS, DIM = 10, 4


def table(folder: Path, name: str = "items.npy", rows: int = N_ITEMS, dim: int = DIM, seed: int = 0) -> str:
    """A valid float32 item table (.npy)."""
    np.save(folder / name, np.random.default_rng(seed).normal(size=(rows, dim)).astype(np.float32))
    return name


def log(folder: Path, name: str = "log.parquet", rows: int = N_ITEMS, ids: Sequence[Any] | None = None) -> str:
    """A valid log: item i (row i, or ``ids[i]``) seen i + 1 times by users 0..4."""
    items = np.repeat(np.arange(rows), np.arange(1, rows + 1))
    users = np.arange(items.size) % 5
    values = items if ids is None else [ids[int(i)] for i in items]
    if name.endswith(".parquet"):
        huge = ids is not None and all(isinstance(i, int) for i in ids) and max(ids) >= 2**63
        column = pa.array(values, pa.uint64()) if huge else pa.array(values)
        pq.write_table(pa.table({"user_id": users, "item_id": column}), folder / name)
    else:
        rows_text = "".join(f"{u},{i}\n" for u, i in zip(users, values))
        (folder / name).write_text("user_id,item_id\n" + rows_text, encoding="utf-8")
    return name


def write(folder: Path, name: str, content: bytes | str) -> str:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, str):
        path.write_text(content, encoding="utf-8")
    else:
        path.write_bytes(content)
    return name


def fifo(folder: Path, name: str) -> str:
    os.mkfifo(folder / name)
    return name


def symlink(folder: Path, name: str, target: str) -> str:
    os.symlink(target, folder / name)
    return name


def parquet(folder: Path, name: str, columns: dict[str, Any]) -> str:
    pq.write_table(pa.table(columns), folder / name)
    return name


def check_args(model: str, *extra: str, interactions: str | None = "log.parquet") -> list[str]:
    """``check MODEL --interactions LOG`` with the fast options, then ``extra``."""
    args = ["check", model]
    if interactions is not None:
        args += ["--interactions", interactions]
    return [*args, *FAST, *extra]


def standard(folder: Path) -> None:
    """The valid table and log most cases start from."""
    table(folder)
    log(folder)


def strict_json(path: Path) -> Any:
    """Parse JSON that must be standard (no NaN/Infinity, which JSON parsers reject)."""

    def refuse(constant: str) -> Any:
        raise AssertionError(f"{path.name} holds {constant}, which is not JSON")

    return json.loads(path.read_text(), parse_constant=refuse)


def unwritable_folder(work: Path) -> Path | None:
    """A folder this process cannot create files in: a 0555 folder, or (as root, who
    ignores permissions) a folder on a read-only file system; None when there is none."""
    ro = work / "readonly"
    ro.mkdir()
    os.chmod(ro, 0o555)
    if not _writable(ro):
        return ro
    for candidate in (Path("/sys"), Path("/proc/sys")):
        if candidate.is_dir() and not _writable(candidate):
            return candidate
    return None


def _writable(folder: Path) -> bool:
    try:
        fd, name = tempfile.mkstemp(dir=folder)
    except OSError:
        return False
    os.close(fd)
    os.unlink(name)
    return True


def is_char_device(path: str) -> bool:
    try:
        return stat.S_ISCHR(os.stat(path).st_mode)
    except OSError:
        return False


def no_dev_full() -> str | None:
    return None if is_char_device("/dev/full") else "/dev/full is not the full device on this machine"

