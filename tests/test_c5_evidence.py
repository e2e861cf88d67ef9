"""C5's two kinds of evidence: the growth per update projected from one step at the
checkpoint (which can only understate), and what the trained table shows (QA findings
F1, F8, F9 on the five conditions).

Tables and probe steps are built by hand, so every figure has a known answer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from auditor.advice import training_recommendations
from auditor.conditions.angles_check import angles_overrule
from auditor.conditions.c5_growth import assess_c5
from auditor.conditions.c5_table import head_median_ratio
from auditor.conditions.facts import Fact, Origin
from auditor.model import ItemStats, ModelBundle
from auditor.probe_results import ProbeOutcome, UpdateProbe
from auditor.result import C5, CONDITION_NAMES, Condition, FrequencyNorm, Status
from auditor.wording import compared_figures

DIM = 8  # init spread 1 + 1/√16 = 1.25
FREQ = np.arange(1, 101, dtype=np.int64)  # item r trained on r+1 times


def _bundle(norms: np.ndarray) -> ModelBundle:
    table = np.zeros((norms.size, DIM), dtype=np.float32)
    table[:, 0] = norms
    return ModelBundle(source=Path("model.pt"), format="checkpoint", item_table=table, item_key="item_emb.weight")


def _stats() -> ItemStats:
    return ItemStats(frequencies=FREQ, n_interactions=int(FREQ.sum()))


def _fn(rho: float, lo: float, hi: float, p: float = 1e-6) -> FrequencyNorm:
    return FrequencyNorm(spearman=rho, spearman_ci=(lo, hi), spearman_p=p, pearson_log=rho, kendall=rho,
                         loglog_slope=None, n_items=FREQ.size, n_cold=0, deciles=[])


def _probe(g: float) -> ProbeOutcome:
    """One probe step at lr 1 whose every item grew by c/s² = ``g`` (orthogonal updates)."""
    n = 50
    update = UpdateProbe(
        angles=np.full(n, 90.0), residuals=np.zeros(n), growth=np.full(n, g), growth_per_appearance=np.full(n, g),
        relative_change=np.full(n, g), n_evaluated=n, optimizer="SGD", optimizer_restored=True, lr=1.0, steps=1,
    )
    return ProbeOutcome(dtype="float64", seed=0, batch_source="test", batch_size=n, update=update)


def _others(status: Status = "holds", c1: Status | None = None) -> dict[str, Condition]:
    out = {k: Condition(CONDITION_NAMES[k], status, "test") for k in ("C1", "C2", "C3", "C4")}
    if c1 is not None:
        out["C1"] = Condition(CONDITION_NAMES["C1"], c1, "test")
    return out


def _c5(norms: np.ndarray, g: float | None, others: dict[str, Condition], fn: FrequencyNorm | None) -> Condition:
    lr = Fact(1.0, Origin.DECLARED, "lr")
    return assess_c5(_bundle(norms), _stats(), Fact(5.0, Origin.CONFIG, "epochs"), lr,
                     None if g is None else _probe(g), others, fn)


def test_the_head_median_norm_ratio_by_hand() -> None:
    # head: f >= p99 (99.01) = item 100; middle: 40 <= f <= 61 (40th pct 40.6 rounded down,
    # 60th 60.4 rounded up), median norm 50.5
    assert head_median_ratio(FREQ.astype(float), FREQ.astype(float)) == pytest.approx(100 / 50.5)
    assert head_median_ratio(np.ones(3), np.zeros(3)) is None


def test_a_projection_below_the_spread_never_overrules_a_table_that_grew() -> None:
    """F1: lr 1000 (ρ 0.39, real head/median ratio 3.7) was "violated: the learning rate
    was too small" from a one-step projection of 1.121; with --no-probes it held."""
    grown = FREQ.astype(float)  # norms ∝ frequency: head/median ratio 1.98 > 1.25
    fn = _fn(0.99, 0.98, 1.0)
    with_probe = _c5(grown, 1e-6, _others(), fn)
    d: dict[str, Any] = with_probe.details
    assert d["head_median_norm_ratio"] < 1.001 < d["threshold"] == 1.25  # the projection alone: below
    assert with_probe.status == "holds" and d["decided_by"] == "table"
    assert d["table_head_median_norm_ratio"] == pytest.approx(100 / 50.5)
    assert "can only understate" in with_probe.evidence and "head/median norm ratio 1.980" in with_probe.evidence
    assert _c5(grown, None, _others(), fn).status == "holds"  # more evidence flips nothing


def test_a_small_projection_is_violated_only_when_the_table_agrees() -> None:
    flat = np.ones(FREQ.size)
    flat[::2] = 1.01  # norms unrelated to frequency: ratio 1.01 / 1.0 within the spread
    none = _fn(0.02, -0.15, 0.18)
    violated = _c5(flat, 1e-6, _others(), none)
    assert violated.status == "violated" and violated.details["decided_by"] == "projection and table"
    assert "too small" in violated.evidence
    # the allowance of the rule is said beside the ratio it judges (1.132 "no material growth"
    # right after a 1.125 threshold read as a contradiction)
    threshold = 1 + 1 / (2 * _bundle(flat).dim) ** 0.5
    assert f"within twice the init spread, below {1 + 2 * (threshold - 1):.3f}, is no material growth" in violated.evidence
    # C1 violated (momentum): a grown table cannot tell the learning rate's part, and a
    # small projection proves nothing: unknown, never violated
    grown = _c5(FREQ.astype(float), 1e-6, _others(c1="violated"), _fn(0.8, 0.7, 0.9))
    assert grown.status == "unknown" and "C1 is violated" in grown.evidence
    # C1-C4 not known to hold: a flat table and a small projection are no proof either
    assert _c5(flat, 1e-6, _others("unknown"), none).status == "unknown"


def test_the_threshold_prints_with_the_digits_the_comparison_needs() -> None:
    """F9: "a norm ratio of 1.121 ... below the init spread ... = 1.12" (the threshold 1.125)."""
    assert compared_figures(1.1209, 1.125) == ("1.121", "1.125")
    assert compared_figures(1.12496, 1.125) == ("1.12496", "1.12500")
    assert compared_figures(1.25, 1.25) == ("1.250", "1.250")


def _scheduled_state(lr: float, initial_lr: float | None) -> dict[str, Any]:
    """A real torch SGD state dict whose group a scheduler left at ``lr`` (``initial_lr``
    is what torch's LR schedulers add to each group)."""
    import torch

    table = torch.nn.Parameter(torch.ones(FREQ.size, DIM))
    opt = torch.optim.SGD([table], lr=initial_lr or lr)
    table.grad = torch.ones_like(table)
    opt.step()
    state = opt.state_dict()
    for group in state["param_groups"]:
        group["lr"] = lr
        if initial_lr is not None:
            group["initial_lr"] = initial_lr
    return state


def _assess(state: dict[str, Any], config: dict[str, Any], g: float | None = None) -> tuple[dict[str, Condition],
                                                                                             list[str]]:
    from auditor.conditions import assess_conditions
    from auditor.config import DeclaredTraining

    bundle = _bundle(FREQ.astype(float))
    bundle = ModelBundle(**{**bundle.__dict__, "optimizer_state": state, "config": config})
    out = assess_conditions(bundle, _stats(), None, DeclaredTraining(), run_probes=False,
                            frequency_norm=_fn(0.99, 0.98, 1.0))
    return out.conditions, out.warnings


def test_a_scheduled_rate_is_not_the_rate_training_ran_at() -> None:
    """F2: state lr 0.01 (annealed), initial_lr 10, config lr 10: C5 read lr=0.01, silently."""
    conds, warnings = _assess(_scheduled_state(0.01, 10.0), {"lr": 10.0, "epochs": 5})
    assert conds["C1"].details["lr"] == 10.0 and conds["C1"].details["sources"]["lr"] == "optimizer state (initial_lr)"
    assert conds["C5"].details["lr"] == 10.0 and conds["C5"].evidence.startswith("lr=10 (optimizer state (initial_lr))")
    assert [w for w in warnings if "stored learning rates differ" in w] == [
        "the stored learning rates differ (optimizer state initial_lr 10, optimizer state lr 0.01, config (lr) 10; "
        "a scheduler leaves its last rate in the optimizer state's lr); the audit uses 10 from optimizer state "
        "initial_lr, the rate training ran at"]
    # a config that records another rate than the state, no scheduler (none set initial_lr): said, and the
    # state's rate used, the one the optimizer stepped with (the config's 0.001 shrank the growth 10^-6-fold)
    conds, warnings = _assess(_scheduled_state(1.0, None), {"lr": 0.001})
    assert conds["C1"].details["lr"] == 1.0 and any("optimizer state lr 1, config (lr) 0.001" in w for w in warnings)
    # one rate everywhere: no warning, read from the state as before
    conds, warnings = _assess(_scheduled_state(0.5, None), {"lr": 0.5})
    assert conds["C1"].details["sources"]["lr"] == "optimizer state" and not any("differ" in w for w in warnings)


def test_the_probe_growth_is_scaled_to_the_training_rate() -> None:
    """The probe steps the restored optimizer at its last scheduled rate: c/s² ∝ lr²."""
    lr = Fact(10.0, Origin.STATE, "initial_lr")
    probe = _probe(1e-9)  # stepped at lr 1 (see _probe)
    c5 = assess_c5(_bundle(FREQ.astype(float)), _stats(), Fact(5.0, Origin.CONFIG, "epochs"), lr, probe, _others(),
                   _fn(0.99, 0.98, 1.0))
    assert c5.details["growth_per_update"] == pytest.approx(1e-7) and c5.details["probe_growth_per_update"] == 1e-9
    assert "scaled by (10/1)²" in c5.evidence
    from auditor.advice import training_recommendations

    advice = "\n".join(training_recommendations({"C5": c5}))
    assert "c/s² = 1e-07 at lr = 10" in advice  # the growth and the rate it was scaled to, paired


def test_a_step_that_shrinks_the_norms_is_no_growth() -> None:
    """F3: with weight decay C5 counted ‖Δq‖²/‖q‖² as growth (×32.6 for the head) while the
    same step shrank the norms: relative change of s = ‖q‖² −0.19, Pythagorean residual −20."""
    import torch

    from auditor.probes.update import step_geometry

    q = torch.tensor([[3.0, 4.0], [1.0, 0.0]], dtype=torch.float64)
    _, residual, growth, change, _ = step_geometry(q, 0.9 * q, 1e-12)  # decay only: Δq = −0.1 q
    assert growth == pytest.approx([0.01, 0.01]) and change == pytest.approx([-0.19, -0.19])
    assert residual == pytest.approx([-20.0, -20.0])
    n = 50
    decayed = UpdateProbe(
        angles=np.full(n, 180.0), residuals=np.full(n, -20.0), growth=np.full(n, 0.01),
        growth_per_appearance=np.full(n, 0.01), relative_change=np.full(n, -0.19), n_evaluated=n, optimizer="SGD",
        optimizer_restored=True, lr=1.0, steps=1, change_per_appearance=np.full(n, -0.19),
    )
    probe = ProbeOutcome(dtype="float64", seed=0, batch_source="test", batch_size=n, update=decayed)
    lr, epochs = Fact(1.0, Origin.DECLARED, "lr"), Fact(5.0, Origin.CONFIG, "epochs")
    grown, fn = FREQ.astype(float), _fn(0.99, 0.98, 1.0)
    c5 = assess_c5(_bundle(grown), _stats(), epochs, lr, probe, _others(c1="violated"), fn)
    assert c5.status == "unknown" and c5.details["change_per_appearance"] == pytest.approx(-0.19)
    assert "growth_per_update" not in c5.details and c5.details["shrank"] is True
    # plugins QA F3: no advice to shrink a growth the step did not show (C5 unknown), and where
    # the table shows it (C5 holds) no negative "growth" quoted, and why none is
    assert not [r for r in training_recommendations({C5: c5}) if "learning rate" in r]
    held = Condition(c5.name, "holds", c5.evidence, c5.details)
    (lr_advice,) = [r for r in training_recommendations({C5: held}) if "learning rate" in r]
    assert "c/s² =" not in lr_advice and "the probe step shrank the norms" in lr_advice
    assert "shrank the norms (median measured change of s = ‖q‖², (s′ − s)/s, -0.19 over the 50 items" in c5.evidence
    assert "residual median -20" in c5.evidence
    # the batch's items grew (gradient beat decay) but most moved items only decayed: no growth to project
    mixed = UpdateProbe(**{**decayed.__dict__, "change_per_appearance": np.full(n, 0.1)})
    probe = ProbeOutcome(dtype="float64", seed=0, batch_source="test", batch_size=n, update=mixed)
    c5 = assess_c5(_bundle(grown), _stats(), epochs, lr, probe, _others(c1="violated"), fn)
    assert c5.status == "unknown" and "no growth and there is none to project" in c5.evidence
    assert "materialises" not in c5.evidence


def test_the_table_alone_cannot_credit_the_rate_beside_violated_conditions() -> None:
    """F8: declared Adam with a dot-product loss (C1, C4 violated), no probe: C5 said "holds:
    the table shows the growth materialised at lr=1e-06" from ρ alone."""
    grown, fn = FREQ.astype(float), _fn(0.9998, 0.9996, 0.9998)
    both = {**_others(c1="violated"), "C4": Condition(CONDITION_NAMES["C4"], "violated", "test")}
    c5 = _c5(grown, None, both, fn)
    assert c5.status == "unknown" and "C1, C4 are violated" in c5.evidence and "materialised" not in c5.evidence
    assert _c5(grown, None, _others(), fn).status == "holds"  # the same table under C1-C4: the rate's growth


def test_contradicting_declarations_are_said() -> None:
    from auditor.conditions import assess_conditions
    from auditor.config import DeclaredTraining

    out = assess_conditions(_bundle(FREQ.astype(float)), None, None, DeclaredTraining(optimizer="momentum", momentum=0.0),
                            run_probes=False)
    assert any("names momentum but momentum 0 declares none" in w for w in out.warnings), out.warnings


@pytest.mark.parametrize(("p", "status"), [(0.0505, "unknown"), (0.01, "holds")])
def test_the_bootstrap_never_changes_c5(p: float, status: Status) -> None:
    """QA retrain N2: a low-lr run's ρ 0.062 had p 0.0505 but a 1,000-resample CI [0.004,
    0.123] above 0, so C5 held with the CI and was unknown with --bootstrap 0. C5 now reads
    ρ's p-value: the same grade with a CI that excludes 0, one across 0, or none (NaN bounds:
    --bootstrap 0). Here norms ∝ frequency (head/median ratio 1.98: past the 1.25 spread,
    and past twice it, 1.5, so never flat) and ρ 0.2 < 0.3: the table grew exactly when ρ is
    significant (p < 0.05), and C5 holds; else it is unknown."""
    nan = float("nan")
    grown = FREQ.astype(float)
    grades = {ci: _c5(grown, None, _others(), _fn(0.2, *ci, p=p)) for ci in ((0.01, 0.39), (-0.01, 0.39), (nan, nan))}
    assert {c.status for c in grades.values()} == {status}
    assert f"Spearman ρ = 0.20, 95% CI [0.01, 0.39], p = {p:g}" in grades[(0.01, 0.39)].evidence
    assert f"Spearman ρ = 0.20, p = {p:g}" in grades[(nan, nan)].evidence


WIDE = 32  # init spread 1 + 1/√64 = 1.125, below what a large growth projects over FREQ


def _tilted_probe(g: float) -> ProbeOutcome:
    """A probe step at lr 1 that grew every item by c/s² = ``g`` but whose angles are tilted:
    10 of 50 within 90° ± 1° (20%, at most the 50% tilted share)."""
    n = 50
    angles = np.where(np.arange(n) < 10, 90.0, 80.0)
    update = UpdateProbe(
        angles=angles, residuals=np.zeros(n), growth=np.full(n, g), growth_per_appearance=np.full(n, g),
        relative_change=np.full(n, g), n_evaluated=n, optimizer="SGD", optimizer_restored=True, lr=1.0, steps=1,
    )
    return ProbeOutcome(dtype="float64", seed=0, batch_source="test", batch_size=n, update=update)


def _wide_c5(norms: np.ndarray, probe: ProbeOutcome, others: dict[str, Condition], fn: FrequencyNorm) -> Condition:
    table = np.zeros((norms.size, WIDE), dtype=np.float32)
    table[:, 0] = norms
    bundle = ModelBundle(source=Path("model.pt"), format="checkpoint", item_table=table, item_key="item_emb.weight")
    return assess_c5(bundle, _stats(), Fact(5.0, Origin.CONFIG, "epochs"), Fact(1.0, Origin.DECLARED, "lr"),
                     probe, others, fn)


def _projected_ratio(g: float, epochs: float = 5.0) -> float:
    """((1+2g·f99·E)/(1+2g·f_med·E))^¼ over FREQ, computed here from the formula."""
    f99, fmed = np.quantile(FREQ, 0.99), np.median(FREQ)
    return float(((1 + 2 * g * f99 * epochs) / (1 + 2 * g * fmed * epochs)) ** 0.25)


def test_a_projection_does_not_decide_once_the_angles_overrule_c1_c4() -> None:
    """Conditions QA N2: a step measured not orthogonal (the angles overrule C1–C4) voids the
    projection's premise s ← s + c/s; C5 held "by projection, so the bias materialises"."""
    g = 1.0
    expected = _projected_ratio(g)  # 1.1834 > 1.125: the projection alone would hold
    assert expected == pytest.approx((1 + 2 * 99.01 * 5) ** 0.25 / (1 + 2 * 50.5 * 5) ** 0.25)
    probe = _tilted_probe(g)
    others, warnings = _others(), []
    angles_overrule(others, probe, warnings)
    assert all(others[k].status == "unknown" for k in others) and len(warnings) == 1
    flat = np.ones(FREQ.size)
    flat[::2] = 1.01
    # a flat table: nothing else shows growth, so C5 is unknown (was holds, by projection)
    c5 = _wide_c5(flat, probe, others, _fn(0.02, -0.15, 0.18, p=0.8))
    assert c5.details["head_median_norm_ratio"] == pytest.approx(expected, rel=1e-12)
    assert c5.status == "unknown" and c5.details["decided_by"] is None, c5.evidence
    assert "20.0% of 50 update angles within 90° ± 1°, which overruled C1–C4 holding, so it decides nothing" \
        in c5.evidence and "bias materialises" not in c5.evidence
    # a grown table decides (holds), naming the unknown C1–C4 and never crediting the rate
    grown = _wide_c5(FREQ.astype(float), probe, others, _fn(0.99, 0.98, 1.0))
    assert grown.status == "holds" and grown.details["decided_by"] == "table", grown.evidence
    assert "C1, C2, C3, C4 are unknown, so part of this growth may come from" in grown.evidence
    assert "materialised at it" not in grown.evidence


def test_a_holding_projection_names_the_unknown_conditions() -> None:
    """N2: where C3 is merely unknown (no angle overrule), the projection holds as before but
    says, as the table does, that C3 unknown leaves part of the growth unexplained."""
    others = _others()
    others["C3"] = Condition(CONDITION_NAMES["C3"], "unknown", "a sampled catalogue")
    c5 = _wide_c5(np.ones(FREQ.size), _probe(1.0), others, _fn(0.02, -0.15, 0.18, p=0.8))
    assert c5.status == "holds" and c5.details["decided_by"] == "projection"
    assert c5.details["head_median_norm_ratio"] == pytest.approx(_projected_ratio(1.0), rel=1e-12)
    assert c5.evidence.endswith(
        "so the bias materialises; C3 is unknown, so part of this growth may come from a step that is not orthogonal "
        "(momentum, an adaptive optimizer, weight decay, a dot-product loss) rather than the rate alone"), c5.evidence
    # every condition holding: no caveat
    assert _wide_c5(np.ones(FREQ.size), _probe(1.0), _others(), _fn(0.02, -0.15, 0.18, p=0.8)).evidence.endswith(
        "so the bias materialises")
