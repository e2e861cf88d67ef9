"""Held-out accuracy beside exposure (`check --holdout`), end to end against a brute-force
reference: every scoring ranked in float64 by plain numpy, training items excluded, and
RecBole's recall/NDCG/hit/MRR computed one user at a time."""

from __future__ import annotations

import json
import math
import shlex
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from click.testing import CliRunner

from auditor.audit import run_audit
from auditor.cli import cli
from auditor.config import AuditConfig

N_USERS, N_ITEMS, DIM = 40, 120, 8


def _model_files(root: Path, n_users: int, n_items: int, dim: int, n: int) -> Path:
    """User and item tables (item norms grow with popularity), a training log, a holdout."""
    rng = np.random.default_rng(7)
    popularity = 1.0 / np.arange(1, n_items + 1) ** 0.9
    popularity /= popularity.sum()
    users = rng.integers(0, n_users, n)
    items = rng.choice(n_items, size=n, p=popularity)
    held = rng.random(n) < 0.2
    freq = np.bincount(items[~held], minlength=n_items)
    directions = rng.normal(size=(n_items, dim))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    item_table = directions * (1.0 + freq[:, None]) ** 0.3
    user_table = rng.normal(size=(n_users, dim))
    torch.save({"user_emb.weight": torch.tensor(user_table, dtype=torch.float32),
                "item_emb.weight": torch.tensor(item_table, dtype=torch.float32)}, root / "model.pt")
    pq.write_table(pa.table({"user_id": users[~held], "item_id": items[~held]}), root / "train.parquet")
    pq.write_table(pa.table({"user_id": users[held], "item_id": items[held]}), root / "holdout.parquet")
    return root


@pytest.fixture(scope="module")
def model_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small model for brute-force references."""
    return _model_files(tmp_path_factory.mktemp("evaluation"), N_USERS, N_ITEMS, DIM, 3000)


@pytest.fixture(scope="module")
def skewed_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A larger catalogue, where dot serving visibly over-serves the head (severity high)."""
    return _model_files(tmp_path_factory.mktemp("skewed"), 200, 1000, 16, 6000)


def _reference(root: Path, alpha: float | None, k: int, keep_seen: bool = False, history: bool = False) -> dict[str, float]:
    """Brute force: rank with float64 scores (ties by row), RecBole's measures per user."""
    state = torch.load(root / "model.pt")
    users = state["user_emb.weight"].double().numpy()
    items = state["item_emb.weight"].double().numpy()
    train = pq.read_table(root / "train.parquet").to_pydict()
    held = pq.read_table(root / "holdout.parquet").to_pydict()
    norms = np.linalg.norm(items, axis=1)
    totals = {"recall": 0.0, "ndcg": 0.0, "hit_rate": 0.0, "mrr": 0.0}
    evaluated = sorted(set(held["user_id"]))
    for user in evaluated:
        if alpha is None:  # most popular
            counts = np.bincount(train["item_id"], minlength=N_ITEMS).astype(np.float64)
            scores = counts.copy()
        else:
            seen_rows = sorted({i for u, i in zip(train["user_id"], train["item_id"]) if u == user})
            query = items[seen_rows].mean(axis=0) if history else users[user]
            cos = items @ query / (norms * np.linalg.norm(query))
            scores = cos * norms**alpha
        seen = {i for u, i in zip(train["user_id"], train["item_id"]) if u == user}
        if not keep_seen:
            scores[list(seen)] = -np.inf
        order = np.lexsort((np.arange(N_ITEMS), -scores))[:k]
        relevant = {i for u, i in zip(held["user_id"], held["item_id"]) if u == user}
        ranks = [r + 1 for r, item in enumerate(order) if item in relevant]
        idcg = sum(1 / math.log2(r + 1) for r in range(1, min(len(relevant), k) + 1))
        totals["recall"] += len(ranks) / len(relevant)
        totals["ndcg"] += sum(1 / math.log2(r + 1) for r in ranks) / idcg
        totals["hit_rate"] += float(bool(ranks))
        totals["mrr"] += 1 / ranks[0] if ranks else 0.0
    return {name: value / len(evaluated) for name, value in totals.items()}


@pytest.mark.parametrize("keep_seen", [False, True])
def test_accuracy_of_every_scoring_matches_brute_force(model_files: Path, keep_seen: bool) -> None:
    config = AuditConfig(
        model=model_files / "model.pt", interactions=model_files / "train.parquet",
        holdout=model_files / "holdout.parquet", ks=(5, 20), probes=False, bootstrap=0, keep_seen=keep_seen,
    )
    result = run_audit(config)
    assert result.accuracy is not None and result.retrieval is not None
    assert result.accuracy.seen_excluded is not keep_seen
    for k in (5, 20):
        measured = result.accuracy.at[k]
        assert set(measured) == {"dot", "cosine", "popular", "alpha_0.25", "alpha_0.5", "alpha_0.75"}
        for name, alpha in (("dot", 1.0), ("cosine", 0.0), ("alpha_0.5", 0.5), ("popular", None)):
            expected = _reference(model_files, alpha, k, keep_seen)
            got = measured[name]
            for metric, value in expected.items():
                assert getattr(got, metric) == pytest.approx(value, abs=1e-12), (k, name, metric)
        # Exposure is measured for the same lists, every scoring.
        assert set(result.retrieval.at[k].scorings()) == set(measured)
    flat = result.flat_metrics()
    assert flat["ndcg_ratio@5"] == pytest.approx(flat["ndcg_dot@5"] / flat["ndcg_cosine@5"])
    assert result.accuracy.n_users_evaluated == len(set(pq.read_table(model_files / "holdout.parquet")["user_id"].to_pylist()))


def test_without_a_user_table_queries_are_the_mean_of_training_items(model_files: Path, tmp_path: Path) -> None:
    np.save(tmp_path / "items.npy", torch.load(model_files / "model.pt")["item_emb.weight"].numpy())
    config = AuditConfig(model=tmp_path / "items.npy", interactions=model_files / "train.parquet",
                         holdout=model_files / "holdout.parquet", ks=(10,), probes=False, bootstrap=0)
    result = run_audit(config)
    assert result.accuracy is not None and result.retrieval is not None
    assert "mean of their training items" in result.retrieval.queries
    for name, alpha in (("dot", 1.0), ("cosine", 0.0), ("alpha_0.25", 0.25)):
        expected = _reference(model_files, alpha, 10, history=True)
        for metric, value in expected.items():
            # The audit ranks float32 means, the reference float64 ones: the same lists here.
            assert getattr(result.accuracy.at[10][name], metric) == pytest.approx(value, abs=1e-9), (name, metric)


def test_report_sections_gate_and_recommendation(model_files: Path, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    args = ["check", str(model_files / "model.pt"), "--interactions", str(model_files / "train.parquet"),
            "--holdout", str(model_files / "holdout.parquet"), "--no-probes", "-k", "10", "--alpha", "0.5",
            "--json", str(report), "--markdown", str(tmp_path / "r.md"), "--html", str(tmp_path / "r.html")]
    ran = CliRunner().invoke(cli, args + ["--fail-on", "ndcg_ratio@10>100"], catch_exceptions=False)
    assert ran.exit_code == 0, ran.output
    data = json.loads(report.read_text())
    accuracy = data["accuracy"]
    assert set(accuracy["at"]["10"]) == {"dot", "cosine", "popular", "alpha_0.5"}
    assert set(data["retrieval"]["at"]["10"]) >= {"dot", "cosine", "popular", "alpha_0.5"}
    assert data["settings"]["alphas"] == [0.5]  # the settings say which exponents were measured
    assert accuracy["quoted_k"] == 10 and accuracy["recommended"] in {"dot", "cosine", "alpha_0.5"}
    assert accuracy["recommendation"].startswith("At K=10, ")
    # Paired bootstrap intervals (the default 1,000 resamples) for every other scoring against dot.
    assert accuracy["n_bootstrap"] == 1000 and set(accuracy["changes"]) == {"cosine", "popular", "alpha_0.5"}
    change = accuracy["changes"]["cosine"]
    assert change["ndcg_delta_ci"][0] <= change["ndcg_delta"] <= change["ndcg_delta_ci"][1]
    assert "Accuracy and the trade-off" in (tmp_path / "r.md").read_text()
    html = (tmp_path / "r.html").read_text()
    assert "Accuracy and the trade-off" in html and "Held-out NDCG of each scoring" in html  # the trade-off figure
    # A gate on the accuracy ratio trips with exit 3.
    gated = CliRunner().invoke(cli, args + ["--fail-on", "ndcg_ratio@10<100"], catch_exceptions=False)
    assert gated.exit_code == 3, gated.output


def _exposure_figures(result: Any) -> dict[str, Any]:
    """Every flat exposure figure: no accuracy name, no measure of the holdout itself."""
    accuracy = ("recall", "ndcg_", "hit_rate_", "mrr_", "pop_reo_")
    return {name: value for name, value in result.flat_metrics().items() if "@" in name and not name.startswith(accuracy)}


def test_without_holdout_exposure_is_the_same_and_the_report_says_how_to_measure(model_files: Path) -> None:
    common = dict(model=model_files / "model.pt", interactions=model_files / "train.parquet", probes=False,
                  bootstrap=0)
    result = run_audit(AuditConfig(**common))  # type: ignore[arg-type]
    assert result.accuracy is None and "pass holdout PATH" in result.not_measured["accuracy"]
    assert set(result.retrieval.at[10].scorings()) == {"dot", "cosine", "popular", "alpha_0.25", "alpha_0.5",
                                                       "alpha_0.75"}
    # One population: the holdout adds accuracy and changes no exposure figure or verdict.
    with_holdout = run_audit(AuditConfig(**common, holdout=model_files / "holdout.parquet"))  # type: ignore[arg-type]
    # (PopREO and the group NDCG are measured on the holdout itself: null without one.)
    assert _exposure_figures(with_holdout) == _exposure_figures(result)
    assert result.retrieval.at[10].dot["pop_reo"] is None and with_holdout.retrieval.at[10].dot["pop_reo"] is not None
    assert with_holdout.retrieval.population == result.retrieval.population
    assert (with_holdout.verdict.severity, with_holdout.verdict.quoted_k) == (result.verdict.severity,
                                                                           result.verdict.quoted_k)
    assert result.retrieval.population.seen_items == "excluded" and result.retrieval.population.source == "users"


def test_mitigate_alpha_auto_applies_the_recommended_scoring(skewed_files: Path, tmp_path: Path) -> None:
    """`mitigate --alpha auto` takes the trade-off's choice; plain dot serving of its output
    then gives exactly the accuracy and exposure that scoring had on the original."""
    from auditor.alpha import scoring_alpha

    common = dict(interactions=skewed_files / "train.parquet", holdout=skewed_files / "holdout.parquet",
                  probes=False, accuracy_tolerance=0.8)
    before = run_audit(AuditConfig(model=skewed_files / "model.pt", **common))  # type: ignore[arg-type]
    assert before.accuracy is not None and before.accuracy.recommended == "alpha_0.75"
    assert before.accuracy.changes["alpha_0.75"].head_share_delta_ci[1] < 0  # clearly less head
    out = tmp_path / "fixed.pt"
    args = ["mitigate", str(skewed_files / "model.pt"), "--alpha", "auto", "-o", str(out),
            "--interactions", str(skewed_files / "train.parquet"), "--holdout", str(skewed_files / "holdout.parquet")]
    ran = CliRunner().invoke(cli, args + ["--accuracy-tolerance", "0.8"], catch_exceptions=False)
    assert ran.exit_code == 0, ran.output
    sidecar = json.loads((tmp_path / "fixed.pt.popaudit.json").read_text())
    assert sidecar["alpha"] == scoring_alpha(before.accuracy.recommended) == 0.75
    figures = sidecar["tradeoff"]
    assert figures["scoring"] == "alpha_0.75" and figures["k"] == before.accuracy.quoted_k
    assert figures["head_share_1pct"]["after"] < figures["head_share_1pct"]["before"]
    assert "frequency_norm" not in ran.output.lower() and "rho" not in ran.output
    after = run_audit(AuditConfig(model=out, **common))  # type: ignore[arg-type]
    assert after.accuracy is not None and after.retrieval is not None and before.retrieval is not None
    chosen, k = before.accuracy.recommended, before.accuracy.quoted_k
    assert k is not None
    assert after.accuracy.at[k]["dot"] == before.accuracy.at[k][chosen]
    assert after.retrieval.at[k].dot == before.retrieval.at[k].scorings()[chosen]
    assert figures["ndcg"]["after"] == after.accuracy.at[k]["dot"].ndcg
    # The Next line runs as printed.
    next_line = ran.output.strip().splitlines()[-1]
    assert next_line.startswith("Next: popaudit check ") and "--holdout" in next_line
    rerun = CliRunner().invoke(cli, shlex.split(next_line[len("Next: "):])[1:] + ["-q"], catch_exceptions=False)
    assert rerun.exit_code == 0, rerun.output


def test_mitigate_alpha_auto_writes_nothing_when_dot_stays(skewed_files: Path, tmp_path: Path) -> None:
    out = tmp_path / "fixed.pt"
    ran = CliRunner().invoke(cli, [
        "mitigate", str(skewed_files / "model.pt"), "--alpha", "auto", "-o", str(out),
        "--interactions", str(skewed_files / "train.parquet"), "--holdout", str(skewed_files / "holdout.parquet"),
    ], catch_exceptions=False)
    assert ran.exit_code == 1
    assert "Error: --alpha auto wrote nothing: the trade-off keeps dot-product serving. At K=10, no serving change is " \
           "clearly better than dot: the best alternative, alpha_0.75, keeps 84" in ran.output
    assert "below the 98% accuracy tolerance; the best available is --alpha 0.75 (alpha_0.75)" in ran.output
    assert list(tmp_path.iterdir()) == []
