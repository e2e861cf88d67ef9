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
    undefined_reason,
)
from auditor.metrics.norm_rounding import NormPrecision, norm_precision
from auditor.metrics.spearman_ci import (
    BOOTSTRAP_MAX_ITEMS,
    _bootstrap_rho,
    _spearman_rho,
    spearman_ci,
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
    a = spearman_ci(freqs, norms, n_bootstrap=100, seed=7)[:2]
    b = spearman_ci(freqs, norms, n_bootstrap=100, seed=7)[:2]
    assert a == b
    rho = sps.spearmanr(freqs, norms).statistic
    assert a[0] < rho < a[1]
    assert a[1] - a[0] < 0.02


def test_constant_frequencies_are_reported_not_invented():
    section, notes = frequency_norm_stats(np.array([1.0, 2.0, 3.0]), np.array([5, 5, 5]), n_bootstrap=10)
    assert np.isnan(section.spearman)
    assert any("same frequency" in n for n in notes)
    assert section.loglog_slope is None


def test_too_few_items_are_reported_as_undefined():
    section, notes = frequency_norm_stats(np.array([1.0, 2.0]), np.array([1, 2]))
    assert np.isnan(section.spearman) and np.isnan(section.spearman_ci[0])
    assert section.undefined_reason is not None and "only 2 items" in section.undefined_reason
    assert "at least 3" in section.undefined_reason
    assert section.n_bootstrap == 0 and section.ci_method == ""
    assert any("at least 3" in n for n in notes)
    empty, _ = frequency_norm_stats(np.array([]), np.array([]))
    assert "no items" in (empty.undefined_reason or "")


def test_mismatched_norms_and_frequencies_are_an_error():
    with pytest.raises(EmbeddingTableError, match="do not describe the same items"):
        frequency_norm_stats(np.array([1.0, 2.0, 3.0]), np.array([1, 2]))


def test_constant_table_says_why_rho_is_undefined():
    table = np.full((50, 8), 0.25, dtype=np.float32)
    section, notes = frequency_norm_stats(item_norms(table), np.arange(50), n_bootstrap=50)
    assert section.undefined_reason == (
        "every item has the same norm (a constant table): the correlation is undefined"
    )
    assert np.isnan(section.spearman) and section.n_bootstrap == 0
    assert any("same norm" in n for n in notes)


def test_undefined_reasons_name_the_cause():
    norms, freqs = np.array([1.0, 2.0, 3.0]), np.array([4.0, 4.0, 4.0])
    assert "same training frequency (4)" in (undefined_reason(norms, freqs) or "")
    assert "same training frequency and the same norm" in (
        undefined_reason(np.ones(3), freqs) or ""
    )
    assert "not finite" in (undefined_reason(np.array([1.0, np.inf, 2.0]), np.arange(3.0)) or "")
    assert undefined_reason(norms, np.arange(3.0)) is None


def test_defined_rho_has_no_reason_and_names_its_ci_method():
    freqs = np.arange(1, 101)
    section, _ = frequency_norm_stats(np.sqrt(freqs) + np.sin(freqs), freqs, n_bootstrap=100)
    assert section.undefined_reason is None
    assert section.ci_method == "percentile bootstrap, 100 resamples"


def test_small_tables_keep_the_previous_ci_digits():
    # Values recorded from the previous implementation (percentile bootstrap over all
    # items via scipy.stats.bootstrap) before the large-table path was replaced; for
    # n <= BOOTSTRAP_MAX_ITEMS the interval must stay bit-for-bit the same.
    rng = np.random.default_rng(11)
    freqs = rng.zipf(1.7, 3000).astype(float)
    freqs[rng.random(3000) < 0.3] = 0
    norms = rng.uniform(0.5, 1.5, 3000)
    assert spearman_ci(freqs, norms, n_bootstrap=500, seed=3)[:2] == (
        -0.028925553747949074,
        0.042887190343246964,
    )
    rng = np.random.default_rng(12)
    freqs = rng.zipf(1.6, BOOTSTRAP_MAX_ITEMS).astype(float)  # the boundary: still the old path
    norms = freqs**0.25 + rng.normal(0, 0.3, freqs.size)
    assert spearman_ci(freqs, norms, n_bootstrap=200, seed=5)[:2] == (
        0.7522218247074158,
        0.7666380831227135,
    )
    rng = np.random.default_rng(13)
    freqs = np.concatenate([np.zeros(100), rng.zipf(1.5, 900)])
    norms = np.log1p(freqs) + rng.normal(0, 0.5, freqs.size)
    section, notes = frequency_norm_stats(norms, freqs, n_bootstrap=300, seed=0)
    assert section.spearman == 0.8763562735664948
    assert section.spearman_ci == (0.8566733340414077, 0.894992278232801)
    assert section.n_bootstrap == 300 and notes == []


def test_large_tables_centre_the_ci_on_the_full_sample_rho():
    rng = np.random.default_rng(21)
    freqs = rng.zipf(1.6, 80_000).astype(float)
    norms = freqs**0.25 + rng.normal(0, 0.3, freqs.size)
    section, _ = frequency_norm_stats(norms, freqs, n_bootstrap=200, seed=2)
    lo, hi = section.spearman_ci
    assert lo < section.spearman < hi
    z = np.arctanh([lo, section.spearman, hi])
    assert z[1] - z[0] == pytest.approx(z[2] - z[1], rel=1e-9)
    assert section.ci_method.startswith("Fisher-z interval around the full-sample ρ")
    assert "200-resample bootstrap of a 20,000-item subsample" in section.ci_method
    assert section.n_bootstrap == 200


def test_fast_rho_matches_scipy_with_ties():
    rng = np.random.default_rng(22)
    freqs = np.concatenate([np.zeros(5000), rng.zipf(1.5, 45_000)]).astype(float)
    norms = np.round(np.log1p(freqs) + rng.normal(0, 1.0, freqs.size), 2)
    assert _spearman_rho(freqs, norms) == pytest.approx(sps.spearmanr(freqs, norms).statistic, abs=1e-12)


@pytest.mark.parametrize("tied_norms", [False, True])
def test_weighted_bootstrap_equals_spearman_of_the_expanded_resample(tied_norms):
    # Each resample is held as multiplicities; its ρ must be Spearman's ρ of the
    # resample written out item by item (ties from repeats and from equal values).
    rng = np.random.default_rng(23)
    m = 3000
    freqs = rng.zipf(1.6, m).astype(float)
    freqs[rng.random(m) < 0.4] = 0
    norms = freqs**0.2 + rng.normal(0, 0.5, m)
    if tied_norms:
        norms = np.round(norms, 1)
    got = _bootstrap_rho(freqs, norms, 5, np.random.default_rng(4))
    order = np.argsort(freqs, kind="stable")  # items as the bootstrap holds them
    draws = np.random.default_rng(4).spawn(1)[0].integers(0, m, size=(5, m))
    for r in range(5):
        copies = np.bincount(draws[r], minlength=m)
        expanded = sps.spearmanr(np.repeat(freqs[order], copies), np.repeat(norms[order], copies))
        assert got[r] == pytest.approx(expanded.statistic, abs=1e-12)


def test_item_norms_are_bit_identical_to_plain_float64_for_ordinary_tables():
    table = np.random.default_rng(24).normal(size=(5000, 33)).astype(np.float32)
    plain = np.sqrt(np.einsum("ij,ij->i", table.astype(np.float64), table.astype(np.float64)))
    np.testing.assert_array_equal(item_norms(table, block=700), plain)


def test_item_norms_never_overflow_or_underflow():
    f32 = np.finfo(np.float32)
    table = np.array(
        [[f32.max, -f32.max, f32.max], [3e38, 1.0, 0.0], [0.0, 0.0, 0.0], [f32.smallest_subnormal, 0.0, 0.0]],
        dtype=np.float32,
    )
    norms = item_norms(table)
    assert np.isfinite(norms).all()
    np.testing.assert_allclose(norms, np.linalg.norm(table.astype(np.float64), axis=1), rtol=1e-15)
    # float64 tables beyond float32's range: squaring would overflow / underflow.
    wide = np.array([[1e300, -1e300], [1e-300, 1e-300], [3e200, 4e200]])
    np.testing.assert_allclose(item_norms(wide), [np.sqrt(2) * 1e300, np.sqrt(2) * 1e-300, 5e200], rtol=1e-15)
    before = wide.copy()
    item_norms(wide)
    np.testing.assert_array_equal(wide, before)  # the caller's table is not scaled in place


def test_huge_float32_table_gives_a_defined_rho():
    rng = np.random.default_rng(25)
    freqs = rng.zipf(1.5, 2000)
    direction = rng.normal(size=(2000, 16))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    scale = 1e37 * (1 + np.log1p(freqs))  # norms up to ~1e38 per entry
    table = (direction * scale[:, None]).astype(np.float32)
    section, _ = frequency_norm_stats(item_norms(table), freqs, n_bootstrap=100)
    assert section.undefined_reason is None
    assert section.spearman > 0.9


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


def test_an_interval_with_too_many_undefined_resamples_is_null_with_its_reason():
    # 100 items, 2 trained: 129 of the 1,000 resamples (seed 0) draw neither (counted in
    # test_correlations from the draws), past the 50 a 95% interval may leave out.
    freqs = np.zeros(100)
    freqs[:2] = [30, 10]
    norms = 1 + np.log1p(freqs) + np.linspace(0, 0.01, 100)
    section, notes = frequency_norm_stats(norms, freqs, n_bootstrap=1000, seed=0)
    assert section.spearman == pytest.approx(sps.spearmanr(freqs, norms).statistic, rel=1e-12)
    assert np.isnan(section.spearman_ci).all()
    assert (section.n_bootstrap, section.n_bootstrap_undefined) == (1000, 129)
    assert section.ci_undefined_reason is not None and section.ci_undefined_reason in notes
    assert section.ci_undefined_reason.startswith("129 of 1,000 bootstrap resamples")
    assert "more than the 50 (5%)" in section.ci_undefined_reason
    data = section_json(section)
    assert data["spearman_ci"] == [None, None] and data["n_bootstrap_undefined"] == 129
    assert data["ci_undefined_reason"] == section.ci_undefined_reason


def test_a_few_undefined_resamples_are_counted_beside_the_interval():
    freqs = np.zeros(60)
    freqs[:5] = [50, 40, 30, 20, 10]
    norms = np.round(1 + np.random.default_rng(0).uniform(0, 0.1, 60) + np.log1p(freqs), 3)
    section, notes = frequency_norm_stats(norms, freqs, n_bootstrap=1000, seed=0)
    # scipy.stats.bootstrap's replicates, 6 of them NaN, the rest's 2.5/97.5% quantiles
    # (tests/test_correlations.py checks them bit for bit).
    assert section.spearman_ci == pytest.approx((0.22204094066921776, 0.6216700884955415), rel=1e-15)
    assert section.n_bootstrap_undefined == 6 and section.ci_undefined_reason is None and notes == []
    # The verdict's "CI excludes 0" reads the interval of the defined resamples: a moderate
    # rise (it read [-1, 1], "includes 0", severity none, when NaN was clamped).
    from auditor.result import AuditResult, Inputs, Verdict
    from auditor.verdict import decide_verdict

    verdict = decide_verdict(AuditResult(inputs=Inputs("t.npy", "log", "item", None, 60, 8, 150),
                                         frequency_norm=section, verdict=Verdict(False, "none", "")))
    assert (verdict.bias_detected, verdict.severity) == (True, "moderate")
    assert "Spearman ρ = 0.48, 95% CI [0.22, 0.62], over 60 items" in verdict.summary


def section_json(section):
    """The section as the JSON report writes it (``AuditResult.to_dict``)."""
    from auditor.plain import asdict
    from auditor.result import json_safe

    return json_safe(asdict(section))


def _unit_rows(dtype, dim: int, n: int = 200, *, own_dtype: bool = False) -> np.ndarray:
    """Random directions normalised to norm 1: in float64 then stored as ``dtype``, or
    (``own_dtype``) in ``dtype`` itself, as ``F.normalize`` does on a float32 tensor."""
    rows = np.random.default_rng(dim).normal(size=(n, dim))
    if own_dtype:
        rows = rows.astype(dtype)
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(dtype)


def test_the_rounding_tolerance_is_two_sqrt_dim_epsilons_of_a_float_the_norms_are_summed_in():
    assert NormPrecision("float32", 16).tolerance == 8 * 2.0**-23  # 2 x 4 x float32's eps
    assert NormPrecision("float64", 64).tolerance == 16 * 2.0**-52
    assert NormPrecision("int8", 16).tolerance == 0.0  # integers: only exact ties count
    assert norm_precision(np.zeros((3, 5), dtype=np.float16)) == NormPrecision("float16", 5)


@pytest.mark.parametrize("dtype, name", [(np.float32, "float32"), (np.float64, "float64")])
@pytest.mark.parametrize("dim, own_dtype", [(16, False), (16, True), (2, True), (300, True)])
def test_norms_equal_to_within_rounding_are_a_constant_table(dtype, name, dim, own_dtype):
    table = _unit_rows(dtype, dim, own_dtype=own_dtype)
    norms, freqs = item_norms(table), np.random.default_rng(1).zipf(1.5, 200)
    assert 0 < np.ptp(norms)  # not exactly equal: rounding noise, which ranks with frequency by chance
    section, notes = frequency_norm_stats(norms, freqs, n_bootstrap=50, precision=norm_precision(table))
    assert np.isnan(section.spearman) and np.isnan(section.spearman_ci).all() and section.n_bootstrap == 0
    assert section.undefined_reason is not None
    assert section.undefined_reason.startswith(f"every item has the same norm to within {name} rounding (the norms span")
    assert section.undefined_reason.endswith(": the correlation is undefined")
    assert f"every item has the same norm to within {name} rounding: correlations are undefined (reported as null)" in notes
    # Without the table's precision (a library caller), the noise is measured as before.
    assert np.isfinite(frequency_norm_stats(norms, freqs, n_bootstrap=0)[0].spearman)


@pytest.mark.parametrize("dim, own_dtype", [(16, False), (16, True), (300, True)])
def test_the_slope_of_norms_equal_to_within_rounding_is_exactly_zero(dim, own_dtype):
    """QA N2: a float32 unit-norm table (ρ undefined: one norm to within rounding) gave a
    log-log slope of rounding noise (5.98e-10), which diff read as a base and ranked the
    slope of a table with a small real growth at +144,240,278%. A constant's slope is 0."""
    table = _unit_rows(np.float32, dim, own_dtype=own_dtype)
    norms, freqs = item_norms(table), np.random.default_rng(1).zipf(1.5, 200).astype(np.float64)
    warm = freqs > 0
    noise = np.polyfit(np.log(freqs[warm]), np.log(norms[warm]), 1)[0]
    assert noise != 0 and abs(noise) < 1e-6  # what the fit alone returns: rounding noise
    with_precision, notes = frequency_norm_stats(norms, freqs, n_bootstrap=0, precision=norm_precision(table))
    assert with_precision.loglog_slope == 0.0
    assert loglog_slope(freqs[warm], np.full(int(warm.sum()), 1.7)) == 0.0  # equal norms: not 7e-18
    assert loglog_slope(freqs[warm], norms[warm], norm_precision(table)) == 0.0
    # every other figure is what it was; without the precision the slope is the fit, as before
    without = frequency_norm_stats(norms, freqs, n_bootstrap=0)[0]
    assert without.loglog_slope == pytest.approx(noise, rel=1e-9)
    assert with_precision.deciles == without.deciles and with_precision.warm_norm_median == without.warm_norm_median
    # a real growth of 0.001 per log-frequency (1e-3 of the norm over this log) is measured
    grown = (table.astype(np.float64) * (1 + freqs)[:, None] ** 0.001).astype(np.float32)
    slope = frequency_norm_stats(item_norms(grown), freqs, n_bootstrap=0, precision=norm_precision(grown))[0].loglog_slope
    expected = np.polyfit(np.log(freqs), np.log(item_norms(grown)), 1)[0]
    assert slope == pytest.approx(expected, rel=1e-12) and 0.0005 < slope < 0.001


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_real_spread_of_a_thousandth_is_measured(dtype):
    freqs = np.random.default_rng(1).permutation(200) + 1.0
    # Norms 1 to 1 + 1e-3 in frequency order, steps of 5e-6 (40 float32 eps): ρ = 1 by hand.
    scale = 1 + 1e-3 * (freqs - 1) / 199
    table = (_unit_rows(np.float64, 16) * scale[:, None]).astype(dtype)
    norms = item_norms(table)
    section, _ = frequency_norm_stats(norms, freqs, n_bootstrap=0, precision=norm_precision(table))
    assert section.undefined_reason is None
    assert section.spearman == pytest.approx(sps.spearmanr(freqs, norms).statistic, rel=1e-12)
    assert section.spearman == 1.0


def test_a_float64_spread_below_float32_rounding_is_still_measured_in_float64():
    # 1e-12 of the norm: noise for float32 (tolerance 9.5e-7), a real spread for float64 (3.6e-15).
    freqs = np.arange(1.0, 201.0)
    table = _unit_rows(np.float64, 16) * (1 + 1e-12 * np.arange(200))[:, None]
    section, _ = frequency_norm_stats(item_norms(table), freqs, n_bootstrap=0, precision=NormPrecision("float64", 16))
    assert section.spearman == pytest.approx(1.0)
    assert undefined_reason(item_norms(table), freqs, NormPrecision("float32", 16)) is not None


def test_the_audit_reads_the_tables_precision(tmp_path):
    # The QA case: a float32 table of unit rows against a Zipf log. Its norms span about
    # 5e-8 of 1, and before this they gave "Spearman ρ = 0.25, 95% CI [0.12, 0.38]".
    import pyarrow as pa
    import pyarrow.parquet as pq

    from auditor.audit import run_audit
    from auditor.config import AuditConfig

    rng = np.random.default_rng(1)
    items = rng.choice(200, size=5000, p=(p := 1 / np.arange(1, 201)) / p.sum())
    pq.write_table(pa.table({"user_id": rng.integers(0, 150, 5000), "item_id": items}), tmp_path / "log.parquet")
    np.save(tmp_path / "unit.npy", _unit_rows(np.float32, 16))
    result = run_audit(AuditConfig(model=tmp_path / "unit.npy", interactions=tmp_path / "log.parquet",
                                   probes=False, retrieval=False, bootstrap=100))  # fmt: skip
    fn = result.frequency_norm
    assert fn is not None and np.isnan(fn.spearman)
    assert "same norm to within float32 rounding" in (fn.undefined_reason or "")
    assert result.verdict.severity == "none" and "correlation is undefined" in result.verdict.summary
