"""QA diffapi F4: the diff lists every name a gate of either report's settings accepts, from
the one source ``flat_metrics_from_report`` fills from (``flat.gateable_entries``): a name
neither report measured (``ndcg_dot@10`` without a holdout) is ``not_measured``, never
missing (``ReportDiff.metric`` raised KeyError while ``--fail-on`` accepted the name)."""

from __future__ import annotations

from typing import Any

from auditor.diff import diff_reports, flat_metrics_from_report


def report(spearman: float) -> dict[str, Any]:
    return {"schema_version": 1, "tool": {"name": "popaudit", "version": "0.1.0"}, "inputs": {},
            "settings": {"ks": [10], "alphas": [0.5]},
            "frequency_norm": {"spearman": spearman, "pearson_log": 0.4, "kendall": 0.3, "loglog_slope": 0.2},
            "retrieval": {"at": {"10": {"dot": {"arp": 4.0}, "cosine": {"arp": 2.0}}}},
            "verdict": {"severity": "low", "bias_detected": True}}  # fmt: skip


def test_every_gateable_name_has_an_entry() -> None:
    base, new = report(0.5), report(0.25)
    diff = diff_reports(base, new)
    names = [m["name"] for m in diff.to_dict()["metrics"]]
    assert len(names) == len(set(names))
    assert set(names) == set(flat_metrics_from_report(base)) == set(flat_metrics_from_report(new))
    # Independently: 14 standalone names; at K=10, 21 list measures (8 built-in, 3 x 3 per user group,
    # 4 more of the groups) and 4 accuracy measures times 6 scorings (dot, cosine, popular, alpha_0.5,
    # served, ratio), the dot/cosine overlap, the index recall and 3 served overlaps.
    assert len(names) == 14 + (8 + 3 * 3 + 4 + 4) * 6 + 1 + 1 + 3
    for name in ("ndcg_dot@10", "recall@10", "arp_served@10", "recall_alpha_0.5@10", "training_spearman"):
        change = diff.metric(name)
        assert (change.status, change.base, change.new, change.delta) == ("not_measured", None, None, None), name
    spearman = diff.metric("spearman")
    assert (spearman.status, spearman.delta, spearman.relative) == ("compared", 0.25 - 0.5, (0.25 - 0.5) / 0.5)
    assert diff.metric("arp_ratio@10").status == "compared" and diff.metric("arp_ratio@10").new == 4.0 / 2.0
