"""experiment mitigations: each training-side mitigation trained on one held-out split and
audited through run_audit; serving-side rows from the reference model's audit."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from auditor.audit import run_audit
from auditor.cli import cli
from auditor.config import AuditConfig
from auditor.errors import InputError
from auditor.report.mitigation_summary import to_markdown, write_results
from auditor.train.experiments import ExperimentSizes
from auditor.mitigation.experiment import run_mitigations

SIZES = ExperimentSizes(n_users=120, n_items=100, n_interactions=3000, epochs=2, k=10, n_bootstrap=0, dim=16)


@pytest.fixture(scope="module")
def result():  # type: ignore[no-untyped-def]
    return run_mitigations([0], SIZES, fraction=0.25, alphas=(0.5,))


def test_rows_and_what_each_serves(result) -> None:  # type: ignore[no-untyped-def]
    names = [r["name"] for r in result.rows]
    assert names == ["reference", "logq", "weight-decay", "adam", "cosine", "alpha_0.5", "popular"]
    kinds = {r["name"]: r["kind"] for r in result.rows}
    assert kinds["logq"] == "training" and kinds["cosine"] == "serving" and kinds["popular"] == "baseline"
    by = {r["name"]: r for r in result.rows}
    assert by["logq"]["config"]["logq"] is True and by["adam"]["config"]["optimizer"] == "adam"
    assert by["weight-decay"]["config"]["weight_decay"] == 1e-3
    for row in result.rows:
        run = row["runs"][0]
        assert 0.0 <= run["ndcg"] <= 1.0 and 0.0 <= run["recall"] <= 1.0 and 0.0 <= run["head_share_1pct"] <= 1.0
    assert result.split == "random" and result.k == 10
    # serving rows rank the reference model's vectors: its norm-frequency rho
    assert by["cosine"]["runs"][0]["spearman"] == by["reference"]["runs"][0]["spearman"]


def test_reference_row_is_the_audit_of_the_same_retrained_model(result, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "ref.pt"
    res = CliRunner().invoke(cli, [
        "retrain", "--n-users", "120", "--n-items", "100", "--n-interactions", "3000", "--epochs", "2", "--dim", "16",
        "--holdout-fraction", "0.25", "--seed", "0", "-o", str(out),
    ])
    assert res.exit_code == 0, res.output
    flat = run_audit(AuditConfig(model=out, ks=(10,), alphas=(0.5,), bootstrap=0, probes=False)).flat_metrics()
    by = {r["name"]: r["runs"][0] for r in result.rows}
    for name, scoring in (("reference", "dot"), ("cosine", "cosine"), ("alpha_0.5", "alpha_0.5"), ("popular", "popular")):
        for metric in ("ndcg", "recall", "head_share_1pct", "gini"):
            assert by[name][metric] == pytest.approx(flat[f"{metric}_{scoring}@10"], abs=1e-12), (name, metric)


def test_files_and_one_seed_table(result, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    written = write_results(result, tmp_path)
    assert [p.name for p in written] == ["results.json", "results.md", "accuracy_vs_head_share.png"]
    assert written[2].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    doc = json.loads(written[0].read_text())
    assert doc["experiment"] == "mitigations" and doc["holdout"] == {"fraction": 0.25, "split": "random"}
    assert doc["data"]["kind"] == "synthetic" and doc["data"]["n_users"] == 120
    md = to_markdown(result)
    rows = [line for line in md.splitlines() if line.startswith("| ")]
    assert rows[0].startswith("| mitigation | side | model | NDCG@10 | recall@10 | head share 1%@10 | Gini@10 |")
    assert len(rows) == 1 + len(result.rows) and not any(" ± " in r for r in rows)
    ref = result.rows[0]["runs"][0]
    assert f"| {ref['ndcg']:.3f} | {ref['recall']:.3f} |" in rows[1] and rows[1].endswith("| 100.0% |")
    trained, held, pairs = ref["n_train_interactions"], ref["n_holdout_interactions"], ref["n_holdout_pairs"]
    assert trained + held == SIZES.n_interactions and held == pairs + ref["n_repeats_dropped"]
    assert f"(seed 0: {trained:,} interactions trained on, {held:,} held out; {pairs:,} distinct held-out" in md
    assert "a seeded random 0.25 of each user's" in md


def test_unknown_setting() -> None:
    with pytest.raises(InputError, match="unknown settings"):
        run_mitigations([0], SIZES, settings=["reference", "cosine"])


def test_mitigations_on_a_log_with_times(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    lines = ["user_id:token\titem_id:token\ttimestamp:float"]
    for n in range(1500):
        lines.append(f"u{rng.integers(0, 60)}\ti{int(rng.zipf(1.6)) % 80}\t{1_000 + n}")
    log = tmp_path / "log.inter"
    log.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["experiment", "mitigations", "--data", str(log), "--seeds", "1", "--epochs", "1",
                                   "--batch-size", "64", "-k", "10", "--mitigations", "reference,logq", "--alpha", "0.5",
                                   "-o", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "results.json").read_text())
    assert doc["holdout"]["split"] == "time" and [r["name"] for r in doc["rows"]] == [
        "reference", "logq", "cosine", "alpha_0.5", "popular"]
    assert "Holdout: the latest 0.2 of each user's interactions, never trained on" in (out / "results.md").read_text()
    assert "┃ mitigation" in res.stdout
    # QA accuracy F3: a log's sizes are data's; sizes holds no synthetic defaults (1000 items) for it
    assert {k: doc["sizes"][k] for k in ("n_users", "n_items", "n_interactions", "zipf")} == dict.fromkeys(
        ("n_users", "n_items", "n_interactions", "zipf"))
    assert doc["sizes"]["epochs"] == 1 and doc["sizes"]["k"] == 10 and doc["data"]["n_interactions"] == 1500


@pytest.mark.slow  # two spawned workers import torch and FAISS
def test_parallel_mitigations_equal_serial(result) -> None:  # type: ignore[no-untyped-def]
    parallel = run_mitigations([0], SIZES, fraction=0.25, alphas=(0.5,), jobs=2)
    assert parallel.rows == result.rows
