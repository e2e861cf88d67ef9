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
