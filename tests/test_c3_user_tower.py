"""C3 across the towers (conditions QA F1): a user tower that reads the item table.

u = U[u] + mean(E[hist_u]) makes J_iJ_uᵀ = (c_i/H)·I ≠ 0, so user-side gradients move q_i,
not orthogonally: C3 is violated although the item tower alone (an id table) satisfies it.
And a probe step whose angles are clearly tilted overrules C1–C4 read as holding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from auditor.conditions import assess_conditions
from auditor.conditions.angles_check import angles_overrule
from auditor.conditions.c2_c3_encoder import Static, assess_c3
from auditor.config import DeclaredTraining
from auditor.model import ModelBundle
from auditor.probe_results import ProbeOutcome, UpdateProbe, UserCoupling
from auditor.probes.user_coupling import user_coupling
from auditor.result import CONDITION_NAMES, Condition
from live_towers import SharedHistoryLive, TinyLive, Towers

N_ITEMS, N_USERS, DIM, H = 40, 30, 8, 5


def _history(repeat_first: bool = False) -> torch.Tensor:
    """Distinct history items per user (or the first item twice, when ``repeat_first``)."""
    rng = np.random.default_rng(0)
    hist = np.stack([rng.choice(N_ITEMS, H, replace=False) for _ in range(N_USERS)])
    if repeat_first:
        hist[:, 1] = hist[:, 0]
    return torch.as_tensor(hist, dtype=torch.int64)


def _bundle(live: TinyLive) -> ModelBundle:
    with torch.no_grad():
        items = live.encode_items(live.module, torch.arange(N_ITEMS)).numpy()
        users = live.encode_users(live.module, torch.arange(N_USERS)).numpy()
    return ModelBundle(source=Path("m.pt"), format="popaudit", item_table=items, live=live, user_table=users)


def test_user_coupling_known_ratio_for_distinct_and_repeated_history() -> None:
    # distinct history: c = (1,1,1,1,1) → 1/√5; first item twice: c = (2,1,1,1) → 2/√7
    for repeat, expected in ((False, 1 / math.sqrt(5)), (True, 2 / math.sqrt(7))):
        live = SharedHistoryLive(Towers(N_ITEMS, N_USERS, DIM), hist=_history(repeat))
        out = user_coupling(live, live.module, torch.arange(4), torch.arange(N_ITEMS))
        assert out.reads_items and out.coupled
        assert math.isclose(out.max_relative, expected, rel_tol=1e-9), (out.max_relative, expected)
        assert out.item in set(_history(repeat)[out.user].tolist())


def test_user_tower_of_its_own_reads_no_item_parameter() -> None:
    live = TinyLive(Towers(N_ITEMS, N_USERS, DIM))
    out = user_coupling(live, live.module, torch.arange(4), torch.arange(N_ITEMS))
    assert not out.reads_items and out.max_relative == 0.0 and not out.coupled


def test_shared_history_user_tower_violates_c3_and_drops_the_orthogonality_claim() -> None:
    live = SharedHistoryLive(Towers(N_ITEMS, N_USERS, DIM), hist=_history(), lr=0.5)
    out = assess_conditions(_bundle(live), None, None, DeclaredTraining(), seed=1)
    c3 = out.conditions["C3"]
    assert c3.status == "violated", c3.evidence
    assert "user tower reads item-tower parameters" in c3.evidence
    assert out.probes is not None and out.probes.user_coupling is not None
    assert math.isclose(out.probes.user_coupling.max_relative, 1 / math.sqrt(5), rel_tol=1e-9)
    assert "c3_user_cross_jacobian" in out.probes.to_dict()
    assert out.conditions["C5"].status != "holds" or "C3" in out.conditions["C5"].evidence
    # the same item tower with a user tower of its own: C3 holds
    plain = assess_conditions(_bundle(TinyLive(Towers(N_ITEMS, N_USERS, DIM), lr=0.5)), None, None,
                              DeclaredTraining(), seed=1)
    assert plain.conditions["C3"].status == "holds"


def _update(angles: np.ndarray) -> UpdateProbe:
    zeros = np.zeros(angles.size)
    return UpdateProbe(angles=angles, residuals=zeros, growth=zeros, growth_per_appearance=zeros,
                       relative_change=zeros, n_evaluated=angles.size, optimizer="SGD",
                       optimizer_restored=True, lr=1.0, steps=1)


def _holding() -> dict[str, Condition]:
    return {k: Condition(CONDITION_NAMES[k], "holds", f"{k} read") for k in ("C1", "C2", "C3", "C4")}


def test_tilted_probe_angles_overrule_c1_c4_holding() -> None:
    # 3 of 9 angles within 90° ± 1° (1/3, below the 0.5 tilted share): the angles win
    angles = np.array([90.2, 89.5, 90.9, 95.0, 80.0, 100.0, 85.0, 112.0, 70.0])
    probe = ProbeOutcome(dtype="float64", seed=0, batch_source="test", batch_size=9, update=_update(angles))
    conditions, warnings = _holding(), []
    angles_overrule(conditions, probe, warnings)
    assert all(c.status == "unknown" for c in conditions.values())
    assert "33.3% of 9 update angles within 90° ± 1°" in conditions["C3"].evidence
    assert conditions["C1"].details["overruled_by_update_angles"]["share_90pm1"] == 1 / 3
    assert len(warnings) == 1 and "reported unknown" in warnings[0]
    # orthogonal angles (or a share above 0.5) leave the readings alone
    for kept in (np.full(9, 90.0), np.array([90.0] * 5 + [80.0] * 4)):
        conditions, warnings = _holding(), []
        angles_overrule(conditions, ProbeOutcome(dtype="float64", seed=0, batch_source="test", batch_size=9,
                                                 update=_update(kept)), warnings)
        assert all(c.status == "holds" for c in conditions.values()) and not warnings


def test_rounding_gradients_do_not_overrule() -> None:
    # a cosine loss in one dimension: every gradient is rounding, its angles (0°) are noise
    from auditor.probe_results import GradientAlignment

    probe = ProbeOutcome(dtype="float64", seed=0, batch_source="test", batch_size=6, update=_update(np.zeros(6)),
                         gradient_alignment=GradientAlignment(0, None, None, 1e-9, None, n_rounding=47))
    conditions, warnings = _holding(), []
    angles_overrule(conditions, probe, warnings)
    assert all(c.status == "holds" for c in conditions.values()) and not warnings


@dataclass
class _AllParametersLive(TinyLive):
    """An id-table model whose ``item_parameters`` lists every parameter, the user table too
    (an easy slip with one optimizer over the whole model)."""

    def item_parameters(self, module: torch.nn.Module) -> list[torch.nn.Parameter]:
        return list(module.parameters())


def test_user_table_listed_as_item_parameters_keeps_c3_holding_over_the_whole_catalogue() -> None:
    # conditions QA N1: u = U[u] reads the listed user table, which no item output reads, so
    # J_iJ_uᵀ = 0 for every one of the 40 items (all compared): C3 holds (was unknown)
    live = _AllParametersLive(Towers(N_ITEMS, N_USERS, DIM), lr=0.5)
    out = user_coupling(live, live.module, torch.arange(4), torch.arange(N_ITEMS), exhaustive=True)
    assert out.reads_items and out.max_relative == 0.0 and not out.coupled and out.exhaustive
    result = assess_conditions(_bundle(live), None, None, DeclaredTraining(), seed=1)
    c3 = result.conditions["C3"]
    assert c3.status == "holds", c3.evidence
    assert "the 40 items are the whole catalogue" in c3.evidence and "move no q_i" in c3.evidence
    assert result.probes is not None and result.probes.user_coupling is not None
    assert result.probes.to_dict()["c3_user_cross_jacobian"]["exhaustive"] is True


def test_user_outputs_reading_parameters_no_sampled_item_reads_leave_c3_unknown() -> None:
    # the same figure over a sample of the catalogue: an item outside it may read them
    holding: Static = ("holds", "an id table")
    for exhaustive, expected in ((False, "unknown"), (True, "holds")):
        coupling = UserCoupling(n_users=8, n_items=1024, max_relative=0.0, reads_items=True, user=None, item=None,
                                tolerance=1e-9, dim=DIM, exhaustive=exhaustive)
        probe = ProbeOutcome(dtype="float64", seed=0, batch_source="test", batch_size=8, user_coupling=coupling)
        assert assess_c3(holding, probe).status == expected
