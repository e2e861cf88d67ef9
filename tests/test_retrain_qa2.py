"""Retrain QA, second round: the transformer's hidden width (N3), monitor options given
without the option they qualify (N2), whitespace-only ids (N4)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from auditor.cli import cli
from auditor.errors import TrainingError
from auditor.train import TRANSFORMER_HEADS, hidden_width_problem
from auditor.train.models import ModelSpec

SMALL = ["--n-users", "20", "--n-items", "10", "--n-interactions", "100", "--epochs", "1", "--threads", "1", "-q"]


@pytest.mark.parametrize("width, refused", [(7, True), (1, True), (8, False), (2, False), (65, True)])
def test_the_transformer_width_must_split_among_its_heads(width: int, refused: bool, tmp_path: Path) -> None:
    """N3: --hidden-dim 7 with the transformer was exit 1 naming n_heads, an option that does not exist."""
    assert TRANSFORMER_HEADS == 2
    assert (hidden_width_problem("transformer", width) is not None) is refused
    assert hidden_width_problem("mlp", width) is None  # an MLP tower takes any width
    got = CliRunner().invoke(cli, ["retrain", *SMALL, "--user-encoder", "transformer", "--hidden-dim", str(width),
                                   "-o", str(tmp_path / "m.pt")])
    assert got.exit_code == (2 if refused else 0), got.output
    if refused:
        assert (f"--hidden-dim {width} cannot be split among the transformer user tower's 2 attention heads: give a "
                "multiple of 2") in got.stderr
        assert "n_heads" not in got.stderr and not (tmp_path / "m.pt").exists()
        with pytest.raises(TrainingError, match=f"hidden_dim {width} cannot be split"):
            ModelSpec(n_users=3, n_items=3, user_encoder="transformer", hidden_dim=width)
