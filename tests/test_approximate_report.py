"""An audit whose lists an approximate index found says so: the verdict, every table of
figures from those lists, the gate lines, a warning under the recall floor; the norm-aware
scorings it cannot rank are not measured, with the reason, in the advice and in gates."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from click.testing import CliRunner

from auditor.cli import cli
from auditor.flat import metric_names
from auditor.gate import approximate_gates, parse_gates
from auditor.gate_reasons import why_unmeasured
from auditor.sections import RECALL_FLOOR, Retrieval

N_ITEMS, N_USERS, DIM = 3000, 300, 16
ALPHA_WHY = "the approximate index (index ivf) ranks by dot and cosine only; index exact measures the norm-aware scorings"


def _fixture(d: Path) -> None:
    """Item norms rising with training frequency (what inner-product IVF recalls worst)."""
    rng = np.random.default_rng(5)
    p = 1.0 / np.arange(1, N_ITEMS + 1)
    items_log = rng.choice(N_ITEMS, 12_000, p=p / p.sum())
    users_log = rng.integers(0, N_USERS, 12_000)
    freq = np.bincount(items_log, minlength=N_ITEMS)
    directions = rng.standard_normal((N_ITEMS, DIM))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    items = (directions * (1 + 0.5 * np.log1p(freq))[:, None]).astype(np.float32)
    np.savez(d / "model.npz", item_embedding=items, user_embedding=rng.standard_normal((N_USERS, DIM)).astype(np.float32))
    pq.write_table(pa.table({"user_id": users_log, "item_id": items_log}), d / "log.parquet")
    held = rng.choice(12_000, 600, replace=False)
    pq.write_table(pa.table({"user_id": users_log[held], "item_id": items_log[(held + 7) % 12_000]}), d / "held.parquet")


def _check(d: Path, *extra: str) -> tuple[Any, dict[str, Any]]:
    args = ["check", str(d / "model.npz"), "--interactions", str(d / "log.parquet"), "--holdout", str(d / "held.parquet"),
            "--no-probes", "--bootstrap", "100", "-k", "10", "-q", "--json", str(d / "r.json"), "-o", str(d / "r.txt"),
            "--markdown", str(d / "r.md"), *extra]
    result = CliRunner().invoke(cli, args)
    report = json.loads((d / "r.json").read_text()) if (d / "r.json").exists() else {}
    return result, report


def test_approximate_lists_are_said_so_everywhere(tmp_path: Path) -> None:
    _fixture(tmp_path)
    result, report = _check(tmp_path, "--index", "ivf", "--fail-on", "head_share_1pct_dot@10>0.01",
                            "--fail-on", "head_share_1pct_popular@10>0.01")
    assert result.exit_code == 3, result.output
    recall = report["retrieval"]["recall"]["10"]
    assert recall < RECALL_FLOOR  # this table's IVF misses much (the case the warning is for)
    said = f"approximate (ivf, recall@10 {recall:.3f})"
    assert report["verdict"]["summary"].startswith(f"A{said[1:]}: the retrieval figures come from an approximate")
    assert any(w.startswith("the ivf index's lists are approximate and miss much of exact search (recall@10 "
                            f"{recall:.3f}, below 0.9), so their figures can be far off: an approximate index's figures can err either "
                            "way") for w in report["warnings"])
    assert any(w.startswith("on the recall check's 300 sampled queries the ivf index's dot lists gave the top-1% items")
               for w in report["warnings"])
    markdown = (tmp_path / "r.md").read_text()
    assert markdown.count(f"### Top-10, {said}") == 2  # the retrieval table and the accuracy trade-off
    assert f"Top-10, {said}" in (tmp_path / "r.txt").read_text()
    # The dot gate evaluates and says approximate; the popular list's gate is exact.
    dot = report["retrieval"]["at"]["10"]["dot"]["head_share_1pct"]
    lines = " ".join(result.output.split())  # the console folds long lines
    assert f"gate head_share_1pct_dot@10>0.01: {dot:.4g} (TRIPPED), approximate (recall@10 {recall:.3f}, can err either way) gate" in lines
    assert lines.endswith("gate head_share_1pct_popular@10>0.01: 1 (TRIPPED)")
    # Norm-aware scorings: not measured, with the reason, and the advice does not promise them.
    for alpha in ("0.25", "0.5", "0.75"):
        assert report["not_measured"][f"alpha_{alpha}"] == ALPHA_WHY.replace("(index", "(--index").replace(
            "; index", "; --index")
    assert set(report["accuracy"]["at"]["10"]) == {"dot", "cosine", "popular"}
    advice = " ".join(report["verdict"]["recommendations"])
    assert "--holdout measures α" not in advice
    assert "The comparison left out the norm-aware scorings, which were not measured: the approximate index" in advice


def test_a_gate_on_an_unmeasured_alpha_says_why(tmp_path: Path) -> None:
    _fixture(tmp_path)
    result, _ = _check(tmp_path, "--index", "ivf", "--fail-on", "head_share_1pct_alpha_0.5@10>0.3")
    assert result.exit_code == 1
    assert ("Error: cannot evaluate --fail-on head_share_1pct_alpha_0.5@10>0.3: alpha_0.5 not measured: the "
            "approximate index (--index ivf) ranks by dot and cosine only") in " ".join(result.output.split())


def test_exact_lists_say_nothing_of_the_kind(tmp_path: Path) -> None:
    _fixture(tmp_path)
    result, report = _check(tmp_path, "--fail-on", "head_share_1pct_dot@10>0.99")
    assert result.exit_code == 0, result.output
    assert "approximate" not in report["verdict"]["summary"]
    assert not any(key.startswith("alpha_") for key in report["not_measured"])
    assert "alpha_0.5" in report["accuracy"]["at"]["10"]
    assert "approximate" not in result.stderr and "approximate" not in (tmp_path / "r.md").read_text().split("## ")[1]


def test_gate_marks_and_reasons_by_hand() -> None:
    metrics = {"recall@10": 0.5, "recall@100": 0.8125, "gini_dot@100": 0.9}
    gates = parse_gates(["gini_dot@100>0.5", "ndcg_ratio@10<1", "arp_popular@10>1", "recall@10<0.9", "spearman>0.1",
                         "gini_dot@20>0.5"], metric_names([10, 20, 100]))
    assert [(g.metric, said) for g, said in approximate_gates(gates, metrics).items()] == [
        ("gini_dot@100", "approximate (recall@100 0.812, can err either way)"),
        ("ndcg_ratio@10", "approximate (recall@10 0.500, can err either way)")]
    assert approximate_gates(gates, {"gini_dot@100": 0.9, "recall@10": None}) == {}  # exact search: no recall
    retrieval = Retrieval(n_queries=3, index="hnsw", at={}, recall={10: 0.5, 100: 0.8125})
    assert retrieval.approximate(100) == "approximate (hnsw, recall@100 0.812)"
    assert retrieval.approximate() == "approximate (hnsw, recall@10 0.500)"  # the lowest over every K
    assert Retrieval(n_queries=3, index="exact", at={}).approximate(10) == ""
    report = {"retrieval": {"at": {"10": {"dot": {"gini": 0.5}}}}, "not_measured": {"alpha_0.5": ALPHA_WHY},
              "settings": {"ks": [10], "alphas": [0.5]}}
    assert why_unmeasured("gini_alpha_0.5@10", report) == f"alpha_0.5 not measured: {ALPHA_WHY}"
