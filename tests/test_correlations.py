"""The numpy correlations against scipy.stats, their reference: ranks, ρ, r and τ-b bit
for bit, the p-value and the t tail to rounding, the bootstrap interval bit for bit."""

import math
import warnings

import numpy as np
import pytest
from scipy import special
from scipy import stats as sps

from auditor.metrics.correlations import average_ranks, discordant_pairs, kendall_tau_b, kendall_tau_test, pearson, spearman
from auditor.metrics.percentile_bootstrap import (
    allowed_undefined,
    percentile_bootstrap,
    resample_batch,
    too_many_undefined,
)
from auditor.metrics.spearman_ci import spearman_ci
from auditor.metrics.student_t import normal_quantile, regularized_beta, t_two_sided_p


def _tables(seed: int, count: int):
    """Item tables of the shapes audits see: Zipf counts with cold items, noisy norms,
    rounded (tied) norms, and plain normal pairs."""
    rng = np.random.default_rng(seed)
    for trial in range(count):
        n = int(rng.integers(3, 2500))
        freqs = rng.zipf(1.5, n).astype(float)
        if trial % 4 == 1:
            freqs[rng.random(n) < 0.4] = 0
        norms = np.log1p(freqs) + rng.normal(0, 0.5, n)
        if trial % 4 == 2:
            norms = np.round(norms, 1)
        if trial % 4 == 3:
            freqs, norms = rng.normal(size=n), rng.normal(size=n)
        if np.ptp(freqs) > 0 and np.ptp(norms) > 0:
            yield freqs, norms


def test_average_ranks_equal_rankdata_in_one_and_two_dimensions():
    for freqs, norms in _tables(1, 40):
        np.testing.assert_array_equal(average_ranks(freqs), sps.rankdata(freqs))
        rows = np.stack([freqs, norms, np.round(norms)])
        np.testing.assert_array_equal(average_ranks(rows), sps.rankdata(rows, axis=-1))
    assert average_ranks(np.array([3.0, 1.0, 3.0, 2.0])).tolist() == [3.5, 1.0, 3.5, 2.0]


def test_rho_r_and_tau_equal_scipy_bit_for_bit_and_p_to_rounding():
    for freqs, norms in _tables(2, 80):
        ref = sps.spearmanr(freqs, norms)
        got = spearman(freqs, norms)
        assert got.statistic == ref.statistic
        assert got.pvalue == pytest.approx(ref.pvalue, rel=1e-12, abs=1e-300)
        logs = np.log1p(np.abs(freqs))
        assert pearson(logs, norms) == sps.pearsonr(logs, norms).statistic
        assert kendall_tau_b(freqs, norms) == sps.kendalltau(freqs, norms).statistic


def test_undefined_correlations_are_nan():
    constant, ramp = np.ones(5), np.arange(5.0)
    assert all(math.isnan(v) for v in spearman(constant, ramp))
    assert all(math.isnan(v) for v in spearman(np.array([1.0]), np.array([2.0])))
    assert all(math.isnan(v) for v in spearman(np.array([1.0, np.nan, 3.0]), np.arange(3.0)))
    assert math.isnan(pearson(constant, ramp)) and math.isnan(kendall_tau_b(ramp, constant))
    assert math.isnan(kendall_tau_b(np.array([]), np.array([])))
    # A monotone pair: ρ rounds to 1 - 2^-53 in corrcoef, as in scipy, and p is tiny.
    assert spearman(ramp, ramp).statistic == sps.spearmanr(ramp, ramp).statistic
    assert spearman(ramp, ramp).pvalue == pytest.approx(sps.spearmanr(ramp, ramp).pvalue, rel=1e-13)
    assert spearman(-ramp, ramp).pvalue == pytest.approx(sps.spearmanr(-ramp, ramp).pvalue, rel=1e-13)


def test_kendall_known_answers_and_scipy_on_a_large_table():
    # Hand-counted: (1,2,3) vs (1,3,2): 2 concordant, 1 discordant, no ties -> 1/3.
    assert kendall_tau_b(np.array([1, 2, 3]), np.array([1, 3, 2])) == pytest.approx(1 / 3)
    assert discordant_pairs(np.array([3, 1, 2, 0])) == 5  # (3,1) (3,2) (3,0) (1,0) (2,0)
    rng = np.random.default_rng(3)
    values = rng.integers(0, 50, 5000)
    brute = int(np.triu(values[:, None] > values[None, :], k=1).sum())
    assert discordant_pairs(values) == brute
    freqs = rng.zipf(1.4, 200_000).astype(float)
    norms = np.round(np.log1p(freqs) + rng.normal(0, 0.4, freqs.size), 2)
    assert kendall_tau_b(freqs, norms) == sps.kendalltau(freqs, norms).statistic


def test_t_tail_matches_scipy_stdtr_across_table_sizes():
    for n in (4, 10, 100, 800, 10_000, 1_000_000, 10_000_000):
        dof = n - 2
        tolerance = 1e-12 if n <= 10_000 else 1e-10
        for rho in np.linspace(-0.999, 0.999, 201):
            t = float(rho * np.sqrt(dof / ((rho + 1.0) * (1.0 - rho))))
            ref = float(2 * special.stdtr(dof, -abs(t)))
            if ref > 1e-300:
                assert t_two_sided_p(t, dof) == pytest.approx(ref, rel=tolerance), (n, rho)
    assert t_two_sided_p(math.inf, 10) == 0.0 and t_two_sided_p(0.0, 10) == 1.0
    assert math.isnan(t_two_sided_p(math.nan, 10))
    # Cauchy (1 degree of freedom) in closed form: P(|T| >= t) = 1 - 2 atan(t) / π.
    assert t_two_sided_p(1e-9, 1) == pytest.approx(1 - 2 * math.atan(1e-9) / math.pi, rel=1e-15)
    assert t_two_sided_p(3.0, 1) == pytest.approx(1 - 2 * math.atan(3.0) / math.pi, rel=1e-14)


def test_regularized_beta_and_normal_quantile_match_scipy():
    for a, b, x in ((0.5, 0.5, 0.3), (2.0, 3.0, 0.9), (40.0, 0.5, 0.95), (1e4, 0.5, 0.9995), (3.0, 7.0, 0.0)):
        assert regularized_beta(x, a, b) == pytest.approx(special.betainc(a, b, x), rel=1e-12, abs=1e-300)
    for p in (0.5, 0.8, 0.95, 0.975, 0.995, 1e-6):
        assert normal_quantile(p) == pytest.approx(special.ndtri(p), rel=1e-15, abs=1e-300)


@pytest.mark.parametrize("n, resamples, seed", [(3, 50, 0), (57, 200, 4), (800, 1000, 0), (2600, 120, 9)])
def test_small_table_bootstrap_is_scipy_bootstrap_bit_for_bit(n, resamples, seed):
    rng = np.random.default_rng(seed + 100)
    freqs = np.concatenate([np.zeros(n // 5), rng.zipf(1.6, n - n // 5)]).astype(float)
    norms = np.round(freqs**0.25 + rng.normal(0, 0.3, n), 2)

    def statistic(x, y, axis=-1):
        rx, ry = sps.rankdata(x, axis=axis), sps.rankdata(y, axis=axis)
        rx, ry = rx - rx.mean(axis=axis, keepdims=True), ry - ry.mean(axis=axis, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            return (rx * ry).sum(axis=axis) / np.sqrt((rx * rx).sum(axis=axis) * (ry * ry).sum(axis=axis))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = sps.bootstrap(
            (freqs, norms), statistic, paired=True, vectorized=True, n_resamples=resamples,
            batch=resample_batch(n), confidence_level=0.95, method="percentile",
            rng=np.random.default_rng(seed),
        ).confidence_interval
    interval = spearman_ci(freqs, norms, n_bootstrap=resamples, seed=seed)
    if n == 3:
        # 6 of the 50 resamples draw one item three times (ρ undefined; scipy's interval is
        # NaN): more than the 5% a 95% interval may leave out, so it is undefined too.
        assert math.isnan(ref.low) and interval.n_undefined == 6
        assert math.isnan(interval.low) and math.isnan(interval.high)
    else:
        assert interval[:2] == (ref.low, ref.high) and interval.n_undefined == 0


def _spearman_rows_as_scipy(x, y, axis=-1):
    """The bootstrap's statistic in scipy's own rankdata (the reference)."""
    rx, ry = sps.rankdata(x, axis=axis), sps.rankdata(y, axis=axis)
    rx, ry = rx - rx.mean(axis=axis, keepdims=True), ry - ry.mean(axis=axis, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (rx * ry).sum(axis=axis) / np.sqrt((rx * rx).sum(axis=axis) * (ry * ry).sum(axis=axis))


@pytest.mark.parametrize("seed, undefined", [(0, 6), (1, 7), (2, 9)])
def test_constant_resamples_are_left_out_of_the_interval_not_widening_it(seed, undefined):
    # 60 items, 55 never trained: a resample drawing only cold items has no ρ (about
    # (55/60)^60 = 0.5% of them). scipy's interval is then NaN, popaudit's used to be
    # [-1, 1]; the interval is the same percentiles over the defined resamples.
    freqs = np.zeros(60)
    freqs[:5] = [50, 40, 30, 20, 10]
    norms = np.round(1 + np.random.default_rng(seed).uniform(0, 0.1, 60) + np.log1p(freqs), 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = sps.bootstrap(
            (freqs, norms), _spearman_rows_as_scipy, paired=True, vectorized=True, n_resamples=1000,
            batch=resample_batch(60), confidence_level=0.95, method="percentile", rng=np.random.default_rng(seed),
        )
    replicates = ref.bootstrap_distribution
    assert math.isnan(ref.confidence_interval.low) and np.isnan(replicates).sum() == undefined
    alpha = (1 - 0.95) / 2  # as scipy.stats.bootstrap takes it (0.025000000000000022)
    expected = sps.quantile(replicates[~np.isnan(replicates)], [alpha, 1 - alpha], method="linear")
    interval = spearman_ci(freqs, norms, n_bootstrap=1000, seed=seed)
    assert interval[:2] == (expected[0], expected[1])
    assert interval.n_undefined == undefined and f"({undefined} with an undefined ρ left out)" in interval.method
    assert 0 < interval.low < interval.high < 1


def test_too_many_undefined_resamples_leave_the_interval_undefined():
    # 5% of the resamples may be left out of a 95% interval: 50 of 1,000, 2 of 50.
    assert (allowed_undefined(1000, 0.95), allowed_undefined(50, 0.95), allowed_undefined(19, 0.95)) == (50, 2, 0)
    assert not too_many_undefined(50, 1000, 0.95) and too_many_undefined(51, 1000, 0.95)
    # 100 items, 2 trained: a resample drawing neither has no ρ. Counted from the very
    # draws (one batch of default_rng(0).integers(0, 100, (1000, 100))): 129, past 50.
    freqs = np.zeros(100)
    freqs[:2] = [30, 10]
    norms = 1 + np.log1p(freqs) + np.linspace(0, 0.01, 100)
    draws = np.random.default_rng(0).integers(0, 100, (1000, 100))
    expected = int((~(draws < 2).any(axis=1)).sum())
    assert expected == 129
    lo, hi, undefined = percentile_bootstrap(freqs, norms, 1000, 0, 0.95)
    assert math.isnan(lo) and math.isnan(hi) and undefined == expected


def test_a_monotone_table_with_a_constant_resample_has_the_point_interval():
    # 5 items in frequency order: every resample drawing two distinct items has ρ = 1;
    # the 2 (of 1,000) drawing one item five times have none. The interval is [1, 1].
    freqs, norms = np.array([0.0, 1.0, 2.0, 3.0, 4.0]), np.array([1.0, 1.5, 2.0, 2.5, 3.0])
    draws = np.random.default_rng(0).integers(0, 5, (1000, 5))
    constant = int((draws == draws[:, :1]).all(axis=1).sum())
    assert percentile_bootstrap(freqs, norms, 1000, 0, 0.95) == (1.0, 1.0, constant)
    assert constant == 2


def test_bootstrap_threads_change_nothing():
    rng = np.random.default_rng(8)
    freqs = rng.zipf(1.5, 1500).astype(float)
    norms = np.log1p(freqs) + rng.normal(0, 0.5, freqs.size)
    one = percentile_bootstrap(freqs, norms, 700, 3, 0.95, threads=1)
    assert percentile_bootstrap(freqs, norms, 700, 3, 0.95, threads=3) == one
    assert spearman_ci(freqs, norms, n_bootstrap=700, seed=3)[:2] == one[:2] and one.n_undefined == 0


def test_kendall_test_p_values_are_scipys():
    # By hand: 3 items in order, all 3 pairs concordant: tau 1, and 2 of the 3! = 6
    # permutations are as extreme (the order and its reverse): p = 1/3.
    assert tuple(kendall_tau_test(np.arange(3), np.arange(3))) == pytest.approx((1.0, 1 / 3))
    rng = np.random.default_rng(5)
    cases = [(np.arange(n, dtype=float), rng.permutation(n).astype(float)) for n in (4, 7, 12, 33, 34, 60, 500)]
    cases += [(np.arange(40.0), np.arange(40.0)), (np.arange(40.0), np.r_[1.0, 0.0, np.arange(2.0, 40.0)])]  # exact at n > 33
    cases += [(np.arange(n, dtype=float), rng.integers(0, 5, n).astype(float)) for n in (5, 20, 200)]  # ties: asymptotic
    cases += [(rng.integers(0, 3, 50).astype(float), rng.integers(0, 4, 50).astype(float))]
    for x, y in cases:
        ours, reference = kendall_tau_test(x, y), sps.kendalltau(x, y)
        assert ours.statistic == reference.statistic, len(x)
        assert ours.pvalue == pytest.approx(reference.pvalue, rel=1e-12, abs=1e-300), len(x)
    assert all(math.isnan(v) for v in kendall_tau_test(np.arange(5.0), np.ones(5)))
    assert all(math.isnan(v) for v in kendall_tau_test(np.array([1.0]), np.array([2.0])))
