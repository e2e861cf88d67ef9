"""The same seed gives a byte-identical checkpoint (retrain QA F5): the archive's inner
folder no longer takes the atomic write's random temp name, and the checkpoint stores no
wall-clock time."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

from click.testing import CliRunner

from auditor.cli import cli

ARGS = ["--n-users", "40", "--n-items", "50", "--n-interactions", "600", "--epochs", "2", "--threads", "1", "-q",
        "--holdout-fraction", "0.2"]


def _retrain(out: Path, seed: str) -> str:
    out.parent.mkdir(parents=True, exist_ok=True)
    got = CliRunner().invoke(cli, ["retrain", *ARGS, "--seed", seed, "-o", str(out)])
    assert got.exit_code == 0, got.output
    return hashlib.sha256(out.read_bytes()).hexdigest()


def test_same_seed_same_bytes(tmp_path: Path) -> None:
    first = _retrain(tmp_path / "x" / "m.pt", "3")
    assert _retrain(tmp_path / "y" / "m.pt", "3") == first
    assert _retrain(tmp_path / "z" / "other-name.pt", "3") == first  # the file name is not in the archive either
    assert _retrain(tmp_path / "w" / "m.pt", "4") != first
    names = zipfile.ZipFile(tmp_path / "x" / "m.pt").namelist()
    assert {name.split("/")[0] for name in names} == {"archive"}
