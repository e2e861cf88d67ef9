"""Which K the verdict and headline quote (docs/report.md 'Severity'): the worst served K
decides and is quoted; the smallest served K (what a user sees first) is quoted beside
it when it is another K, and never changes the severity."""

from __future__ import annotations

from dataclasses import replace

from auditor.report.content import headline_parts
from auditor.result import AuditResult, CutoffMeasures, FrequencyNorm, Inputs, ListMeasures, Retrieval, Verdict
from report_samples import builtin_measures
from auditor.harm import first_seen_skew, quoted_cutoff
from auditor.verdict import decide_verdict


def _measures(head: float) -> ListMeasures:
    return builtin_measures(head, 0.5, 0.6, 100.0, 0.1, 0.8, 0.2, 3.0)


def _result(n_items: int, shares: dict[int, tuple[float, float]]) -> AuditResult:
    at = {k: CutoffMeasures(_measures(d), _measures(c), _measures(1.0), 0.3) for k, (d, c) in shares.items()}
    fn = FrequencyNorm(spearman=0.5, spearman_ci=(0.4, 0.6), spearman_p=1e-9, pearson_log=0.5, kendall=0.35,
                       loglog_slope=0.2, n_items=n_items, n_cold=0, deciles=[], n_bootstrap=100)
    result = AuditResult(
        inputs=Inputs("m.pt", "log", "item", "user", n_items, 32, 100_000), frequency_norm=fn,
        verdict=Verdict(False, "none", ""), retrieval=Retrieval(n_queries=943, index="exact", at=at),
    )
    return replace(result, verdict=decide_verdict(result))


def test_ml100k_quotes_the_k_a_user_is_served() -> None:
    # The ML-100K figures (1,682 items): K=10 65.0% vs 2.0% (32.5x), K=100
    # 27.3% vs 10.0% (2.73x). Both are served sizes (<= 168); both are "high", and the
    # larger ratio, K=10, is quoted (the old rule, largest K <= 10%, quoted K=100).
    result = _result(1682, {10: (0.65, 0.02), 100: (0.273, 0.10)})
    assert quoted_cutoff(result) == 10 and result.verdict.quoted_k == 10
    assert "32.50× the slots cosine retrieval does at K=10 (65.0% vs 2.0%)" in result.verdict.summary
    assert first_seen_skew(result) is None  # K=10 is also the first list a user sees
    assert "first slots" not in result.verdict.summary


def test_the_first_seen_k_is_quoted_beside_a_worse_larger_k() -> None:
    # K=10: 1.2x (+2 points, low band); K=100: 3x (+20 points, high). K=100 decides the
    # severity and is quoted; K=10, what a user sees first, is quoted beside it.
    result = _result(2000, {10: (0.12, 0.10), 100: (0.30, 0.10)})
    v = result.verdict
    assert v.quoted_k == 100 and v.severity == "high"
    assert "3.00× the slots cosine retrieval does at K=100 (30.0% vs 10.0%)" in v.summary
    assert "(at K=10, the first slots a user sees: 1.20×, 12.0% vs 10.0%)" in v.summary
    _phrase, evidence = headline_parts(result)
    assert "at K=100 the top-1% items fill 30.0% of dot-product slots vs 10.0% under cosine (3.00×" in evidence
    assert "at K=10, the first slots a user sees: 12.0% vs 10.0% (1.20×)" in evidence


def test_a_k_beyond_the_served_share_is_never_quoted() -> None:
    # 500 items: K=100 is 20% of the catalogue, not a list a user is served.
    result = _result(500, {10: (0.12, 0.10), 100: (0.90, 0.10)})
    assert result.verdict.quoted_k == 10 and result.verdict.severity == "low"
    assert first_seen_skew(result) is None and "K=100" not in result.verdict.summary
