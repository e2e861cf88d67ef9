"""``popaudit diff BASE NEW`` (auditor/cli/diff.py, auditor/report/diff_doc.py): before/after
``mitigate`` on sample_data, two retrain runs, an incomparable pair (another popularity
definition, other group cut-offs), gates on changes and their exit codes, and every
format from one document. The diff core itself is tested in tests/test_diff.py."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from auditor.cli import cli
from auditor.report.diff_doc import diff_document
from auditor.result import AuditResult
from test_diff import SAMPLE, SERVED_LISTS, as_json, audit, mitigated, retrained  # noqa: F401  (fixtures)


def save(folder: Path, name: str, report: dict[str, Any]) -> Path:
    path = folder / name
    path.write_text(json.dumps(report))
    return path


def run(*args: Any) -> Any:
    return CliRunner().invoke(cli, ["diff", *map(str, args)])


def test_before_after_mitigate_in_every_format(mitigated: tuple[AuditResult, AuditResult], tmp_path: Path) -> None:
    base, new = save(tmp_path, "before.json", as_json(mitigated[0])), save(tmp_path, "after.json", as_json(mitigated[1]))
    md, html, js = tmp_path / "d.md", tmp_path / "d.html", tmp_path / "d.json"
    ran = run(base, new, "--markdown", md, "--html", html, "--json", js, "--fail-on", "head_share_1pct_dot@10.delta<0")
    assert ran.exit_code == 3, ran.output  # the head share fell: the gate trips
    assert "gate head_share_1pct_dot@10.delta<0" in ran.stderr
    data = json.loads(js.read_text())
    head = next(m for m in data["metrics"] if m["name"] == "head_share_1pct_dot@10")
    # Plain dot serving of the rescaled table ranks as alpha_0.5 of the original.
    assert head["new"] == pytest.approx(mitigated[0].flat_metrics()["head_share_1pct_alpha_0.5@10"])
    assert head["direction"] == "less bias" and head["delta"] < 0
    markdown = md.read_text()
    assert len(markdown) < 8000  # a pull-request comment, not the whole table
    assert "| head\\_share\\_1pct\\_dot@10 |" in markdown and "## Every figure" not in markdown
    assert "<h2>Every figure</h2>" in html.read_text() and "head_share_1pct_alpha_0.5@50" in html.read_text()
    for name in ("head_share_1pct_dot@10", "Key figures at K=", "Largest changes"):
        assert name in ran.stdout  # the console view is the same document
    assert run(base, new, "--fail-on", "head_share_1pct_dot@10.rel<-0.5", "-q").exit_code == 3
    assert run(base, new, "--fail-on", "head_share_1pct_dot@10.delta>0").exit_code == 0


def test_two_retrain_runs_compare_accuracy(retrained: tuple[AuditResult, AuditResult], tmp_path: Path) -> None:
    base, new = save(tmp_path, "lr10.json", as_json(retrained[0])), save(tmp_path, "lr01.json", as_json(retrained[1]))
    js = tmp_path / "d.json"
    ran = run(base, new, "--json", js, "-q")
    assert ran.exit_code == 0, (ran.output, repr(ran.exception))
    data = json.loads(js.read_text())
    ndcg = next(m for m in data["metrics"] if m["name"] == "ndcg_dot@10")
    assert ndcg["status"] == "compared"
    assert ndcg["direction"] == ("more accuracy" if ndcg["delta"] > 0 else "less accuracy" if ndcg["delta"] < 0
                                 else "unchanged")
    niche = next(m for m in data["metrics"] if m["name"] == "ndcg_niche_dot@10")  # with the recorded holdout
    assert niche["status"] == "compared" and niche["base"] is not None


def test_incomparable_group_cutoffs_are_flagged_per_figure(mitigated: tuple[AuditResult, AuditResult],
                                                            tmp_path: Path) -> None:
    before = as_json(mitigated[0])
    other = copy.deepcopy(before)
    other["retrieval"]["definitions"]["popularity_groups"] += " (changed)"
    base, new = save(tmp_path, "a.json", before), save(tmp_path, "b.json", other)
    js = tmp_path / "d.json"
    ran = run(base, new, "--json", js, "--format", "markdown", "--fail-on", "pop_rsp_dot@10.delta>0")
    assert ran.exit_code == 1 and "cannot evaluate --fail-on pop_rsp_dot@10.delta>0" in ran.stderr
    assert "retrieval.definitions.popularity\\_groups" in ran.stdout  # the settings table says why
    data = json.loads(js.read_text())
    status = {m["name"]: m["status"] for m in data["metrics"]}
    assert status["pop_rsp_dot@10"] == status["gap_delta_niche_dot@10"] == "incomparable"
    assert status["gini_dot@10"] == status["head_share_1pct_dot@10"] == "compared"


def test_another_popularity_definition_is_flagged(tmp_path: Path) -> None:
    log = SAMPLE / "interactions.parquet"
    base = save(tmp_path, "a.json", as_json(audit(SAMPLE / "biased.pt", interactions=log)))
    new = save(tmp_path, "b.json", as_json(audit(SAMPLE / "biased.pt", interactions=log, popularity="users")))
    ran = run(base, new, "--format", "markdown")
    assert ran.exit_code == 0 and "not comparable" in ran.stdout and "retrieval.popularity" in ran.stdout


def test_the_document_is_short_unless_full() -> None:
    metrics = [{"name": f"gini_dot@{k}", "base": 0.5, "new": 0.4, "delta": -0.1, "relative": -0.2,
                "direction": "less bias", "status": "compared"} for k in range(1, 200)]
    data = {"verdict": {"base_severity": "high", "new_severity": "low", "direction": "less bias"}, "metrics": metrics}
    short, full = diff_document(data), diff_document(data, full=True)
    assert [s.key for s in short.sections] == ["verdict", "key", "largest", "comparability"]
    assert full.sections[-1].key == "all" and len(full.sections[-1].blocks[0].rows) == 199  # type: ignore[union-attr]
    assert "199 less bias" in short.lead[0].text  # type: ignore[union-attr]


def test_each_side_counts_what_the_lead_counts_and_says_what_it_does_not_rank() -> None:
    """The lead's "N more bias" is the Worse heading's N: ratios (listed as their dot
    figure) and figures that moved from 0 (no relative change) are counted, not ranked."""
    def figure(name: str, base: float, new: float, direction: str) -> dict[str, object]:
        return {"name": name, "base": base, "new": new, "delta": new - base,
                "relative": None if base == 0 else (new - base) / base, "direction": direction, "status": "compared"}

    metrics = [figure("gini_dot@10", 0.5, 0.6, "more bias"), figure("head_share_1pct_ratio@10", 2.0, 3.0, "more bias"),
               figure("pop_rsp_dot@10", 0.0, 0.2, "more bias"), figure("gini_dot@20", 0.5, 0.4, "less bias")]
    doc = diff_document({"verdict": {"base_severity": "low", "new_severity": "low"}, "metrics": metrics})
    assert "1 less bias, 3 more bias" in doc.lead[0].text  # type: ignore[union-attr]
    largest = next(s for s in doc.sections if s.key == "largest")
    texts = [getattr(b, "text", None) or getattr(b, "caption", "") for b in largest.blocks]
    assert texts[0] == "Worse (3 figures)" and texts[2] == "Better (1 figure)"
    assert texts[1] == ("The 1 largest relative changes of the 1 ranked; not ranked: 1 dot/cosine ratio (each moves "
                        "with its dot figure), 1 figure that moved from 0 (no relative change).")
    assert texts[3] == "The 1 largest relative changes of the 1 ranked."


def lists_report(folder: Path, name: str, popular_users: int) -> Path:
    """``check --json`` of served lists alone on tests/data/served_lists' log: 10 users with
    5 items each from 110-114, the first ``popular_users`` given the log's 5 most popular
    items instead (101, the top-1% item, first)."""
    rows = [(u, 101 + r if u <= popular_users else 110 + r, r + 1) for u in range(1, 11) for r in range(5)]
    recs = folder / f"{name}.csv"
    recs.write_text("user_id,item_id,rank\n" + "".join(f"{u},{i},{r}\n" for u, i, r in rows))
    report = folder / f"{name}.json"
    ran = CliRunner().invoke(cli, ["check", "--recommendations", str(recs), "--interactions",
                                   str(SERVED_LISTS / "train.csv"), "-k", "5", "--json", str(report), "-q"])
    assert ran.exit_code == 0, ran.output
    return report


def test_served_lists_alone_diff_key_figures_and_a_gate_on_a_change_from_zero(tmp_path: Path) -> None:
    base, new = lists_report(tmp_path, "lists", 0), lists_report(tmp_path, "more", 5)
    js = tmp_path / "d.json"
    ran = run(base, new, "--format", "markdown", "--json", js)
    assert ran.exit_code == 0, ran.output
    data = {m["name"]: m for m in json.loads(js.read_text())["metrics"]}
    # Item 101 fills 1 slot of 5 for 5 of the 10 users: 5 of 50 slots; none before.
    head = data["head_share_1pct_served@5"]
    assert (head["base"], head["new"], head["relative"], head["direction"]) == (0.0, 0.1, None, "more bias")
    assert head["delta"] == pytest.approx(0.1)
    log = data["head_share_log"]  # the log's own top-1% share (111 of 400 interactions), the verdict's reference
    assert log["base"] == log["new"] == pytest.approx(111 / 400) and log["direction"] == "unchanged"
    key = ran.stdout.split("## Key figures at K=5", 1)[1].split("## Largest changes", 1)[0]
    assert "| head\\_share\\_log | 0.2775 | 0.2775 | 0.0000 | +0.0% | unchanged |" in key
    row = next(line for line in key.splitlines() if line.startswith("| head\\_share\\_1pct\\_served@5 |"))
    assert [cell.strip() for cell in row.split("|")[2:-1]] == ["0.0000", "0.1000", "+0.1000", "", "more bias"]
    assert "dot-product serving" not in key  # no dot figure among them
    assert "| C1 plain SGD | n/a | n/a |" in ran.stdout and "C1 C1" not in ran.stdout
    gated = run(base, new, "-q", "--fail-on", "head_share_1pct_served@5.rel>0.1")
    assert gated.exit_code == 1
    assert ("cannot evaluate --fail-on head_share_1pct_served@5.rel>0.1: relative change undefined: the base value "
            "is 0") in gated.stderr
    assert run(base, new, "-q", "--fail-on", "head_share_1pct_served@5.delta>0.05").exit_code == 3


def test_quiet_keeps_a_report_asked_for_by_format(mitigated: tuple[AuditResult, AuditResult], tmp_path: Path) -> None:
    """-q silences the console comparison, not a --format json one with no -o: that is the
    output asked for (it used to print nothing and exit 0)."""
    base, new = save(tmp_path, "before.json", as_json(mitigated[0])), save(tmp_path, "after.json", as_json(mitigated[1]))
    quiet_json = run(base, new, "--format", "json", "-q")
    assert quiet_json.exit_code == 0 and quiet_json.stderr == ""
    assert json.loads(quiet_json.stdout) == json.loads(run(base, new, "--format", "json").stdout)
    assert run(base, new, "-q").stdout == ""
