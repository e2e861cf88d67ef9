"""Atomic output writing."""

import os
import re
from pathlib import Path

import pytest

from auditor.io import atomic_path, write_atomic


def test_write_atomic_replaces_and_leaves_no_temp(tmp_path):
    target = tmp_path / "sub" / "report.json"
    write_atomic(target, "one")
    write_atomic(target, b"two")
    assert target.read_bytes() == b"two"
    assert [p.name for p in target.parent.iterdir()] == ["report.json"]


def test_failure_keeps_the_old_file(tmp_path):
    target = tmp_path / "report.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("crash mid-write")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["report.txt"]


def test_a_failed_write_removes_the_folders_it_made_and_only_those(tmp_path):
    (tmp_path / "kept").mkdir()
    with pytest.raises(RuntimeError), atomic_path(tmp_path / "kept" / "new" / "deeper" / "out.json") as tmp:
        tmp.write_text("half")
        raise RuntimeError("the writer failed")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["kept"]
    # A folder another process wrote into meanwhile stays, with what it holds.
    with pytest.raises(RuntimeError), atomic_path(tmp_path / "a" / "b" / "out.json"):
        (tmp_path / "a" / "theirs.txt").write_text("x")
        raise RuntimeError("the writer failed")
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == ["a", "a/theirs.txt", "kept"]
    with atomic_path(tmp_path / "kept" / "new" / "out.json") as tmp:
        tmp.write_text("whole")
    assert (tmp_path / "kept" / "new" / "out.json").read_text() == "whole"


def test_mode_follows_umask_not_mkstemp(tmp_path):
    old = os.umask(0o022)
    try:
        write_atomic(tmp_path / "r.html", "x")
    finally:
        os.umask(old)
    assert (tmp_path / "r.html").stat().st_mode & 0o777 == 0o644


def test_special_files_are_told_apart_from_regular_files_and_folders(tmp_path):
    from auditor.io import is_special_file

    (tmp_path / "f").write_text("x")
    assert not is_special_file(tmp_path / "f") and not is_special_file(tmp_path)
    assert not is_special_file(tmp_path / "missing")
    if os.path.exists("/dev/null"):
        assert is_special_file("/dev/null")


def test_outputs_colliding_with_an_attachment_are_refused_before_writing(tmp_path):
    from auditor.errors import InputError
    from auditor.plugins.renderers import planned_outputs

    from auditor.output_guard import check_not_inputs

    files = planned_outputs({"--json": ("json", tmp_path / "r_files" / "head_share.png"),
                             "--markdown": ("markdown", tmp_path / "r.md"), "--html": ("html", None)})
    with pytest.raises(InputError, match=r"--json and figure head_share\.png of --markdown .*r\.md both name"):
        check_not_inputs(files, {})
    assert planned_outputs({"--markdown": ("markdown", "/dev/null")}) == {"--markdown": "/dev/null"}


def test_two_outputs_on_one_descriptor_are_refused_dev_null_takes_any(tmp_path):
    """QA F1: ``--json /dev/stdout --markdown /dev/stdout`` dropped the JSON report (keyed by
    path); one descriptor under two spellings is the same stream. /dev/null keeps nothing."""
    from auditor.errors import InputError
    from auditor.output_guard import check_not_inputs

    with pytest.raises(InputError, match=r"^--json /dev/stdout and --markdown /dev/stdout both name descriptor 1;"):
        check_not_inputs({"--json": Path("/dev/stdout"), "--markdown": Path("/dev/stdout")}, {})
    with pytest.raises(InputError, match=r"^-o /dev/stdout and --html /proc/self/fd/1 both name descriptor 1;"):
        check_not_inputs({"-o": Path("/dev/stdout"), "--html": Path("/proc/self/fd/1")}, {})
    with open(tmp_path / "a", "wb") as a, open(tmp_path / "b", "wb") as b:  # two streams
        check_not_inputs({"--json": Path(f"/dev/fd/{a.fileno()}"), "--html": Path(f"/dev/fd/{b.fileno()}")}, {})
    check_not_inputs({"--json": Path("/dev/null"), "--markdown": Path("/dev/null")}, {})
    os.mkfifo(tmp_path / "pipe")
    os.symlink(tmp_path / "pipe", tmp_path / "alias")
    with pytest.raises(InputError, match=r"^--json .*pipe and --html .*alias are one file; two reports on one stream"):
        check_not_inputs({"--json": tmp_path / "pipe", "--html": tmp_path / "alias"}, {})


def test_two_descriptors_holding_one_open_file_are_one_stream(tmp_path):
    """QA re-verification, new problem 2: ``--json /dev/stdout --markdown /dev/stderr > f 2>&1``
    ran the two reports together in f; descriptors that hold one open file (samestat) are one
    stream, as is a regular output that is the file a descriptor output holds (``>> r.md``).
    The null device, held by any number of descriptors, keeps nothing: allowed."""
    from auditor.errors import InputError
    from auditor.output_guard import check_not_inputs

    with open(tmp_path / "f", "wb") as f:
        dup = os.dup(f.fileno())  # what 2>&1 makes of two descriptors
        try:
            with pytest.raises(InputError, match=rf"^--json /dev/fd/{f.fileno()} and --markdown /dev/fd/{dup} are one "
                                                 rf"open file \(descriptors {f.fileno()} and {dup}\); two reports on one "
                                                 "stream cannot be told apart: give each output its own file$"):
                check_not_inputs({"--json": Path(f"/dev/fd/{f.fileno()}"), "--markdown": Path(f"/dev/fd/{dup}")}, {})
            for outputs in ({"--json": Path(f"/dev/fd/{dup}"), "--markdown": tmp_path / "f"},
                            {"-o": tmp_path / "f", "--json": Path(f"/proc/self/fd/{dup}")}):  # either order
                with pytest.raises(InputError, match=r" are one file; two reports on one stream"):
                    check_not_inputs(outputs, {})
        finally:
            os.close(dup)
    os.link(tmp_path / "f", tmp_path / "g")  # two regular files' names: each replaced by its own rename
    check_not_inputs({"--json": tmp_path / "f", "--html": tmp_path / "g"}, {})
    with open(os.devnull, "wb") as a, open(os.devnull, "wb") as b:
        check_not_inputs({"--json": Path(f"/dev/fd/{a.fileno()}"), "--html": Path(f"/dev/fd/{b.fileno()}")}, {})


def test_an_output_on_stderr_beside_progress_needs_q(tmp_path):
    """New problem 2: without -q progress and messages go to stderr; a report there (by its
    name, or by a descriptor holding the file stderr goes to) is refused as on stdout."""
    import click

    from auditor.cli._common import refuse_stdout_twice

    with pytest.raises(click.UsageError, match=r"^--markdown /dev/stderr is standard error, where progress and "
                                               r"messages are printed too; pass -q \(or write it to a file\)$"):
        refuse_stdout_twice({"--markdown": Path("/dev/stderr")}, None, messages=True)
    refuse_stdout_twice({"--markdown": Path("/dev/stderr")}, None, messages=False)  # -q: nothing else there
    dup = os.dup(2)
    try:
        with pytest.raises(click.UsageError, match=rf"^--json /dev/fd/{dup} is the file standard error goes to, "):
            refuse_stdout_twice({"--json": Path(f"/dev/fd/{dup}")}, None, messages=True)
    finally:
        os.close(dup)
    with open(tmp_path / "r", "wb") as other:  # another file: never mixed
        refuse_stdout_twice({"--json": Path(f"/dev/fd/{other.fileno()}")}, "console report", messages=True)


@pytest.mark.parametrize("target", ["victim.txt", "nowhere/new.txt", "."])
def test_a_symlinked_output_is_neither_followed_nor_replaced(tmp_path, target):
    from auditor.errors import OutputError

    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    link = tmp_path / "report.json"
    os.symlink(target, link)
    with pytest.raises(OutputError, match=rf"cannot write .*report\.json: it is a symbolic link \(to {re.escape(target)}\), "
                                          "and popaudit neither writes through a link nor replaces it"):
        write_atomic(link, "{}\n")
    assert victim.read_text() == "keep me\n"  # what the link pointed at is untouched
    assert os.readlink(link) == target  # and the link is still the link its owner made
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json", "victim.txt"]


def _redirected(tmp_path, name, content=b""):
    """A descriptor open on a regular file (as `> file` makes stdout), and the file."""
    path = tmp_path / name
    path.write_bytes(content)
    return os.open(path, os.O_WRONLY | (os.O_APPEND if content else 0)), path


def test_a_descriptor_redirected_to_a_file_gets_the_content_and_its_link_stays(tmp_path):
    """F12: `--json /dev/stdout > out.json` renamed a temp file onto the /dev/stdout link
    (os.stat of it is a regular file); the link is recognised by name, and the content
    goes onto the descriptor, after what an append redirect already holds."""
    from auditor.io import descriptor_named, is_special_file, output_plan

    fd, out = _redirected(tmp_path, "out.json")
    appended_fd, log = _redirected(tmp_path, "log.txt", b"earlier line\n")
    fakedev = tmp_path / "fakedev"
    fakedev.mkdir()
    os.symlink(f"/proc/self/fd/{fd}", fakedev / "stdout")  # what /dev/stdout is
    try:
        assert descriptor_named(fakedev / "stdout") == fd and descriptor_named(f"/dev/fd/{fd}") == fd
        assert descriptor_named(f"/proc/{os.getpid()}/fd/{fd}") == fd and descriptor_named(out) is None
        assert is_special_file(fakedev / "stdout") and output_plan(fakedev / "stdout").how == "descriptor"
        write_atomic(fakedev / "stdout", "{}\n")
        write_atomic(f"/dev/fd/{appended_fd}", "report\n")
        with pytest.raises(RuntimeError):  # a failed writer puts nothing on the descriptor
            with atomic_path(Path(f"/proc/self/fd/{fd}")) as tmp:
                tmp.write_text("half")
                raise RuntimeError("crash mid-write")
    finally:
        os.close(fd)
        os.close(appended_fd)
    assert os.readlink(fakedev / "stdout") == f"/proc/self/fd/{fd}"
    assert out.read_bytes() == b"{}\n" and log.read_bytes() == b"earlier line\nreport\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fakedev", "log.txt", "out.json"]


def test_dev_stdout_is_known_by_its_name_even_when_it_is_a_regular_file(tmp_path, monkeypatch):
    """Where a bug already replaced /dev/stdout with a regular file, popaudit still writes
    stdout (by the name), never renames onto the name again (a stand-in path here)."""
    from auditor import io

    fd, out = _redirected(tmp_path, "out.txt")
    broken = tmp_path / "stdout"  # what /dev/stdout is once renamed onto
    broken.write_text("left by an earlier run\n")
    monkeypatch.setitem(io._STREAM_NAMES, str(broken), fd)
    try:
        write_atomic(broken, "report\n")
    finally:
        os.close(fd)
    assert out.read_text() == "report\n" and broken.read_text() == "left by an earlier run\n"


def test_a_descriptor_that_is_not_open_is_refused(tmp_path):
    from auditor.errors import OutputError

    fd = os.open(tmp_path, os.O_RDONLY)
    os.close(fd)  # a number no descriptor of this process has now
    with pytest.raises(OutputError, match=rf"cannot write /dev/fd/{fd}: it names descriptor {fd}, which is not open"):
        write_atomic(Path(f"/dev/fd/{fd}"), "x")


def test_a_fifo_output_needs_a_reader_and_its_reader_sees_the_whole_report(tmp_path):
    import threading

    from auditor.errors import OutputError

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(OutputError, match=r"cannot write .*pipe: it is a FIFO \(named pipe\) that no process is reading"):
        write_atomic(fifo, "lost")
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()))
    reader.start()
    while not got and reader.is_alive():  # the reader has the FIFO open once a writer can open it
        try:
            write_atomic(fifo, "x" * 100_000)  # more than a pipe buffer: written through the held descriptor
            break
        except OutputError:  # the reader thread has not opened it yet
            continue
    reader.join(10)
    assert got == [b"x" * 100_000]


def test_a_replaced_file_keeps_its_mode_and_follow_link_rewrites_the_links_target(tmp_path):
    """QA round 7 (monitor N1): a rewritten file keeps its mode, as open() would; a caller that
    continues a file by its path (follow_link) rewrites the link's target and keeps the link."""
    old = os.umask(0o022)
    try:
        (tmp_path / "r.json").write_text("old")
        os.chmod(tmp_path / "r.json", 0o600)
        write_atomic(tmp_path / "r.json", "new")
        assert (tmp_path / "r.json").stat().st_mode & 0o777 == 0o600
        (tmp_path / "data").mkdir()
        (tmp_path / "data" / "t.jsonl").write_text("old")
        os.chmod(tmp_path / "data" / "t.jsonl", 0o640)
        (tmp_path / "t.jsonl").symlink_to(Path("data") / "t.jsonl")
        write_atomic(tmp_path / "t.jsonl", "new", follow_link=True, durable=True)
    finally:
        os.umask(old)
    assert (tmp_path / "t.jsonl").is_symlink() and (tmp_path / "data" / "t.jsonl").read_text() == "new"
    assert (tmp_path / "data" / "t.jsonl").stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["t.jsonl"]
    from auditor.errors import OutputError

    with pytest.raises(OutputError, match="symbolic link"):  # a report still never writes through a link
        write_atomic(tmp_path / "t.jsonl", "x")
