"""Hostile options of ``popaudit experiment`` found by the retrain QA: seeds past the seed
range, and its list options (``--lrs``, ``--settings``, ``--mitigations``), each a usage
error (exit 2) before any run trains."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .corpus import EXIT_USAGE, Built, Case, params, run_case

TOP = str(2**64 - 1)
"""The largest seed torch and numpy take (auditor/ranges.py)."""


def _experiment(*extra: str) -> Any:
    def build(d: Path) -> Built:
        return Built(["experiment", *extra, "--n-users", "20", "--n-items", "10", "--n-interactions", "100",
                      "--epochs", "1", "-o", "out"])

    return build


CASES = [
    Case("experiment-seeds-past-the-top-lr-sweep", _experiment("lr-sweep", "--lrs", "1", "--seeds", "2", "--seed", TOP),
         EXIT_USAGE, r"--seed 18446744073709551615 with --seeds 2 would run seeds up to 18,446,744,073,709,551,616, "
         r"past the largest seed 18,446,744,073,709,551,615: give --seed at most 18,446,744,073,709,551,614"),
    Case("experiment-seeds-past-the-top-conditions",
         _experiment("conditions", "--settings", "reference", "--seeds", "3", "--seed", str(2**64 - 2)),
         EXIT_USAGE, r"--seed 18446744073709551614 with --seeds 3 .* give --seed at most 18,446,744,073,709,551,613"),
    Case("experiment-seeds-past-the-top-mitigations", _experiment("mitigations", "--seeds", "2", "--seed", TOP),
         EXIT_USAGE, r"--seed 18446744073709551615 with --seeds 2 would run seeds"),
]

PRODUCT_FAILURES: list[Case] = []


@pytest.mark.parametrize("case", params(CASES, PRODUCT_FAILURES))
def test_hostile_experiment_options(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_case(case, tmp_path, monkeypatch)
