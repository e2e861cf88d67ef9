"""A gate on a figure that compares two scorings' lists (every ``_ratio``, the overlaps) at a
K recorded as saturated (``retrieval.saturated``: at least half the queries' lists hold
every candidate) is not measured, exit 1 with the reason, never a pass (QA report F1): there
dot and cosine serve the same items, so the ratio is 1 and the overlap 1 whatever the model
does. The clamp advice for a K past the catalogue never leads to such a K; a gate on one
scoring's figure there still evaluates, its line saying the K holds every candidate."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from click.testing import CliRunner, Result

from auditor.cli import cli
from auditor.gate import Gate, gate_notes, void_figures, without_void
from auditor.gate_names import per_k_name
from auditor.gate_reasons import why_saturated, why_unmeasured

N_ITEMS, N_USERS = 40, 30


def _inputs(folder: Path) -> Path:
    """40 items whose norms grow with training frequency, 30 users who each trained on 8 of them:
    K=40 holds every candidate (32) of every user, K=2 none."""
    rng = np.random.default_rng(3)
    items = np.stack([rng.choice(N_ITEMS, size=8, replace=False, p=np.arange(N_ITEMS, 0, -1) / 820)
                      for _ in range(N_USERS)])
    freq = np.bincount(items.ravel(), minlength=N_ITEMS)
    vectors = rng.normal(size=(N_ITEMS, 6))
    vectors *= (1 + np.log1p(freq) / np.linalg.norm(vectors, axis=1))[:, None]
    np.save(folder / "items.npy", vectors.astype(np.float32))
    pq.write_table(pa.table({"user_id": np.repeat(np.arange(N_USERS), 8), "item_id": items.ravel()}),
                   folder / "log.parquet")
    return folder


def _check(d: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["check", str(d / "items.npy"), "--interactions", str(d / "log.parquet"),
                                    "--bootstrap", "0", "--no-probes", "--json", str(d / "a.json"), *args])


def test_a_ratio_gate_at_a_saturated_k_fails_with_the_reason_and_the_k_to_gate(tmp_path: Path) -> None:
    d = _inputs(tmp_path)
    result = _check(d, "-q", "-k", "2", "-k", "40", "--fail-on", "head_share_10pct_ratio@40>1.1",
                    "--fail-on", "overlap_dot_cosine@40<0.9")
    assert result.exit_code == 1, result.output  # was 0: ratio 1, overlap 1 by construction
    said = " ".join(result.output.split())
    assert (f"head_share_10pct_ratio@40>1.1: K=40 holds every candidate for {N_USERS} of {N_USERS} queries: dot and "
            "cosine serve the same items, the ratio measures nothing; gate head_share_10pct_ratio@2") in said
    assert ("overlap_dot_cosine@40<0.9: K=40 holds every candidate for 30 of 30 queries: dot and cosine serve the "
            "same items, the overlap measures nothing; gate overlap_dot_cosine@2") in said
    assert not (d / "a.json").exists()  # a refused gate writes no report


def test_the_clamp_advice_skips_the_saturated_catalogue_size(tmp_path: Path) -> None:
    d = _inputs(tmp_path)
    result = _check(d, "-q", "-k", "2", "-k", "50", "--fail-on", "head_share_10pct_ratio@50>1")
    assert result.exit_code == 1
    said = " ".join(result.output.split())
    assert "clamped to 40" in said and "gate head_share_10pct_ratio@2)" in said
    assert "gate head_share_10pct_ratio@40" not in said  # was: "gate …@40 and add -k 40", a gate that passes


def test_one_scoring_figure_at_a_saturated_k_still_evaluates_with_a_note(tmp_path: Path) -> None:
    d = _inputs(tmp_path)
    result = _check(d, "-k", "2", "-k", "40", "--fail-on", "head_share_10pct_dot@40>0.99",
                    "--fail-on", "head_share_10pct_ratio@2>100")
    assert result.exit_code == 0, result.output
    # Every list at K=40 holds the user's 32 candidates: dot and cosine serve the same head share.
    report = json.loads((d / "a.json").read_text())
    assert report["retrieval"]["saturated"] == {"2": False, "40": True}
    figure = report["retrieval"]["at"]["40"]["dot"]["head_share_10pct"]
    assert figure == report["retrieval"]["at"]["40"]["cosine"]["head_share_10pct"]
    lines = " ".join(result.output.split())
    assert f"gate head_share_10pct_dot@40>0.99: {figure:.4g} (ok), K=40 holds every candidate for 30 of 30 " \
           "queries: of the candidates, not of the ranking" in lines
    at_2 = next(line for line in result.output.splitlines() if line.startswith("gate head_share_10pct_ratio@2>100"))
    assert at_2.endswith("(ok)")  # K=2 tells the scorings apart: no note there


def test_the_policy_reads_the_reports_record_alone() -> None:
    figures = {"dot": {"head_share_1pct": 0.3, "recall": 0.2}, "cosine": {"head_share_1pct": 0.3, "recall": 0.2}}
    report = {"retrieval": {"saturated": {"10": False, "100": True}, "n_saturated": {"10": 0, "100": 150},
                            "n_queries": 200, "at": {"10": figures, "100": figures}}}
    name = per_k_name("recall_ratio@100")
    assert name is not None
    assert why_saturated(name, report).startswith("K=100 holds every candidate for 150 of 200 queries")
    assert why_saturated(name, {"retrieval": {"saturated": {"100": False}}}) == ""
    for plain in ("head_share_1pct_dot@100", "recall_dot@100"):
        parsed = per_k_name(plain)
        assert parsed is not None and why_saturated(parsed, report) == ""
    gates = [Gate("head_share_1pct_ratio@100", ">", 1.5), Gate("head_share_1pct_ratio@10", ">", 1.5),
             Gate("head_share_1pct_dot@100", ">", 0.5)]
    metrics = {"head_share_1pct_ratio@100": 1.0, "head_share_1pct_ratio@10": 2.0, "head_share_1pct_dot@100": 0.3}
    kept = without_void(gates, metrics, lambda: report)
    assert kept == {**metrics, "head_share_1pct_ratio@100": None}
    assert "the ratio measures nothing; gate head_share_1pct_ratio@10" in why_unmeasured(
        "head_share_1pct_ratio@100", report)
    assert list(gate_notes(gates, {}, report)) == [gates[2]]


def test_no_report_is_read_when_no_gate_compares_scorings() -> None:
    def refuse() -> dict[str, object]:
        raise AssertionError("read")

    assert without_void([Gate("spearman", ">", 0.5)], {"spearman": 0.7}, refuse) == {"spearman": 0.7}


def test_an_unsaturated_k_gates_as_before(tmp_path: Path) -> None:
    d = _inputs(tmp_path)
    result = _check(d, "-q", "-k", "2", "--fail-on", "head_share_10pct_ratio@2>0")
    assert result.exit_code == 3  # trips where the lists tell the scorings apart


def test_batch_leaves_a_ratio_at_a_rows_saturated_k_unmeasured(tmp_path: Path) -> None:
    d = _inputs(tmp_path)
    (d / "m.csv").write_text("model\nitems.npy\n")
    args = ["batch", str(d / "m.csv"), "-o", str(d / "r.parquet"), "--interactions", str(d / "log.parquet"), "-q",
            "--bootstrap", "0", "--no-probes", "-k", "2", "-k", "40"]
    result = CliRunner().invoke(cli, [*args, "--fail-on", "head_share_10pct_ratio@40>1.1"])
    assert result.exit_code == 1, result.output  # was 0: the row's ratio is 1 by construction
    said = " ".join(result.output.split())
    assert "K=40 holds every candidate for 30 of 30 queries: dot and cosine serve the same items" in said
    assert CliRunner().invoke(cli, [*args, "--fail-on", "head_share_10pct_ratio@2>0"]).exit_code == 3


def test_the_batch_results_row_holds_null_for_a_comparison_at_a_saturated_k(tmp_path: Path) -> None:
    """QA report N3: the row's ``head_share_10pct_ratio@40`` and ``overlap_dot_cosine@40`` were 1.0
    ("no skew") where the gate and the summary call them unmeasured; K=2 keeps its figures."""
    d = _inputs(tmp_path)
    (d / "m.csv").write_text("model\nitems.npy\n")
    result = CliRunner().invoke(cli, ["batch", str(d / "m.csv"), "-o", str(d / "r.parquet"), "--interactions",
                                      str(d / "log.parquet"), "-q", "--bootstrap", "0", "--no-probes", "-k", "2",
                                      "-k", "40"])
    assert result.exit_code == 0, result.output
    row = pq.read_table(d / "r.parquet").to_pylist()[0]
    at = json.loads(row["report_json"])["retrieval"]["at"]
    assert at["40"]["dot"]["head_share_10pct"] == at["40"]["cosine"]["head_share_10pct"] > 0  # was a column of 1.0
    assert row["head_share_10pct_ratio@40"] is None and row["overlap_dot_cosine@40"] is None
    assert row["head_share_10pct_dot@40"] == at["40"]["dot"]["head_share_10pct"]  # one scoring's figure is kept
    assert row["head_share_10pct_ratio@2"] == at["2"]["dot"]["head_share_10pct"] / at["2"]["cosine"]["head_share_10pct"]


def test_void_figures_nulls_set_comparisons_at_a_saturated_k_alone() -> None:
    report = {"retrieval": {"saturated": {"10": False, "100": True}}}
    metrics = {"head_share_1pct_ratio@100": 1.0, "overlap_dot_cosine@100": 1.0, "recall_ratio@100": 1.0,
               "ndcg_ratio@100": 1.2, "mrr_ratio@100": 1.5, "head_share_1pct_dot@100": 0.3,
               "head_share_1pct_ratio@10": 2.0, "spearman": 0.5}
    assert void_figures(metrics, report) == {**metrics, "head_share_1pct_ratio@100": None,
                                             "overlap_dot_cosine@100": None, "recall_ratio@100": None}
    assert void_figures(metrics, {"retrieval": {"saturated": {"100": False}}}) == metrics


def test_the_advice_skips_a_k_where_the_ratio_is_undefined() -> None:
    """QA report N4 a): the advice named K=10, where dot's and cosine's top-1% shares are both 0,
    so the advised gate failed again as "a ratio of two zeros is undefined"."""
    at = {"5": {"dot": {"head_share_1pct": 0.2}, "cosine": {"head_share_1pct": 0.1}},
          "10": {"dot": {"head_share_1pct": 0.0}, "cosine": {"head_share_1pct": 0.0}},
          "100": {"dot": {"head_share_1pct": 0.01}, "cosine": {"head_share_1pct": 0.01}}}
    report = {"retrieval": {"saturated": {"5": False, "10": False, "100": True}, "n_saturated": {"100": 200},
                            "n_queries": 200, "at": at}}
    said = why_unmeasured("head_share_1pct_ratio@100", report)
    assert said.endswith("the ratio measures nothing; gate head_share_1pct_ratio@5")  # was: …@10
    del at["5"], report["retrieval"]["saturated"]["5"]
    assert why_unmeasured("head_share_1pct_ratio@100", report).endswith(
        "with it); at K=10, a ratio of two zeros is undefined (dot and cosine are both 0); gate "
        "head_share_1pct_dot@10 and head_share_1pct_cosine@10 instead")
    assert why_unmeasured("overlap_dot_cosine@100", report).endswith("gate overlap_dot_cosine@10")  # no ratio: K=10
