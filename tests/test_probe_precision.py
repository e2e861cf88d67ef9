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


@pytest.mark.parametrize("seed", range(6))
def test_float32_rounding_behind_a_float64_output_holds_on_every_seed(seed: int) -> None:
    """The QA's f32 id table (300 x 16, std 0.1; E(rows).float().double()): exactly linear, its
    figures float32 rounding that falls 12-50x over ε = 0.1 → 0.001 (a step εv partly rounds away),
    some exactly 0. The old 10x rule read half the seeds as curvature."""
    live = RoundedLive(Towers(300, N_USERS, 16, "embedding", seed=seed, init_std=0.1))
    out = second_difference(live, live.module, torch.arange(64), generator=torch.Generator().manual_seed(seed))
    assert max(out.relative) < 8 * torch.finfo(torch.float32).eps == out.rounding_level
    assert out.linear and out.flat_over_epsilon, out.relative


def test_rounding_rule_reads_decaying_float32_rounding_and_zeros_as_rounding() -> None:
    level, tol = 8 * float(torch.finfo(torch.float32).eps), 1e-9
    # the QA's seed 0 (x52 over two decades, below float32's rounding): not ε² (x10^4)
    assert is_rounding(np.array([1.87e-8, 6.66e-9, 3.56e-10]), EPSILONS, level, tol)
    assert is_rounding(np.array([1.87e-8, 6.66e-9, 0.0]), EPSILONS, level, tol)  # εv rounded away
    # curvature below float32's rounding level still shows as ε²: not rounding
    assert not is_rounding(np.array([4e-7, 4e-9, 4e-11]), EPSILONS, level, tol)
    assert not is_rounding(np.array([4e-7, 4e-9, 0.0]), EPSILONS, level, tol)
    # past the rounding level of the tower's coarsest dtype: never rounding
    assert not is_rounding(np.array([2e-6, 2e-6, 2e-6]), EPSILONS, level, tol)
    # a float16 layer inside rounds coarser: its level (8 eps16) admits flat figures of 1e-4
    assert is_rounding(np.array([1e-4, 1e-4, 1e-4]), EPSILONS, 8 * float(torch.finfo(torch.float16).eps), tol)


class HalfInsideLive(TinyLive):
    """Float64 out, float16 inside: the coarsest dtype is seen in the forward, not the output."""

    def encode_items(self, module: torch.nn.Module, rows: torch.Tensor) -> torch.Tensor:
        return module.items(rows).half().double()


def test_the_coarsest_dtype_inside_the_tower_sets_the_rounding_level() -> None:
    live = HalfInsideLive(Towers(N_ITEMS, N_USERS, DIM, "embedding"))
    out = second_difference(live, live.module, ROWS, generator=torch.Generator().manual_seed(0))
    assert out.rounding_level == 8 * torch.finfo(torch.float16).eps and out.linear, out.relative
    curved = TinyLive(Towers(N_ITEMS, N_USERS, DIM, "mlp"))
    out = second_difference(curved, curved.module, ROWS, generator=torch.Generator().manual_seed(0))
    assert not out.linear and out.rounding_level == 8 * torch.finfo(torch.float32).eps


class HalfPrecisionLive(TinyLive):
    """The QA's curved towers computed in bfloat16 behind a float64 output (conditions QA
    round 2, N1): E² (``bf16_square``) or tanh(5·E·W) (``bf16_mlp``), or float64 throughout."""

    def __init__(self, module: torch.nn.Module, kind: str, dtype: torch.dtype) -> None:
        super().__init__(module)
        self.kind, self.dtype = kind, dtype
        self.w = torch.randn(16, 16, generator=torch.Generator().manual_seed(1), dtype=torch.float64)

    def encode_items(self, module: torch.nn.Module, rows: torch.Tensor) -> torch.Tensor:
        e = module.items(rows).to(self.dtype)
        out = e**2 if self.kind == "square" else torch.tanh(e @ self.w.to(self.dtype) * 5)
        return out.double()


@pytest.mark.parametrize("kind", ["square", "mlp"])
def test_a_curved_tower_computed_in_bfloat16_is_not_rounding(kind: str) -> None:
    """Its ε = 0.1 figure is the curvature (the float64 tower's, which shrinks exactly as ε²),
    while the small-ε figures sit on bfloat16's rounding floor (~0.7 eps = 5e-3): the F3 rule,
    which wanted ε² over every step, read this as rounding and C2 held."""
    figures = {}
    for dtype in (torch.float64, torch.bfloat16):
        live = HalfPrecisionLive(Towers(300, N_USERS, 16, "embedding", seed=0, init_std=0.1), kind, dtype)
        out = second_difference(live, live.module, torch.arange(64), generator=torch.Generator().manual_seed(0))
        figures[dtype] = out
    exact, half = figures[torch.float64].relative, figures[torch.bfloat16].relative
    assert exact[0] / exact[1] == pytest.approx(100, rel=0.1) and exact[1] / exact[2] == pytest.approx(100, rel=0.1)
    eps16 = float(torch.finfo(torch.bfloat16).eps)
    assert abs(half[0] - exact[0]) < 2 * eps16 and half[0] > 2 * eps16  # curvature, past bfloat16's rounding
    assert max(half[1:]) > exact[1] * 5  # the small-ε steps: rounding swamps the curvature
    assert figures[torch.bfloat16].rounding_level == 8 * eps16 and not figures[torch.bfloat16].linear
    status = assess_c2(("unknown", "static"), ProbeOutcome(dtype="float64", seed=0, batch_source="test", batch_size=0,
                                                           second_difference=figures[torch.bfloat16])).status
    assert status == "violated"


def test_rounding_rule_reads_bfloat16_curvature_on_its_floor_as_curvature() -> None:
    level, tol = 8 * float(torch.finfo(torch.bfloat16).eps), 1e-9
    assert not is_rounding(np.array([2.25e-2, 8.97e-3, 5.07e-3]), EPSILONS, level, tol)  # QA's bf16_square
    assert not is_rounding(np.array([4.07e-2, 7.70e-3, 5.51e-3]), EPSILONS, level, tol)  # QA's bf16_mlp
    assert not is_rounding(np.array([2e-2, 2e-4, 5e-3]), EPSILONS, level, tol)  # one ε² step above one eps
    assert is_rounding(np.array([4.23e-3, 4.19e-3, 2.84e-3]), EPSILONS, level, tol)  # QA's bf16_linear: flat
