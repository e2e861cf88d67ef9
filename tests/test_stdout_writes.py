"""Output on stdout is written whole or the command fails (QA11 report F2).

A report printed with no ``-o`` is the output asked for: a disk that fills up under
``check --format json > audit.json`` must end the run with exit 1 and ``Error: cannot
write stdout: REASON``, never a cut report behind exit 0. Python's buffered ``sys.stdout``
drops the rest of a write the disk took only part of, so every command writes stdout
through ``auditor.cli._stdout.write_stdout`` (the hostile corpus runs the commands on a
full stdout: tests/hostile/test_outputs.py, ``stdout-full-*``).
"""

from __future__ import annotations

import ast
import errno
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import auditor.cli._stdout as stdout_module
from auditor.cli import cli
from auditor.cli._stdout import write_stdout
from auditor.errors import OutputError

CLI = Path(stdout_module.__file__).parent


class _Descriptor:
    """A stand-in for ``sys.stdout`` that has descriptor ``fd``."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.flushed = 0

    def fileno(self) -> int:
        return self.fd

    def flush(self) -> None:
        self.flushed += 1


def _short_writes(monkeypatch: pytest.MonkeyPatch, taken: list[bytes], block: int, room: int | None) -> None:
    """os.write takes at most ``block`` bytes a call; past ``room`` bytes it fails with ENOSPC."""

    def write(fd: int, data: Any) -> int:
        done = sum(map(len, taken))
        if room is not None and done >= room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        chunk = bytes(data[: min(block, len(data), (room - done) if room is not None else block)])
        taken.append(chunk)
        return len(chunk)

    monkeypatch.setattr(stdout_module.os, "write", write)


def test_short_writes_are_continued_to_the_last_byte(monkeypatch: pytest.MonkeyPatch) -> None:
    taken: list[bytes] = []
    stream = _Descriptor(41)
    monkeypatch.setattr(sys, "stdout", stream)
    _short_writes(monkeypatch, taken, block=3, room=None)
    write_stdout("ρ = 0.99\n")  # 10 bytes of UTF-8: four writes of 3, 3, 3, 1
    assert b"".join(taken) == "ρ = 0.99\n".encode()
    assert [len(chunk) for chunk in taken] == [3, 3, 3, 1]
    assert stream.flushed == 1  # what was printed before goes first


def test_a_disk_that_fills_mid_report_is_an_error_naming_stdout(monkeypatch: pytest.MonkeyPatch) -> None:
    taken: list[bytes] = []
    monkeypatch.setattr(sys, "stdout", _Descriptor(41))
    _short_writes(monkeypatch, taken, block=4, room=6)
    with pytest.raises(OutputError, match=r"^cannot write stdout: No space left on device$"):
        write_stdout(b'{"spearman": 0.5}')
    assert b"".join(taken) == b'{"spea'  # 4 bytes, then the 2 the disk had room for, then ENOSPC


def test_a_captured_stream_gets_the_text(capsys: pytest.CaptureFixture[str]) -> None:
    write_stdout("report\n")
    write_stdout(b"bytes\n")
    assert capsys.readouterr().out == "report\nbytes\n"


def test_a_closed_pipe_is_said_and_the_run_goes_on(tmp_path: Path) -> None:
    """`popaudit plugins --json | true`: the reader is gone before the write. It chose to
    read no more (QA11 verification N2): one stderr line naming the bytes, exit 0 (it was
    "Error: cannot write stdout: Broken pipe", exit 1, and only when the report outgrew
    the pipe's buffer)."""
    whole = subprocess.run([sys.executable, "-m", "auditor", "plugins", "--json"], capture_output=True,
                           stdin=subprocess.DEVNULL, cwd=tmp_path, timeout=120, check=True).stdout
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run([sys.executable, "-m", "auditor", "plugins", "--json"], stdout=write_end,
                              stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, cwd=tmp_path, timeout=120)
    finally:
        os.close(write_end)
    assert done.returncode == 0
    assert done.stderr.decode() == (f"stdout closed by its reader after 0 of {len(whole)} bytes: "
                                    "the report was not read whole\n")


def test_a_reader_gone_mid_report_stops_stdout_not_the_run(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """The pipe takes 4 bytes, then its reader closes it: no error, the count said, and
    stdout written no more (descriptor 1 is pointed at the null device)."""
    taken: list[bytes] = []
    moved: list[tuple[int, int]] = []
    monkeypatch.setattr(stdout_module, "_READER_GONE", [])
    monkeypatch.setattr(sys, "stdout", _Descriptor(41))

    def write(fd: int, data: Any) -> int:
        if taken:
            raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))
        taken.append(bytes(data[:4]))
        return 4

    monkeypatch.setattr(stdout_module.os, "write", write)
    monkeypatch.setattr(stdout_module.os, "dup2", lambda fd, to: moved.append((fd, to)))
    write_stdout(b'{"spearman": 0.5}')  # 17 bytes
    write_stdout("more\n")  # not attempted
    assert taken == [b'{"sp']
    assert capsys.readouterr().err == "stdout closed by its reader after 4 of 17 bytes: the report was not read whole\n"
    assert [to for _fd, to in moved] == [1]


def test_no_stdout_at_all_is_an_error_naming_stdout(monkeypatch: pytest.MonkeyPatch) -> None:
    """`>&-`: Python starts with sys.stdout None (it was an AttributeError traceback, N3)."""
    monkeypatch.setattr(stdout_module, "_READER_GONE", [])
    monkeypatch.setattr(sys, "stdout", None)
    assert stdout_module.stdout_is_terminal() is False
    with pytest.raises(OutputError, match=r"^cannot write stdout: Bad file descriptor$"):
        write_stdout("report\n")


def _stdout_calls(tree: ast.AST) -> list[str]:
    """Calls in ``tree`` that write stdout other than through write_stdout: click.echo or
    click.secho without ``err=True``, print, sys.stdout.write and sys.stdout.buffer.write."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = ast.unparse(node.func)
        to_stderr = any(k.arg == "err" and isinstance(k.value, ast.Constant) and k.value.value for k in node.keywords)
        if (name in ("click.echo", "click.secho") and not to_stderr) or name == "print" \
                or name in ("sys.stdout.write", "sys.stdout.buffer.write"):
            found.append(f"line {node.lineno}: {ast.unparse(node)[:80]}")
    return found


def test_every_command_writes_stdout_through_the_one_helper() -> None:
    bypass = {path.name: calls for path in sorted(CLI.glob("*.py"))
              if (calls := _stdout_calls(ast.parse(path.read_text(encoding="utf-8"))))}
    assert not bypass, f"stdout written around auditor.cli._stdout.write_stdout: {bypass}"


def test_a_full_device_named_by_an_option_is_an_error_never_wrote(tmp_path: Path) -> None:
    """``--json /dev/full`` (the QA's machine had no /dev/full: the name made a regular file
    there, which is written as any new file): the full device itself, made here where this
    process may, is one Error: line and exit 1, never "Wrote"."""
    device = tmp_path / "full"
    try:
        os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
        with open(device, "wb") as probe:
            probe.write(b"x")
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            pytest.skip(f"no full device here ({exc.strerror})")
    else:
        pytest.skip("the device made here is not the full device")
    np.save(tmp_path / "items.npy", np.random.default_rng(0).normal(size=(10, 4)).astype(np.float32))
    items = np.repeat(np.arange(10), np.arange(1, 11))
    pq.write_table(pa.table({"user_id": np.arange(items.size) % 5, "item_id": items}), tmp_path / "log.parquet")
    result = CliRunner().invoke(cli, ["check", str(tmp_path / "items.npy"), "--interactions", str(tmp_path / "log.parquet"),
                                      "--bootstrap", "0", "--no-probes", "--json", str(device)])
    assert result.exit_code == 1, result.output
    assert f"Error: cannot write {device}: No space left on device" in result.stderr
    assert "Wrote" not in result.stderr
