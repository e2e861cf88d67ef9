"""Atomic output writing."""

import os

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

    from auditor.io import check_not_inputs

    files = planned_outputs({"--json": ("json", tmp_path / "r_files" / "head_share.png"),
                             "--markdown": ("markdown", tmp_path / "r.md"), "--html": ("html", None)})
    with pytest.raises(InputError, match=r"--json and figure head_share\.png of --markdown .*r\.md both name"):
        check_not_inputs(files, {})
    assert planned_outputs({"--markdown": ("markdown", "/dev/null")}) == {"--markdown": "/dev/null"}


def test_a_symlinked_output_is_replaced_not_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    link = tmp_path / "report.json"
    os.symlink(victim, link)
    write_atomic(link, "{}\n")
    assert victim.read_text() == "keep me\n"  # what the link pointed at is untouched
    assert not link.is_symlink() and link.read_text() == "{}\n"


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
