"""Frequency–norm statistics against constructed tables with known answers and scipy."""

import numpy as np
import pytest
from scipy import stats as sps

from auditor.errors import EmbeddingTableError
from auditor.metrics.frequency_norm import (
    decile_rows,
    frequency_norm_stats,
    item_norms,
    loglog_slope,
    popularity_deciles,
    spearman_bootstrap_ci,
)


def test_item_norms_match_numpy_across_blocks():
    table = np.random.default_rng(0).normal(size=(1000, 7)).astype(np.float32)
    np.testing.assert_allclose(item_norms(table, block=64), np.linalg.norm(table.astype(np.float64), axis=1))


def test_monotone_norms_give_rho_one_and_quarter_slope():
    freqs = np.arange(1, 201, dtype=np.int64)
    norms = freqs.astype(float) ** 0.25  # the ideal mechanism: ‖q‖⁴ linear in updates
    section, notes = frequency_norm_stats(norms, freqs, n_bootstrap=200)
    assert section.spearman == pytest.approx(1.0)
    assert section.kendall == pytest.approx(1.0)
    assert section.loglog_slope == pytest.approx(0.25)
    assert section.spearman_ci[0] == pytest.approx(1.0) and section.spearman_ci[1] == pytest.approx(1.0)
    assert section.spearman_p < 1e-10
    assert section.n_cold == 0 and notes == []


def test_reversed_norms_give_rho_minus_one():
    freqs = np.arange(1, 101)
    section, _ = frequency_norm_stats(1.0 / freqs, freqs, n_bootstrap=100)
    assert section.spearman == pytest.approx(-1.0)
    assert section.kendall == pytest.approx(-1.0)
    assert section.loglog_slope == pytest.approx(-1.0)


def test_independent_norms_give_rho_near_zero_with_ci_covering_zero():
    rng = np.random.default_rng(1)
    freqs = rng.zipf(1.7, 3000)
    norms = rng.uniform(0.5, 1.5, 3000)
    section, _ = frequency_norm_stats(norms, freqs, n_bootstrap=500, seed=3)
    assert abs(section.spearman) < 0.05
    lo, hi = section.spearman_ci
    assert lo < 0 < hi
    assert hi - lo < 0.15


def test_matches_scipy_on_noisy_zipf_table_with_ties_and_cold_items():
    rng = np.random.default_rng(2)
    freqs = np.concatenate([np.zeros(50, dtype=np.int64), rng.zipf(1.5, 950)])
    norms = np.log1p(freqs) + rng.normal(0, 0.5, freqs.size)
    section, _ = frequency_norm_stats(norms, freqs, n_bootstrap=300)
    ref = sps.spearmanr(freqs, norms)
    assert section.spearman == pytest.approx(ref.statistic)
    assert section.spearman_p == pytest.approx(ref.pvalue)
    assert section.pearson_log == pytest.approx(sps.pearsonr(np.log1p(freqs), norms).statistic)
    assert section.kendall == pytest.approx(sps.kendalltau(freqs, norms).statistic)
    assert section.n_cold == 50
    assert section.spearman_ci[0] < section.spearman < section.spearman_ci[1]
    keep = (freqs > 0) & (norms > 0)
    slope = np.polyfit(np.log(freqs[keep]), np.log(norms[keep]), 1)[0]
    assert section.loglog_slope == pytest.approx(slope)


def test_bootstrap_is_seeded_and_subsampled_ci_stays_narrow_for_large_tables():
    rng = np.random.default_rng(4)
    freqs = rng.zipf(1.6, 60_000).astype(float)
    norms = freqs**0.25 + rng.normal(0, 0.3, freqs.size)
    a = spearman_bootstrap_ci(freqs, norms, n_bootstrap=100, seed=7)
    b = spearman_bootstrap_ci(freqs, norms, n_bootstrap=100, seed=7)
    assert a == b
    rho = sps.spearmanr(freqs, norms).statistic
    assert a[0] < rho < a[1]
    assert a[1] - a[0] < 0.02


def test_constant_frequencies_are_reported_not_invented():
    section, notes = frequency_norm_stats(np.array([1.0, 2.0, 3.0]), np.array([5, 5, 5]), n_bootstrap=10)
    assert np.isnan(section.spearman)
    assert any("same frequency" in n for n in notes)
    assert section.loglog_slope is None


def test_too_few_items_is_an_error():
    with pytest.raises(EmbeddingTableError, match="at least 3 items"):
        frequency_norm_stats(np.array([1.0, 2.0]), np.array([1, 2]))


def test_deciles_do_not_depend_on_row_order_and_ties_share_a_decile():
    freqs = np.array([0] * 30 + list(range(1, 71)))
    norms = np.arange(100, dtype=float)
    perm = np.random.default_rng(0).permutation(100)
    assert [r.__dict__ for r in decile_rows(freqs, norms)] == [
        r.__dict__ for r in decile_rows(freqs[perm], norms[perm])
    ]
    decile = popularity_deciles(freqs)
    assert len(set(decile[:30])) == 1  # the 30 cold items tie: one decile
    rows = decile_rows(freqs, norms)
    assert sum(r.n for r in rows) == 100
    assert rows[-1].freq_max == 70 and rows[-1].n == 10
    assert rows[-1].norm_median == pytest.approx(np.median(np.arange(90, 100)))


def test_loglog_slope_needs_two_distinct_frequencies():
    assert loglog_slope(np.array([3.0, 3.0]), np.array([1.0, 2.0])) is None
    assert loglog_slope(np.array([1.0, 4.0]), np.array([1.0, 2.0])) == pytest.approx(0.5)
