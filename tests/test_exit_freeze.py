"""The console-script entry point freezes every live object once its command is done, so
that the interpreter's shutdown collections skip them (auditor/cli/_startup.py), and the
command's exit code is kept: 0 for help, 1 for an error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = (
    "import gc, sys\n"
    "from auditor.cli import main\n"
    "sys.argv = ['popaudit', *sys.argv[1:]]\n"
    "before = gc.get_freeze_count()\n"
    "try:\n"
    "    main()\n"
    "except SystemExit as e:\n"
    "    print('EXIT', e.code, 'FROZE', before == 0 and gc.get_freeze_count() > 1000)\n"
)


@pytest.mark.parametrize(("args", "code"), [(["--help"], 0), (["check", "missing.pt"], 1), (["check", "--bad"], 2)])
def test_main_freezes_what_is_alive_and_keeps_the_exit_code(tmp_path: Path, args: list[str], code: int) -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT, *args], capture_output=True, text=True, cwd=tmp_path,
                         timeout=120)
    assert f"EXIT {code} FROZE True" in out.stdout, out.stdout + out.stderr[-2000:]
