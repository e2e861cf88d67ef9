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
