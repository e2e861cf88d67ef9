"""Plugin prints go to stderr while plugin code runs, and stdout is whole again after
(plugins QA F7: a batch's results or `plugins --json` on stdout stayed clean only in check)."""

from __future__ import annotations

import os
import sys

import pytest

from auditor.plugins.prints import prints_to_stderr


def test_prints_and_native_writes_go_to_stderr_then_stdout_is_restored(capfd: pytest.CaptureFixture[str]) -> None:
    print("before")
    with prints_to_stderr():
        print("from python")
        os.write(1, b"from fd 1\n")
        with prints_to_stderr():  # nested: restores what it found
            print("nested")
        print("still inside")
    print("after")
    sys.stdout.flush()
    out, err = capfd.readouterr()
    assert out == "before\nafter\n"
    assert err == "from python\nfrom fd 1\nnested\nstill inside\n"


def test_restored_when_plugin_code_raises(capfd: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(RuntimeError), prints_to_stderr():
        print("noise")
        raise RuntimeError("boom")
    print("report")
    sys.stdout.flush()
    out, err = capfd.readouterr()
    assert out == "report\n" and err == "noise\n"
