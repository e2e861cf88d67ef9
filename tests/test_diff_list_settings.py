"""`popaudit diff` of two served-lists audits: the group cut-offs are recorded and compared
as a model's audit records them (QA finding F1 of the harms review)."""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from auditor.audit import run_audit
from auditor.config import AuditConfig
from auditor.diff import diff_reports, evaluate_diff_gates, parse_diff_gates
from auditor.diff.directions import depends_on_popularity, direction, rule_for
from auditor.errors import UnmeasuredGateError
from auditor.flat import FlatEntry

DATA = Path(__file__).resolve().parent / "data" / "served_lists"


def _lists(**options: Any) -> dict[str, Any]:
    config = AuditConfig(model=None, interactions=DATA / "train.csv", ks=(5,),
                         recommendations=DATA / "recs.csv", **options)
    return run_audit(config).to_dict()


def test_a_lists_only_report_records_the_group_cut_offs() -> None:
    report = _lists(niche_fraction=0.3, short_head_mass=0.5)
    groups = report["settings"]["groups"]
    assert groups["niche_fraction"] == 0.3 and groups["short_head_mass"] == 0.5 and groups["popular_percent"] == 20.0
    definition = report["retrieval"]["definitions"]["popularity_groups"]
    assert "lowest 30% niche" in definition and "holding 50% of the mass" in definition


def test_diff_does_not_compare_group_measures_across_cut_offs() -> None:
    base, new = _lists(), _lists(niche_fraction=0.3, short_head_mass=0.5)
    diff = diff_reports(base, new)
    assert [s.setting for s in diff.settings] == ["retrieval.definitions.popularity_groups"]
    for name in ("aclt_served@5", "pop_rsp_served@5", "gap_delta_niche_served@5", "miscalibration_niche_served@5"):
        assert diff.metric(name).status == "incomparable", name
        assert diff.metric(name).direction == "unknown"
    # The same lists: every figure the cut-offs leave alone is compared, and unchanged.
    for name in ("head_share_1pct_served@5", "arp_served@5", "aplt_served@5", "gini_served@5", "coverage_served@5"):
        assert (diff.metric(name).status, diff.metric(name).delta) == ("compared", 0.0), name
    gates = parse_diff_gates(["aclt_served@5.delta<0"], ["aclt_served@5"])
    with pytest.raises(UnmeasuredGateError, match="popularity_groups differs"):
        evaluate_diff_gates(gates, diff)
    same = diff_reports(base, _lists())
    assert not same.settings and same.metric("aclt_served@5").status == "compared"


def test_model_and_lists_audits_record_the_same_list_settings() -> None:
    lists = _lists(popularity="users", blockbuster_fraction=0.1)
    config = AuditConfig(model=None, interactions=DATA / "train.csv", recommendations=DATA / "recs.csv",
                         popularity="users", blockbuster_fraction=0.1)
    for key, value in config.list_settings().items():
        assert lists["settings"][key] == value, key
    assert lists["settings"]["groups"]["blockbuster_fraction"] == 0.1


def test_the_served_lists_overlaps_have_rules_of_their_own() -> None:
    """QA F6: overlap_served_dot|cosine|popular are built-in names: neutral, not a plugin's
    unknown; only the overlap with the most-popular list depends on the popularity definition."""
    for name, popular in (("overlap_served_dot", False), ("overlap_served_cosine", False),
                          ("overlap_served_popular", True)):
        entry = FlatEntry(0.5, "retrieval", name, None, 10)
        assert rule_for(entry).patterns != () and direction(entry, 0.1) == "neutral", name
        assert depends_on_popularity(entry) is popular, name
    diff = diff_reports(_lists(), _lists(popularity="users"))
    change = diff.metric("overlap_served_popular@5")
    assert (change.status, change.direction) == ("incomparable", "unknown")
    same = diff_reports(_lists(), _lists())
    assert same.metric("overlap_served_popular@5").direction == "unchanged"


def test_lists_turned_tail_only_are_a_larger_gap_not_more_bias(tmp_path: Path) -> None:
    """QA F5: every user served the 5 least popular items of the log. Their short-head share is
    0, so PopRSP = |a − b| / (a + b) = 1, as for head-only lists: the diff calls that a larger
    gap and a more concentrated exposure, and the head share's fall less bias."""
    with open(DATA / "train.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    counts = Counter(row["item_id"] for row in rows)
    tail = sorted(counts, key=lambda i: (counts[i], i))[:5]
    users = sorted({row["user_id"] for row in rows})
    recs = tmp_path / "tail.csv"
    recs.write_text("user_id,item_id,rank\n" + "".join(f"{u},{i},{r}\n" for u in users
                                                       for r, i in enumerate(tail, start=1)))
    base = _lists()
    new = run_audit(AuditConfig(model=None, interactions=DATA / "train.csv", ks=(5,), recommendations=recs)).to_dict()
    assert new["retrieval"]["at"]["5"]["served"]["pop_rsp"] == pytest.approx(1.0)
    diff = diff_reports(base, new)
    assert diff.metric("pop_rsp_served@5").direction == "larger gap"
    assert diff.metric("gini_served@5").direction == "more concentrated"
    assert diff.metric("aplt_served@5").direction == "less bias"
    assert all(c.direction != "more bias" for c in diff.metrics if c.name.startswith(("pop_rsp", "pop_reo", "gini",
                                                                                      "coverage", "miscalibration")))
