"""The diff core (auditor/diff): flat names read back from JSON reports, changes with their
directions, comparability, and gates on changes; on before/after ``mitigate``, on two
``retrain`` runs with different learning rates, and on incomparable pairs."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from auditor.audit import run_audit
from auditor.cli import cli
from auditor.config import AuditConfig
from auditor.diff import diff_reports, evaluate_diff_gates, flat_metrics_from_report, parse_diff_gates
from auditor.diff.directions import direction
from auditor.flat import FlatEntry
from auditor.errors import GateError, ReportError, UnmeasuredGateError
from auditor.mitigation.run import MitigateConfig, mitigate
from auditor.report.diff_doc import diff_document
from auditor.result import AuditResult

SAMPLE = Path(__file__).resolve().parent.parent / "sample_data"
SMALL = ["--n-users", "100", "--n-items", "120", "--n-interactions", "3000", "--batch-size", "128"]


def audit(model: Path, **options: Any) -> AuditResult:
    options = {"ks": (10, 50), "probes": False, "bootstrap": 0, **options}
    return run_audit(AuditConfig(model=model, **options))


def as_json(result: AuditResult) -> dict[str, Any]:
    """The report as written to disk and read back."""
    return json.loads(json.dumps(result.to_dict(), allow_nan=False))


@pytest.fixture(scope="module")
def mitigated(tmp_path_factory: pytest.TempPathFactory) -> tuple[AuditResult, AuditResult]:
    out = tmp_path_factory.mktemp("mitigate") / "fixed.pt"
    mitigate(MitigateConfig(model=SAMPLE / "biased.pt", output=out, alpha=0.5))
    return audit(SAMPLE / "biased.pt"), audit(out)


@pytest.fixture(scope="module")
def retrained(tmp_path_factory: pytest.TempPathFactory) -> tuple[AuditResult, AuditResult]:
    folder = tmp_path_factory.mktemp("retrain")
    results = []
    for lr in ("10", "0.1"):
        out = folder / f"lr{lr}.pt"
        ran = CliRunner().invoke(cli, ["retrain", *SMALL, "--epochs", "3", "--lr", lr, "--holdout-fraction", "0.2",
                                       "-o", str(out)])  # fmt: skip
        assert ran.exit_code == 0, ran.output
        results.append(audit(out))
    return results[0], results[1]


def test_flat_names_from_json_equal_the_results(mitigated: tuple[AuditResult, AuditResult],
                                                retrained: tuple[AuditResult, AuditResult]) -> None:
    for result in (*mitigated, *retrained):
        assert flat_metrics_from_report(as_json(result)) == result.flat_metrics()
    assert retrained[0].accuracy is not None  # accuracy names (and their ratios) are covered too
    assert "ndcg_ratio@10" in flat_metrics_from_report(as_json(retrained[0]))


def test_mitigate_before_after(mitigated: tuple[AuditResult, AuditResult]) -> None:
    before, after = mitigated
    diff = diff_reports(as_json(before), as_json(after))
    assert diff.settings == () and len(diff.notes) == 1  # another model file, said (docs/diff.md)
    assert diff.notes[0].startswith("inputs.model differs (") and diff.notes[0].endswith("fixed.pt): another model")
    head = diff.metric("head_share_1pct_dot@10")
    # Plain dot serving of the rescaled table ranks as alpha_0.5 of the original.
    assert head.new == pytest.approx(before.flat_metrics()["head_share_1pct_alpha_0.5@10"])
    assert head.delta == pytest.approx(head.new - head.base) and head.delta < 0
    assert head.relative == pytest.approx(head.delta / head.base)
    assert head.direction == "less bias" and head.status == "compared"
    # Rescaling each row by a power of its norm keeps directions (cosine) and the norm order (ρ).
    assert diff.metric("head_share_1pct_cosine@10").direction == "unchanged"
    assert diff.metric("spearman").delta == 0 and diff.metric("loglog_slope").delta < 0
    assert diff.metric("loglog_slope").direction == "less bias"
    assert diff.metric("aplt_dot@10").direction in {"less bias", "unchanged"}
    assert diff.metric("head_share_1pct_popular@10").direction == "unchanged"
    assert all(c.direction == "neutral" for c in diff.metrics if c.name.startswith("overlap") and c.delta)
    assert diff.verdict.base_severity == before.verdict.severity and diff.verdict.new_severity == after.verdict.severity
    assert not any(c.changed for c in diff.conditions)
    json.dumps(diff.to_dict(), allow_nan=False)


def test_delta_gates(mitigated: tuple[AuditResult, AuditResult]) -> None:
    diff = diff_reports(as_json(mitigated[0]), as_json(mitigated[1]))
    names = list(flat_metrics_from_report(as_json(mitigated[1])))
    gates = parse_diff_gates(["head_share_1pct_dot@10.delta<0", "head_share_1pct_dot@10.delta>0.01",
                              "head_share_1pct_dot@10.rel<-0.05", "spearman>0.5"], names)  # fmt: skip
    outcomes = evaluate_diff_gates(gates, diff)
    assert [o.tripped for o in outcomes] == [True, False, diff.metric("head_share_1pct_dot@10").relative < -0.05,
                                             True]  # fmt: skip
    assert "head_share_1pct_dot@10.delta<0: " in outcomes[0].describe()
    with pytest.raises(GateError, match=r"unknown metric 'head_share_1pct_dot@10\.delt'"):
        parse_diff_gates(["head_share_1pct_dot@10.delt>0"], names)
    assert parse_diff_gates(["ndcg_alpha_0.5@10.rel<0"], ["ndcg_alpha_0.5@10"])[0].metric == "ndcg_alpha_0.5@10.rel"


def test_a_relative_change_from_an_infinite_ratio_says_why_it_has_none(
    mitigated: tuple[AuditResult, AuditResult],
) -> None:
    """The base's cosine served the head nothing (its dot/cosine ratio is +inf): the ratio's
    .rel gate cannot be evaluated and says the base is infinite, not "not measured"; its
    .delta gate and the new value's gate evaluate."""
    base, new = as_json(mitigated[0]), as_json(mitigated[1])
    base["retrieval"]["at"]["10"]["cosine"]["head_share_1pct"] = 0.0
    diff = diff_reports(base, new)
    assert diff.metric("head_share_1pct_ratio@10").base == float("inf")
    names = list(flat_metrics_from_report(new))
    rel = parse_diff_gates(["head_share_1pct_ratio@10.rel<0"], names)
    with pytest.raises(UnmeasuredGateError, match=r"relative change undefined: the base value is infinite"):
        evaluate_diff_gates(rel, diff)
    delta = parse_diff_gates(["head_share_1pct_ratio@10.delta<0"], names)
    assert [o.tripped for o in evaluate_diff_gates(delta, diff)] == [True]


def test_an_infinite_ratio_on_both_sides_is_no_change(mitigated: tuple[AuditResult, AuditResult]) -> None:
    """Both cosines served the head nothing: the ratio is +inf on both sides, which is no
    change: delta 0 and relative 0 (the relative used to be missing beside delta 0)."""
    base, new = as_json(mitigated[0]), as_json(mitigated[1])
    for report in (base, new):
        report["retrieval"]["at"]["10"]["cosine"]["head_share_1pct"] = 0.0
    ratio = diff_reports(base, new).metric("head_share_1pct_ratio@10")
    assert (ratio.base, ratio.new, ratio.delta, ratio.relative) == (float("inf"), float("inf"), 0.0, 0.0)
    assert ratio.direction == "unchanged"


def test_two_retrain_runs(retrained: tuple[AuditResult, AuditResult]) -> None:
    high, low = retrained
    diff = diff_reports(as_json(high), as_json(low))
    assert diff.settings == ()  # the same data, split and options: everything compares
    rho = diff.metric("spearman")
    assert rho.delta == pytest.approx(low.flat_metrics()["spearman"] - high.flat_metrics()["spearman"])
    assert rho.direction == ("less bias" if rho.delta < 0 else "more bias")
    ndcg = diff.metric("ndcg_dot@10")
    assert ndcg.status == "compared" and ndcg.delta is not None
    assert ndcg.direction == ("more accuracy" if ndcg.delta > 0 else "less accuracy" if ndcg.delta < 0 else "unchanged")
    assert diff.metric("ndcg_ratio@10").direction in {"neutral", "unchanged"}  # which scoring wins, not better
    assert diff.metric("ndcg_popular@10").direction == "unchanged"  # the baseline: same data, same lists
    assert {c.id for c in diff.conditions} == {"C1", "C2", "C3", "C4", "C5"}


def test_different_cutoffs_are_listed_not_compared(mitigated: tuple[AuditResult, AuditResult]) -> None:
    narrow = audit(SAMPLE / "biased.pt", ks=(10,))
    diff = diff_reports(as_json(narrow), as_json(mitigated[1]))
    assert diff.metric("gini_dot@50").status == "only_new" and diff.metric("gini_dot@50").delta is None
    assert diff.metric("gini_dot@10").status == "compared"
    assert any("cut-offs differ (base K = 10, new K = 10, 50)" in note for note in diff.notes)
    gates = parse_diff_gates(["gini_dot@50.delta>0"], flat_metrics_from_report(as_json(mitigated[1])))
    with pytest.raises(UnmeasuredGateError, match=r"gini_dot@50.delta>0"):
        evaluate_diff_gates(gates, diff)


def test_a_severity_graded_at_a_k_the_other_report_lacks_has_no_direction(
        mitigated: tuple[AuditResult, AuditResult]) -> None:
    """The same model audited with another -k: its severity at K=5 (which the base never
    measured) is not "more bias", and the key figures are read at the shared K=10."""
    base, other_ks = as_json(mitigated[0]), as_json(audit(SAMPLE / "biased.pt", ks=(5, 10)))
    assert (base["verdict"]["quoted_k"], other_ks["verdict"]["quoted_k"]) == (10, 5)
    assert base["verdict"]["severity"] != other_ks["verdict"]["severity"]  # a direction would have been claimed
    for diff, side, other in ((diff_reports(base, other_ks), "new", "base"), (diff_reports(other_ks, base), "base", "new")):
        assert diff.verdict.direction == "not comparable" and diff.verdict.changed
        assert diff.verdict.reason == (f"cut-offs differ, and the {side} report's severity was graded at K=5, "
                                       f"which the {other} did not measure")  # fmt: skip
        doc = diff_document(diff.to_dict())
        assert "(not comparable: cut-offs differ" in doc.lead[0].text  # type: ignore[union-attr]
        key = next(s for s in doc.sections if s.key == "key")
        assert key.title == "Key figures at K=10"
    assert diff_reports(base, base).verdict.reason is None
    narrow = diff_reports(as_json(audit(SAMPLE / "biased.pt", ks=(10,))), base)  # K=50 only in one: graded at 10
    assert narrow.verdict.direction == "unchanged" and narrow.verdict.reason is None


def test_a_diff_gates_on_the_verdicts_grade_as_the_verdict_compares_them(
        mitigated: tuple[AuditResult, AuditResult]) -> None:
    """severity_level is kept out of the figures (the verdict change shows it) but gates
    read it: the new value and its change, and "not comparable" with the verdicts' reason
    where they judge different cut-offs (it always failed as "nothing graded the severity")."""
    base = as_json(mitigated[0])
    names = flat_metrics_from_report(base)
    diff = diff_reports(base, base)
    level = float(["none", "low", "moderate", "high"].index(base["verdict"]["severity"]))
    [value, change] = evaluate_diff_gates(parse_diff_gates([f"severity_level>={level}", "severity_level.delta>0"],
                                                           names), diff)
    assert value.tripped and value.value == level and not change.tripped and change.value == 0
    assert all(m.name != "severity_level" for m in diff.metrics)  # not a figure of the diff
    other_ks = as_json(audit(SAMPLE / "biased.pt", ks=(5, 10)))
    with pytest.raises(UnmeasuredGateError, match=r"severity_level.delta>0: not comparable: the verdicts: cut-offs "
                                                  r"differ, and the new report's severity was graded at K=5"):
        evaluate_diff_gates(parse_diff_gates(["severity_level.delta>0"], names), diff_reports(base, other_ks))


def test_a_different_popularity_flags_the_figures_that_depend_on_it() -> None:
    log = SAMPLE / "interactions.parquet"
    by_users = audit(SAMPLE / "biased.pt", interactions=log, popularity="users")
    diff = diff_reports(as_json(audit(SAMPLE / "biased.pt", interactions=log)), as_json(by_users))
    assert [s.setting for s in diff.settings] == ["retrieval.popularity"]
    head = diff.metric("head_share_1pct_dot@10")
    assert head.status == "incomparable" and head.delta is None and "retrieval.popularity differs" in (head.reason or "")
    assert head.base is not None and head.new is not None  # both values stay visible
    assert diff.metric("gini_popular@10").status == "incomparable"  # the popular list itself changes
    assert diff.metric("gini_dot@10").status == "compared" and diff.metric("gini_dot@10").delta == 0
    assert diff.metric("spearman").status == "compared"
    gates = parse_diff_gates(["head_share_1pct_dot@10.delta>0"], list(flat_metrics_from_report(as_json(by_users))))
    with pytest.raises(UnmeasuredGateError):
        evaluate_diff_gates(gates, diff)


def test_other_incomparable_settings(mitigated: tuple[AuditResult, AuditResult]) -> None:
    base = as_json(mitigated[0])
    redefined = copy.deepcopy(base)
    redefined["retrieval"]["definitions"]["gini"] = "gini: something else"
    diff = diff_reports(base, redefined)
    assert diff.metric("gini_dot@10").status == "incomparable" and diff.metric("arp_dot@10").status == "compared"
    kept = copy.deepcopy(base)
    kept["retrieval"]["population"]["seen_items"] = "kept"
    diff = diff_reports(base, kept)
    assert all(c.status == "incomparable" for c in diff.metrics if "@" in c.name and c.base is not None)
    assert {c.status for c in diff.metrics if "@" in c.name and c.base is None} <= {"not_measured"}
    assert diff.metric("spearman").status == "compared"
    newer = copy.deepcopy(base)
    newer["schema_version"] = 2
    with pytest.raises(ReportError, match="schema versions 1 .base. and 2 .new."):
        diff_reports(base, newer)
    with pytest.raises(ReportError, match="the new report is not a popaudit JSON report"):
        diff_reports(base, {"rows": []})
    with pytest.raises(ReportError, match="not written by popaudit"):
        diff_reports({**base, "tool": {"name": "other"}}, base)


SERVED_LISTS = Path(__file__).resolve().parent / "data" / "served_lists"


def test_a_model_against_served_lists_alone(mitigated: tuple[AuditResult, AuditResult]) -> None:
    """A model's severity (dot vs cosine) and a lists-only one (served vs the log's share)
    follow different rules: the verdict's change has no direction; a figure with a value in
    one report only is only there, whatever the other report's JSON holds for its name."""
    lists = run_audit(AuditConfig(model=None, interactions=SERVED_LISTS / "train.csv", ks=(5,),
                                  recommendations=SERVED_LISTS / "recs.csv"))
    model = as_json(mitigated[0])
    diff = diff_reports(model, as_json(lists))
    assert mitigated[0].verdict.severity != lists.verdict.severity  # a direction would have been claimed
    assert diff.verdict.direction == "not comparable"
    assert (diff.verdict.base_basis, diff.verdict.new_basis) == ("model", "served lists") and diff.verdict.changed
    for name in ("spearman", "loglog_slope", "head_share_1pct_dot@10"):  # the lists' JSON holds spearman: null
        change = diff.metric(name)
        assert (change.status, change.new, change.delta, change.direction) == ("only_base", None, None, "unknown")
        assert change.base == mitigated[0].flat_metrics()[name]
    # The log's top-1% item (101) holds 111 of its 400 interactions: the lists verdict's reference.
    assert diff.metric("head_share_log").status == "only_new"
    assert diff.metric("head_share_log").new == pytest.approx(111 / 400)
    assert diff.metric("training_spearman").status == "not_measured"  # no trace in either
    assert all(c.base is not None and c.new is not None for c in diff.metrics if c.status == "compared")
    assert [c.name for c in diff.conditions][:2] == ["plain SGD", "parameter-linear encoder"]
    assert (diff.conditions[0].base, diff.conditions[0].new) == ("holds", None)
    same = diff_reports(as_json(lists), as_json(lists))
    assert same.verdict.direction == "unchanged" and not same.verdict.changed
    assert [c.name for c in same.conditions][4] == "sufficiently large learning rate"  # neither has conditions
    doc = diff_document(diff.to_dict())
    lead = doc.lead[0].text  # type: ignore[union-attr]
    assert "moderate → none (not comparable: the base's severity was graded by the model's own serving" in lead
    assert "less bias)" not in lead


def test_direction_table() -> None:
    def moved(measure: str, delta: float, scoring: str | None = "dot") -> str:
        return direction(FlatEntry(0.0, "retrieval", measure, scoring, 10), delta)

    assert moved("head_share_1pct", -0.1) == "less bias" and moved("aplt", -0.1) == "more bias"
    assert moved("coverage", 0.1) == "less concentrated" and moved("gap_delta_niche", 0.2) == "more bias"
    # ΔGAP is a popularity lift: higher is more bias, whichever side of 0 (QA harms F5).
    assert moved("gap_delta_niche", -0.12) == "less bias" and moved("gap_delta_niche", 1.1) == "more bias"  # -0.6 -> 0.5
    assert moved("pop_reo", -0.1) == "smaller gap" and moved("aclt", 1.0) == "less bias"
    assert moved("ndcg", 0.01) == "more accuracy" and moved("ndcg_niche", -0.01) == "less accuracy"
    assert moved("ndcg", 0.01, "ratio") == "neutral" and moved("head_share_1pct", -0.1, "ratio") == "less bias"
    assert moved("gini", 0.1, "popular") == "neutral" and moved("overlap_dot_cosine", 0.1, None) == "neutral"
    assert moved("cold_share", 0.1) == "unknown" and moved("gini", 0.0) == "unchanged"
