"""Counts computed elsewhere (``--frequencies``) for a model with a user table: the
frequency-norm figures, popularity and head sets are the log's, while the retrieval lists
are measured under another protocol (every user-table row queried, training items kept
among the candidates). Every format says so, a gate on such a figure says so in its line,
and ``diff`` does not compare those figures with a log run's (QA plugins F1)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from click.testing import CliRunner

from auditor.cli import cli

N_USERS, N_ITEMS, DIM, K = 90, 200, 8, 10
PROTOCOL = "not the training log's protocol"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Zipf log in which every user-table row trains, its GROUP BY counts, and a model
    whose item norms grow with frequency."""
    d = tmp_path_factory.mktemp("counts_protocol")
    rng = np.random.default_rng(3)
    p = 1.0 / np.arange(1, N_ITEMS + 1)
    items = rng.choice(N_ITEMS, size=3000, p=p / p.sum())
    users = np.concatenate([np.arange(N_USERS), rng.integers(0, N_USERS, items.size - N_USERS)])
    log = pa.table({"user_id": users, "item_id": items})
    pq.write_table(log, d / "log.parquet")
    grouped = log.group_by("item_id").aggregate([("user_id", "count"), ("user_id", "count_distinct")])
    pq.write_table(grouped.rename_columns(["item_id", "count", "users"]), d / "counts.parquet")
    freq = np.bincount(items, minlength=N_ITEMS)
    table = rng.normal(size=(N_ITEMS, DIM))
    table *= ((1 + np.log1p(freq)) / np.linalg.norm(table, axis=1))[:, None]
    torch.save({"user_embedding.weight": torch.tensor(rng.normal(size=(N_USERS, DIM)), dtype=torch.float32),
                "item_embedding.weight": torch.tensor(table, dtype=torch.float32)}, d / "model.pt")
    return d


def _run(d: Path, name: str, *args: str) -> tuple[dict[str, Any], Any]:
    out = d / f"{name}.json"
    result = CliRunner().invoke(cli, ["check", str(d / "model.pt"), "-k", str(K), "--bootstrap", "0", "--no-probes",
                                      "--json", str(out), "--markdown", str(d / f"{name}.md"), "-q", *args])
    assert result.exit_code in (0, 3), result.output
    return json.loads(out.read_text()), result


def _numpy_figures(d: Path, exclude_seen: bool) -> dict[str, float]:
    """Top-K of every user row (ties: lower row first), independently: head share of the
    top-1% items (2 of 200, ties included) under dot and cosine, dot's Gini over the catalogue."""
    state = torch.load(d / "model.pt")
    items = state["item_embedding.weight"].double().numpy()
    users = state["user_embedding.weight"].double().numpy()
    log = pq.read_table(d / "log.parquet").to_pydict()
    freq = np.bincount(log["item_id"], minlength=N_ITEMS)
    head = freq >= np.sort(freq)[::-1][1]
    seen = np.zeros((N_USERS, N_ITEMS), dtype=bool)
    seen[log["user_id"], log["item_id"]] = True
    unit = items / np.linalg.norm(items, axis=1, keepdims=True)
    figures = {}
    for scoring, scores in (("dot", users @ items.T), ("cosine", users @ unit.T)):
        if exclude_seen:
            scores = np.where(seen, -np.inf, scores)
        top = np.argsort(-scores, axis=1, kind="stable")[:, :K]
        figures[f"head_share_1pct_{scoring}"] = float(head[top].mean())
        if scoring == "dot":
            c = np.sort(np.bincount(top.ravel(), minlength=N_ITEMS)).astype(float)
            figures["gini_dot"] = float((2 * np.arange(1, N_ITEMS + 1) - N_ITEMS - 1) @ c / (N_ITEMS * c.sum()))
    return figures


def _figures(report: dict[str, Any]) -> dict[str, float]:
    cut = report["retrieval"]["at"][str(K)]
    return {"head_share_1pct_dot": cut["dot"]["head_share_1pct"], "head_share_1pct_cosine":
            cut["cosine"]["head_share_1pct"], "gini_dot": cut["dot"]["gini"]}


def test_counts_keep_the_log_figures_and_say_which_retrieval_figures_are_not(workspace: Path) -> None:
    log, _ = _run(workspace, "log", "--interactions", str(workspace / "log.parquet"))
    counts, _ = _run(workspace, "counts", "--frequencies", str(workspace / "counts.parquet"))
    kept, _ = _run(workspace, "kept", "--interactions", str(workspace / "log.parquet"), "--keep-seen")
    assert counts["frequency_norm"] == log["frequency_norm"]  # ρ, slope, deciles: the log's
    excluded, every_row_kept = _numpy_figures(workspace, True), _numpy_figures(workspace, False)
    assert _figures(log) == pytest.approx(excluded, abs=1e-12)
    assert _figures(counts) == pytest.approx(every_row_kept, abs=1e-12)
    assert _figures(counts) != pytest.approx(_figures(log))  # the other protocol: not the log's figures
    # Every user row trains here, so the log with --keep-seen is the counts' protocol: the same lists.
    assert _figures(kept) == _figures(counts)
    assert counts["retrieval"]["population"]["seen_items"] == "unknown"
    assert log["retrieval"]["population"]["seen_items"] == "excluded"
    # Said in the JSON's retrieval section and beside the retrieval figures of the rendered formats.
    assert PROTOCOL in counts["retrieval"]["definitions"]["seen_items"]
    assert PROTOCOL not in json.dumps(log) and PROTOCOL not in json.dumps(kept)
    assert PROTOCOL in (workspace / "counts.md").read_text()
    assert PROTOCOL not in (workspace / "log.md").read_text()


def test_a_gate_on_a_retrieval_figure_of_counts_says_its_protocol(workspace: Path) -> None:
    gates = ["--fail-on", "gini_dot@10>0", "--fail-on", "spearman>0"]
    _, counts = _run(workspace, "gate_counts", "--frequencies", str(workspace / "counts.parquet"), *gates)
    _, log = _run(workspace, "gate_log", "--interactions", str(workspace / "log.parquet"), *gates)
    assert counts.exit_code == log.exit_code == 3
    lines = {line.split(":")[0]: line for line in counts.stderr.splitlines() if line.startswith("gate ")}
    assert PROTOCOL in lines["gate gini_dot@10>0"]  # before: the bare figure, like a log run's line
    assert PROTOCOL not in lines["gate spearman>0"]  # the frequency-norm figures are the log's
    assert PROTOCOL not in log.stderr


def test_a_severity_graded_from_lists_of_counts_says_its_protocol(workspace: Path) -> None:
    """The severity rests on the head shares of those lists (QA report F5: high with counts,
    moderate with the log for one model), so its gate line and the verdict say so."""
    gates = ["--fail-on", "severity_level>=0"]
    counts, by_counts = _run(workspace, "sev_counts", "--frequencies", str(workspace / "counts.parquet"), *gates)
    log, by_log = _run(workspace, "sev_log", "--interactions", str(workspace / "log.parquet"), *gates)
    assert counts["verdict"]["quoted_k"] == log["verdict"]["quoted_k"] == K  # graded from the lists on both
    line = next(line for line in by_counts.stderr.splitlines() if line.startswith("gate severity_level"))
    assert PROTOCOL in line and PROTOCOL not in by_log.stderr
    assert counts["verdict"]["summary"].startswith("The severity is graded from lists measured under another protocol")
    assert "another protocol" not in log["verdict"]["summary"]


def test_diff_does_not_compare_a_counts_run_with_a_log_run(workspace: Path) -> None:
    _run(workspace, "d_log", "--interactions", str(workspace / "log.parquet"))
    _run(workspace, "d_counts", "--frequencies", str(workspace / "counts.parquet"))
    out = workspace / "diff.json"
    result = CliRunner().invoke(cli, ["diff", str(workspace / "d_log.json"), str(workspace / "d_counts.json"),
                                      "--format", "json", "-o", str(out)])
    assert result.exit_code == 0, result.output
    metrics = {m["name"]: m for m in json.loads(out.read_text())["metrics"]}
    gini = metrics[f"gini_dot@{K}"]
    assert gini["status"] == "incomparable" and "retrieval.population.seen_items differs" in gini["reason"]
    assert metrics["spearman"]["status"] == "compared" and metrics["spearman"]["delta"] == 0.0


def test_a_batch_row_of_counts_says_its_protocol_in_the_gate_line(workspace: Path) -> None:
    manifest = workspace / "manifest.csv"
    manifest.write_text(f"model,frequencies\n{workspace / 'model.pt'},{workspace / 'counts.parquet'}\n")
    result = CliRunner().invoke(cli, ["batch", str(manifest), "-o", str(workspace / "b.parquet"), "-k", str(K),
                                      "--bootstrap", "0", "--no-probes", "-q", "--fail-on", "gini_dot@10>0"])
    assert result.exit_code == 3, result.output
    assert "gini_dot@10>0: " in result.stderr and PROTOCOL in result.stderr


def test_protocol_gates_name_the_model_lists_figures_only() -> None:
    from auditor.gate import gates_for, protocol_gates

    gates = gates_for(["gini_dot@10>0", "head_share_1pct_ratio@10>1", "arp_served@10>0", "spearman>0",
                       "severity_level>=1"], [10])
    report = {"retrieval": {"population": {"seen_items": "unknown"}}}
    assert [str(g) for g in protocol_gates(gates, report)] == ["gini_dot@10>0", "head_share_1pct_ratio@10>1"]
    graded = {**report, "verdict": {"quoted_k": 10}}  # a severity graded from those lists: its gate too
    assert [str(g) for g in protocol_gates(gates, graded)][-1] == "severity_level>=1"
    assert protocol_gates(gates, {"retrieval": {"population": {"seen_items": "excluded"}}}) == {}


# ---------------------------------------------------------------- batch (QA plugins N2)

BATCH_APART = 'retrieval.population.seen_items differs ("excluded" vs "unknown")'


@pytest.fixture(scope="module")
def protocol_batch(workspace: Path) -> tuple[pa.Table, Any]:
    """One model with its log, its counts, its counts again and its log again."""
    manifest = workspace / "protocols.csv"
    log, counts = workspace / "log.parquet", workspace / "counts.parquet"
    manifest.write_text(f"model,interactions,frequencies\nmodel.pt,{log},\nmodel.pt,,{counts}\nmodel.pt,,{counts}\n"
                        f"model.pt,{log},\n")
    result = CliRunner().invoke(cli, ["batch", str(manifest), "-o", str(workspace / "protocols.parquet"), "-k", str(K),
                                      "--bootstrap", "0", "--no-probes"], terminal_width=200)
    assert result.exit_code == 0, result.output
    return pq.read_table(workspace / "protocols.parquet"), result


def test_batch_rows_say_their_protocol_in_flat_columns(workspace: Path, protocol_batch: tuple[pa.Table, Any]) -> None:
    table, _ = protocol_batch
    assert table.column("seen_items").to_pylist() == ["excluded", "unknown", "unknown", "excluded"]
    assert table.column("query_source").to_pylist() == ["users"] * 4  # before: no column said either
    excluded, kept = _numpy_figures(workspace, True), _numpy_figures(workspace, False)
    ratio = [f["head_share_1pct_dot"] / f["head_share_1pct_cosine"] for f in (excluded, kept, kept, excluded)]
    assert table.column(f"head_share_1pct_ratio@{K}").to_pylist() == pytest.approx(ratio, rel=1e-12)
    assert ratio[0] != pytest.approx(ratio[1])  # the same model: the change is the protocol's alone
    for report, seen in zip(table.column("report_json").to_pylist(), table.column("seen_items").to_pylist()):
        assert json.loads(report)["retrieval"]["population"]["seen_items"] == seen


def test_batch_summary_does_not_compare_rows_of_another_protocol(
    workspace: Path, protocol_batch: tuple[pa.Table, Any]
) -> None:
    """The change of the head-share ratio between a log row and a counts row is diff's
    "not comparable", for diff's reason; between two rows measured alike it is compared."""
    from auditor.batch.summary import summarise
    from auditor.diff import diff_reports

    table, result = protocol_batch
    summary = summarise(table, rank_by="spearman")
    head = f"head_share_1pct_ratio@{K}"
    assert summary.head_share_metric == head
    deltas = [(s.delta_head_share, s.head_share_apart) for s in summary.order]
    back = 'retrieval.population.seen_items differs ("unknown" vs "excluded")'  # the previous row's first, as diff's base
    assert deltas == [(None, None), (None, BATCH_APART), (0.0, None), (None, back)]  # before: -0.4, 0, +0.4
    assert [s.delta_spearman for s in summary.order] == [None, 0.0, 0.0, 0.0]  # the log's figures in every row
    reports = [json.loads(r) for r in table.column("report_json").to_pylist()]
    by_diff = {m.name: m for m in diff_reports(reports[0], reports[1]).metrics}[head]
    assert by_diff.status == "incomparable" and by_diff.reason == BATCH_APART  # one rule, one wording
    trends = {t.metric: t for t in summary.trends}
    assert (trends[head].direction, trends[head].change, trends[head].apart) == ("not comparable", None, BATCH_APART)
    assert (trends["spearman"].direction, trends["spearman"].change) == ("no clear trend", 0.0)
    assert summary.protocols == 'retrieval.population.seen_items "excluded": rows 0, 3; "unknown": rows 1, 2'
    by_gini = summarise(table, rank_by=f"gini_dot@{K}")  # a list measure ranked by: its trend too
    assert {t.metric: t for t in by_gini.trends}[f"gini_dot@{K}"].direction == "not comparable"
    # The console: the note, and "not comparable" where the change was a bare -0.429-like figure.
    order = result.output[result.output.index("Row by row"):]
    change = f"{ratio_change(table):.3f}"
    assert change not in result.output and order.count("not comparable") >= 3
    assert "measured under different protocols" in result.output


def ratio_change(table: pa.Table) -> float:
    values = table.column(f"head_share_1pct_ratio@{K}").to_pylist()
    return float(values[1] - values[0])


def test_batch_summary_of_one_protocol_compares_every_row(workspace: Path) -> None:
    manifest = workspace / "one_protocol.csv"
    manifest.write_text(f"model,interactions\nmodel.pt,{workspace / 'log.parquet'}\nmodel.pt,{workspace / 'log.parquet'}\n")
    out = workspace / "one_protocol.parquet"
    result = CliRunner().invoke(cli, ["batch", str(manifest), "-o", str(out), "-k", str(K), "--bootstrap", "0",
                                      "--no-probes", "--html", str(workspace / "one.html")], terminal_width=200)
    assert result.exit_code == 0, result.output
    from auditor.batch.summary import summarise

    summary = summarise(pq.read_table(out))
    assert summary.protocols is None and summary.order[1].delta_head_share == 0.0
    assert summary.order[1].head_share_apart is None and summary.trends[1].apart is None
    assert "not comparable" not in result.output and "not comparable" not in (workspace / "one.html").read_text()


def test_resumed_rows_of_an_earlier_version_get_their_population_columns(
    workspace: Path, protocol_batch: tuple[pa.Table, Any]
) -> None:
    """Rows kept on --resume from a results file written before the columns existed are
    filled from their own reports."""
    table, _ = protocol_batch
    out = workspace / "resumed.parquet"
    pq.write_table(table.drop_columns(["seen_items", "query_source"]), out)
    result = CliRunner().invoke(cli, ["batch", str(workspace / "protocols.csv"), "-o", str(out), "-k", str(K),
                                      "--bootstrap", "0", "--no-probes", "--resume", "-q"])
    assert result.exit_code == 0, result.output
    resumed = pq.read_table(out)
    assert resumed.column("seen_items").to_pylist() == ["excluded", "unknown", "unknown", "excluded"]
    assert resumed.column("seconds").to_pylist() == table.column("seconds").to_pylist()  # kept, not audited again
