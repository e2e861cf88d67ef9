"""Coverage of the Spearman ρ confidence interval on catalogues above BOOTSTRAP_MAX_ITEMS.

The large-table interval (Fisher z around the full-sample ρ, standard error bootstrapped
on a 20,000-item subsample and scaled by sqrt(m/n)) is checked by simulation against a
known population ρ, and on a million items for the reported failure (ρ ≈ 0, a CI that
excluded both ρ and 0) and near ±1.

The simulations use 200 bootstrap resamples per interval instead of the default 1000:
the resample count only sets the Monte-Carlo error of the standard error (about
1/sqrt(2 x 200) = 5% relative), which moves the coverage of a 95% interval by well
under one percentage point, while the properties under test (the centre, the
sqrt(m/n) scaling, the Fisher-z shape) do not depend on it. This keeps each simulation
near 20 s on two cores.
"""

import numpy as np
import pytest
from scipy import stats as sps

from auditor.metrics.spearman_ci import BOOTSTRAP_MAX_ITEMS, spearman_ci

N_TABLES = 200
N_ITEMS = 100_000
SIM_RESAMPLES = 200
# Binomial tolerance for 200 intervals of nominal 95%: sd = sqrt(.95 x .05 / 200) = 1.5 points.
COVERAGE_RANGE = (0.91, 0.985)


def zipf_frequencies(rng: np.random.Generator, n: int, cold: float = 0.4) -> np.ndarray:
    """Training frequencies with realistic ties: Zipf counts and a share of cold items."""
    freqs = rng.zipf(1.6, n).astype(np.float64)
    freqs[rng.random(n) < cold] = 0.0
    return freqs


@pytest.mark.slow
def test_coverage_of_zero_rho_with_tied_zipf_frequencies() -> None:
    rng = np.random.default_rng(2024)
    covered = 0
    for table in range(N_TABLES):
        freqs = zipf_frequencies(rng, N_ITEMS)
        norms = rng.lognormal(0.0, 0.3, N_ITEMS)  # independent of frequency: ρ = 0
        interval = spearman_ci(freqs, norms, n_bootstrap=SIM_RESAMPLES, seed=table)
        covered += interval.low <= 0.0 <= interval.high
    coverage = covered / N_TABLES
    print(f"coverage of rho=0: {coverage:.3f}")
    assert COVERAGE_RANGE[0] <= coverage <= COVERAGE_RANGE[1], coverage


@pytest.mark.slow
@pytest.mark.parametrize(
    ("transform", "truth_range"), [("moderate", (0.4, 0.7)), ("near_minus_one", (-0.97, -0.93))]
)
def test_coverage_of_known_nonzero_rho(transform: str, truth_range: tuple[float, float]) -> None:
    # A finite population of 2M items (Zipf frequencies, norms a noisy monotone function
    # of them); tables are samples of it with replacement. The population's ρ with
    # average ranks is exactly the limit the sample ρ estimates (average rank / N is
    # the mid-distribution function), so it is the known truth, ties included.
    rng = np.random.default_rng(7)
    population = 2_000_000
    pop_freqs = zipf_frequencies(rng, population)
    if transform == "moderate":
        pop_norms = pop_freqs**0.25 + rng.normal(0.0, 1.5, population)
    else:  # close to -1: checks the Fisher-z shape near the boundary
        pop_norms = -np.log1p(pop_freqs) + rng.normal(0.0, 0.1, population)
    truth = float(sps.spearmanr(pop_freqs, pop_norms).statistic)
    assert truth_range[0] < truth < truth_range[1]
    covered = 0
    for table in range(N_TABLES):
        rows = rng.integers(0, population, N_ITEMS)
        interval = spearman_ci(pop_freqs[rows], pop_norms[rows], n_bootstrap=SIM_RESAMPLES, seed=table)
        covered += interval.low <= truth <= interval.high
    coverage = covered / N_TABLES
    print(f"coverage of rho={truth:.4f}: {coverage:.3f}")
    assert COVERAGE_RANGE[0] <= coverage <= COVERAGE_RANGE[1], coverage


def _million(seed: int) -> tuple[np.random.Generator, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng, zipf_frequencies(rng, 1_000_000)


def test_million_items_with_rho_near_zero_get_a_ci_around_rho() -> None:
    # The reported failure: ρ = -0.0005 came with a CI of [-0.0084, -0.0045].
    rng, freqs = _million(1)
    norms = rng.normal(1.0, 0.2, freqs.size)
    rho = float(sps.spearmanr(freqs, norms).statistic)
    interval = spearman_ci(freqs, norms)
    assert interval.low <= rho <= interval.high
    assert interval.low < 0.0 < interval.high
    # Under independence sd(ρ) = 1/sqrt(n - 1) exactly, so the 95% half-width is
    # 1.96e-3 in ρ (and in z, ρ being near 0); the bootstrap SE is within a few percent.
    assert (interval.high - interval.low) / 2 == pytest.approx(1.96 / np.sqrt(freqs.size), rel=0.1)
    # Symmetric in Fisher's z around the full-sample ρ.
    z = np.arctanh([interval.low, rho, interval.high])
    assert z[1] - z[0] == pytest.approx(z[2] - z[1], rel=1e-9)
    assert f"{BOOTSTRAP_MAX_ITEMS:,}-item subsample" in interval.method
    assert "Fisher-z" in interval.method and "1000-resample" in interval.method


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_million_items_with_rho_near_one_stay_inside_the_bounds(sign: float) -> None:
    rng, freqs = _million(2)
    norms = sign * (np.log1p(freqs) + rng.normal(0.0, 0.01, freqs.size))
    rho = float(sps.spearmanr(freqs, norms).statistic)
    assert abs(rho) > 0.95
    lo, hi, _, resamples = spearman_ci(freqs, norms, rho=rho)[:4]
    assert resamples == 1000
    assert -1.0 < lo <= rho <= hi < 1.0
    assert 0 < hi - lo < 0.01


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_exactly_monotone_million_gives_the_point(sign: float) -> None:
    freqs = np.arange(1_000_000, dtype=np.float64)
    interval = spearman_ci(freqs, sign * np.sqrt(freqs))
    assert (interval.low, interval.high) == (sign, sign)
    assert "|ρ| = 1" in interval.method and interval.n_resamples == 0


def test_ci_is_seeded_and_does_not_depend_on_the_thread_count(monkeypatch: pytest.MonkeyPatch) -> None:
    import auditor.metrics.spearman_ci as fn

    rng = np.random.default_rng(3)
    freqs = zipf_frequencies(rng, 50_000)
    norms = freqs**0.2 + rng.normal(0.0, 0.5, freqs.size)
    first = spearman_ci(freqs, norms, n_bootstrap=300, seed=5)
    monkeypatch.setattr(fn, "MAX_BOOTSTRAP_THREADS", 1)
    assert spearman_ci(freqs, norms, n_bootstrap=300, seed=5) == first
    assert spearman_ci(freqs, norms, n_bootstrap=300, seed=6) != first


def test_subsample_with_constant_frequencies_falls_back_to_bonett_wright() -> None:
    # 1M items, 50 of them warm: a 20,000-item subsample is very likely all cold, so
    # its bootstrap says nothing; the interval uses the Bonett–Wright SE at full n.
    rng = np.random.default_rng(4)
    freqs = np.zeros(1_000_000)
    warm = rng.choice(freqs.size, 50, replace=False)
    freqs[warm] = rng.integers(1, 100, 50)
    norms = rng.normal(1.0, 0.1, freqs.size)
    norms[warm] += 1.0
    rho = float(sps.spearmanr(freqs, norms).statistic)
    interval = spearman_ci(freqs, norms, rho=rho, seed=0)
    assert "Bonett–Wright" in interval.method and interval.n_resamples == 0
    se = np.sqrt((1 + rho**2 / 2) / (freqs.size - 3))
    assert np.arctanh(interval.high) - np.arctanh(rho) == pytest.approx(1.959964 * se, rel=1e-5)
