"""One model stored in another float format has one ρ, τ and CI (QA measures F1, F2).

F1: 30 items whose norm is a function of their training frequency, so the items of one
frequency share a norm (classes of 9, 5, 5 and 3 items: plateaus). Stored in float16 or
bfloat16, each class's norms spread by rounding (3.5e-4 and 1.8e-3 of the largest, within
those dtypes' tolerance), and the tie grouping cut the small classes at gaps of rounding
noise: ρ 0.98487 (f16), 0.99382 (bf16), 0.98333 (float32 times 2^-130) against 0.99977.
F2: float32 unit rows times 2^-130 or 2^-140 (subnormals) had a ρ of rounding noise where the
same table at scale 1 has none.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from auditor.metrics.frequency_norm import frequency_norm_stats, item_norms
from auditor.metrics.norm_rounding import NormPrecision, apart_factor, norm_precision, plateau_ties


def _class_model() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The QA's model (f_small_plateaus_dtype.py): float64 rows, their frequencies, and each
    item's norm as built (0.5 + 0.4·log1p(f): one norm a frequency class)."""
    rng = np.random.default_rng(7)
    n, n_users, dim = 30, 25, 6
    p = 1 / np.arange(1, n + 1) ** 0.9
    p /= p.sum()
    log = [(u, int(i)) for u in range(n_users) for i in rng.choice(n, size=rng.integers(2, 7), replace=False, p=p)]
    for u in range(n_users):  # the QA's holdout draw, which the rows' random state follows
        seen = {i for v, i in log if v == u}
        rng.choice([i for i in range(n) if i not in seen])
    freq = np.bincount([i for _, i in log], minlength=n).astype(np.float64)
    built = 0.5 + 0.4 * np.log1p(freq)
    rows = rng.normal(size=(n, dim))
    rows *= (built / np.linalg.norm(rows, axis=1))[:, None]
    return rows, freq, built


def _stored(rows: np.ndarray, name: str) -> tuple[np.ndarray, NormPrecision]:
    """The table as the audit holds it (float32) and its precision, stored as ``name``."""
    if name == "bfloat16":
        table = torch.tensor(rows, dtype=torch.bfloat16).float().numpy()
    elif name == "subnormal":  # an exact power-of-two scaling of the float32 model
        table = rows.astype(np.float32) * np.float32(2.0**-130)
        return table, norm_precision(table)
    else:
        table = rows.astype(name).astype(np.float32)
    return table, norm_precision(table, name)


def _expected(freq: np.ndarray, built: np.ndarray, norms: np.ndarray) -> tuple[float, float]:
    """scipy's ρ and τ with each class of at least 3 items (a plateau: 3 rows, 1% of 30) held at
    one norm, the others at their own norms (their order within a class moves neither)."""
    key = norms.copy()
    classes, counts = np.unique(freq, return_counts=True)
    for f in classes[counts >= 3]:
        key[freq == f] = built[freq == f]
    return float(stats.spearmanr(freq, key).statistic), float(stats.kendalltau(freq, key).statistic)


def test_the_size_calibrated_factor_of_a_gap_that_tells_rows_apart() -> None:
    assert apart_factor(3) == pytest.approx(99.0)  # 1e-4 ** -(1/2) - 1
    assert apart_factor(6) == pytest.approx(10 ** 0.8 - 1)
    assert apart_factor(10) == pytest.approx(10 ** (4 / 9) - 1)
    assert apart_factor(20) == 1.0 and apart_factor(391) == 1.0  # large plateaus: their span, as before


@pytest.mark.parametrize("name", ["float32", "float64", "float16", "bfloat16", "subnormal"])
def test_one_model_has_one_rho_tau_and_ci_in_every_storage(name: str) -> None:
    rows, freq, built = _class_model()
    table, precision = _stored(rows, name)
    norms = item_norms(table)
    rho, tau = _expected(freq, built * (2.0**-130 if name == "subnormal" else 1.0), norms)
    assert rho == pytest.approx(0.99977, abs=5e-6) and tau == pytest.approx(0.99734, abs=5e-6)
    section, _ = frequency_norm_stats(norms, freq, n_bootstrap=200, seed=1, precision=precision)
    assert section.spearman == pytest.approx(rho, abs=1e-12)  # f16 was 0.98487, bf16 0.99382, subnormal 0.98333
    assert section.kendall == pytest.approx(tau, abs=1e-12)  # f16 was 0.94818, bf16 0.97802, subnormal 0.94030
    reference, _ = frequency_norm_stats(item_norms(rows.astype(np.float32)), freq, n_bootstrap=200, seed=1,
                                        precision=NormPrecision("float32", 6))  # fmt: skip
    assert section.spearman_ci == pytest.approx(reference.spearman_ci, abs=1e-3)
    tied = plateau_ties(norms, precision)
    classes, counts = np.unique(freq, return_counts=True)
    for f in classes[counts >= 3]:
        assert np.unique(tied[freq == f]).size == 1  # each class one plateau (f16's 9 were cut into 7)


def test_few_rows_of_rounding_noise_stay_one_plateau_and_a_far_row_is_still_told_apart() -> None:
    # 5 rows within f16 rounding of one norm, the widest gap 1.78 times the span of the other 4:
    # was cut into 3 values (the top row, then the bottom one).
    base = np.array([0.0, 0.9e-4, 1.1e-4, 1.6e-4, 4.45e-4]) + 1.0
    precision = NormPrecision("float16", 6)
    far = np.linspace(1.5, 3.0, 25)
    norms = np.concatenate([base, far])
    assert np.diff(base).max() > np.ptp(base[:4])  # the old rule's cut
    tied = plateau_ties(norms, precision)
    assert np.all(tied[:5] == 1.0) and np.array_equal(tied[5:], far)
    # Ten rows of the same noise with a row 8 times their span away: 1.78 needed, told apart.
    ten = 1.0 + np.linspace(0.0, 1e-4, 10)
    apart = np.concatenate([ten, [1.0 + 1e-4 + 8e-4], far])
    tied = plateau_ties(apart, precision)
    assert np.all(tied[:10] == 1.0) and tied[10] == apart[10]


@pytest.mark.parametrize("exponent", [0, -130, -140])
def test_a_unit_norm_table_has_no_rho_at_any_power_of_two_scale(exponent: int) -> None:
    # QA measures F2: 200 float32 unit rows of 16 dims; times 2^-130 and 2^-140 (subnormals) they
    # gave ρ 0.0526 and -0.0304 (their rounding noise), where scale 1 has none.
    rng = np.random.default_rng(5)
    rows = rng.normal(size=(200, 16))
    table = (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32) * np.float32(2.0**exponent)
    freq = rng.zipf(1.5, 200).astype(np.float64)
    norms, precision = item_norms(table), norm_precision(table)
    spread = np.ptp(norms) / norms.max()
    assert spread > precision.tolerance if exponent else spread < precision.tolerance  # subnormals: 3e-6, 3e-3
    assert not exponent or np.ptp(norms) <= 8 * 2.0**-149  # within 2·sqrt(16) subnormal steps
    section, notes = frequency_norm_stats(norms, freq, n_bootstrap=50, precision=precision)
    assert np.isnan(section.spearman) and section.loglog_slope == 0.0
    reason = section.undefined_reason or ""
    assert reason.startswith("every item has the same norm to within float32 rounding")
    assert ("of entries held in subnormals (steps of 1.4e-45) at 16 dimensions" in reason) == bool(exponent)
    allowed = max(precision.tolerance, 8 * 2.0**-149 / float(norms.max()))
    assert f"within the {allowed:.2g} that float32 rounding" in reason


def test_a_plateau_quantised_to_repeated_values_stays_one_plateau() -> None:
    # Axis-aligned rows stored in f16 have norms on f16's grid: 5 rows at 1.0 and 4 at one f16
    # step above (9.8e-4, within the 2.0e-3 tolerance). Repeats are one draw, no span: one plateau
    # (the span of 5 identical rows is 0, so any gap would have told the 4 apart).
    step = float(np.spacing(np.float16(1.0)))
    quantised = np.array([1.0] * 5 + [1.0 + step] * 4)
    far = np.linspace(1.5, 3.0, 25)
    tied = plateau_ties(np.concatenate([quantised, far]), NormPrecision("float16", 1))
    assert np.all(tied[:9] == 1.0) and np.array_equal(tied[9:], far)
    assert apart_factor(1) == float("inf")
