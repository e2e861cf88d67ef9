"""C2/C3 tolerances follow the precision of what the encoder returns (plugins QA F2).

A parameter-linear tower whose encoder ends in ``.float()`` returns float32: its second
difference is float32 rounding (about 6e-8 at every ε), not curvature, which a float64
tolerance (1e-9) read as C2 violated. A curved tower's second difference scales as ε²
(×100 per decade) and stays violated.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from auditor.conditions.c2_c3_encoder import assess_c2
from auditor.probe_results import ProbeOutcome
from auditor.probes.copies import probe_dtype, tolerance
from auditor.probes.numerics import EPSILONS, cross_jacobian, is_rounding, second_difference
from live_towers import TinyLive, Towers

N_ITEMS, N_USERS, DIM = 40, 20, 8
ROWS = torch.arange(12)


class RoundedLive(TinyLive):
    """Float64 out, float32 inside: the rounding of a float32 layer behind a float64 cast."""

    def encode_items(self, module: torch.nn.Module, rows: torch.Tensor) -> torch.Tensor:
        return module.items(rows).float().double()


def _c2(live: TinyLive) -> tuple[str, float, tuple[float, ...]]:
    out = second_difference(live, live.module, ROWS, generator=torch.Generator().manual_seed(0))
    status = assess_c2(("unknown", "static"), ProbeOutcome(dtype="float64", seed=0, batch_source="test", batch_size=0, second_difference=out)).status
    return status, out.tolerance, out.relative


def test_float32_output_of_a_linear_tower_holds_c2() -> None:
    for encoder in ("scaled", "embedding"):
        status, tol, rel = _c2(TinyLive(Towers(N_ITEMS, N_USERS, DIM, encoder, out_dtype=torch.float32)))
        assert status == "holds" and tol == 1e-4
        assert 1e-9 < max(rel) < 1e-6  # float32 rounding: above the float64 tolerance, far below float32's


def test_float32_output_of_a_curved_tower_stays_violated() -> None:
    status, tol, rel = _c2(TinyLive(Towers(N_ITEMS, N_USERS, DIM, "mlp", out_dtype=torch.float32)))
    assert status == "violated" and tol == 1e-4 and rel[0] > 1e-4


def test_flat_rounding_behind_a_float64_output_is_linear() -> None:
    live = RoundedLive(Towers(N_ITEMS, N_USERS, DIM, "scaled"))
    out = second_difference(live, live.module, ROWS, generator=torch.Generator().manual_seed(0))
    assert out.tolerance == 1e-9 and min(out.relative) > 1e-9  # above the float64 tolerance...
    assert out.flat_over_epsilon and out.linear  # ...but flat over ε: rounding
    c2 = assess_c2(("unknown", "static"), ProbeOutcome(dtype="float64", seed=0, batch_source="test", batch_size=0, second_difference=out))
    assert c2.status == "holds" and "rounding, not curvature" in c2.evidence


def test_rounding_rule_known_answers() -> None:
    assert is_rounding(np.array([6.2e-8, 6.07e-8, 6.13e-8]), EPSILONS)
    assert not is_rounding(np.array([6.1e-3, 6.1e-5, 6.1e-7]), EPSILONS)  # ε²: curvature
    assert not is_rounding(np.array([2e-3, 2e-3, 2e-3]), EPSILONS)  # flat, but past float32's rounding
    assert not is_rounding(np.array([6e-8, 6e-8]), (1e-1, 5e-2))  # too narrow a range of ε to tell


def test_cross_jacobian_and_tolerance_follow_the_output_dtype() -> None:
    live = TinyLive(Towers(N_ITEMS, N_USERS, DIM, "scaled", out_dtype=torch.float32))
    out = cross_jacobian(live, live.module, torch.tensor([0, 3, 5, 11]))
    assert out.tolerance == 1e-4 and out.shared is False
    assert probe_dtype(torch.float64, torch.float32) == torch.float32
    assert probe_dtype(torch.float32, torch.float64) == torch.float32
    assert probe_dtype(torch.float64, torch.int64) == torch.float64
    assert tolerance(torch.bfloat16) == pytest.approx(8 * 2.0**-7)
    assert tolerance(torch.float16) == pytest.approx(8 * 2.0**-10)
