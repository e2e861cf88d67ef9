"""A log where every item is trained equally often has no frequency-norm ρ (Spearman of a
constant is undefined): ``retrain`` said "ρ +nan" in its epoch lines and its summary; it
now says the ρ is undefined and why (wording.training_rho)."""

from __future__ import annotations

import math
from pathlib import Path

from click.testing import CliRunner

from auditor.cli import cli
from auditor.wording import training_rho


def test_training_rho_signs_a_number_and_names_an_undefined_one() -> None:
    assert training_rho(0.99149) == "+0.991" and training_rho(-0.5) == "-0.500"
    assert training_rho(math.nan) == "undefined (equal frequencies or equal norms)"


def test_retrain_on_equal_frequencies_never_prints_nan(tmp_path: Path) -> None:
    log = tmp_path / "equal.csv"  # three items, two interactions each
    log.write_text("user,item\n1,1\n2,2\n3,3\n1,2\n2,3\n3,1\n")
    result = CliRunner().invoke(cli, ["retrain", "--data", str(log), "--epochs", "2", "-o", str(tmp_path / "m.pt")])
    assert result.exit_code == 0, result.output
    assert "nan" not in result.output.lower()
    assert "frequency-norm Spearman ρ undefined (equal frequencies or equal norms)" in result.output
