"""Hostile model files whose served vectors popaudit cannot rebuild: a per-item tensor whose
role in the score no name or graph establishes, a checkpoint that records a graph model.
The stored tables stand in, said; a gate on a served figure is not measured (exit 1), never
passed on the stored tables' figures; no input changes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from .corpus import EXIT_ERROR, Built, Case, check_args, log, params, run_case

NOT_MEASURED = r"served_spearman.*stored tables stand in"


def _ambiguous_bias(d: Path) -> Built:
    """10 users, 10 items and `bias_i.weight` (10, 1): either tower's bias, so not served."""
    log(d)
    g = torch.Generator().manual_seed(0)
    torch.save({"user_emb.weight": torch.randn(10, 4, generator=g), "item_emb.weight": torch.randn(10, 4, generator=g),
                "bias_i.weight": torch.arange(10.0).reshape(10, 1)}, d / "model.pt")
    return Built(check_args("model.pt", "--fail-on", "served_spearman>0.5"))


CASES: list[Case] = [
    Case("pt-per-item-tensor-of-no-known-role-gate", _ambiguous_bias, EXIT_ERROR, NOT_MEASURED),
]


@pytest.mark.parametrize("case", params(CASES))
def test_hostile_served_model(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_case(case, tmp_path, monkeypatch)
