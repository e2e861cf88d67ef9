"""`batch --rank-by` ranks most biased first in the direction `diff` judges changes by, and
its help says that direction (QA harms N2: it said "farthest from 0 for ΔGAP", while ΔGAP,
a popularity lift, ranks highest first)."""

from __future__ import annotations

import re

from click.testing import CliRunner

from auditor.batch.rank_by import rank_sense
from auditor.cli import cli


def _ranked(name: str, values: dict[str, float]) -> list[str]:
    sense = rank_sense(name)
    return sorted(values, key=lambda model: sense.key(values[model]))


def test_gap_delta_ranks_the_higher_lift_first() -> None:
    # the QA's figures: dot -0.466, cosine -0.562; dot lifts popularity more, so it ranks first
    assert _ranked("gap_delta_blockbuster_dot@5", {"cosine": -0.562, "dot": -0.466}) == ["dot", "cosine"]
    assert _ranked("gap_delta_niche_dot@5", {"a": 0.02, "b": -0.30, "c": 0.15}) == ["c", "a", "b"]
    assert _ranked("aclt_dot@5", {"a": 2.0, "b": 1.0}) == ["b", "a"]  # a higher long-tail count is less bias


def test_rank_by_help_says_highest_first_for_gap_delta() -> None:
    ran = CliRunner().invoke(cli, ["batch", "--help"], terminal_width=400)
    assert ran.exit_code == 0
    text = " ".join(ran.output.split())
    assert "farthest from 0" not in text
    assert re.search(r"lowest first for aplt, aclt, coverage, novelty; highest first for ΔGAP", text)
