"""At a saturated K (every list holds every candidate) dot and cosine serve the same items but
rank them apart: NDCG and MRR, which weigh hits by rank, still measure the ranking there (QA
report N1). Their ratios evaluate (``mrr_ratio@40``, ``ndcg_ratio@40``) and their one-scoring
gates carry no "of the candidates, not of the ranking" note; a set-based figure (recall, hit
rate, head shares, overlaps) is still refused or noted."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from click.testing import CliRunner, Result

from auditor.cli import cli
from auditor.gate import Gate, gate_notes, without_void
from auditor.gate_names import compares_scorings, order_dependent, per_k_name

N_ITEMS, N_USERS, DIM, SEEN, HELD, K = 40, 30, 6, 8, 2, 40


def _inputs(d: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """40 items, 30 users who each trained on 8 and hold out 2 others: K=40 holds each user's
    32 candidates."""
    rng = np.random.default_rng(11)
    chosen = np.stack([rng.choice(N_ITEMS, size=SEEN + HELD, replace=False) for _ in range(N_USERS)])
    seen, held = chosen[:, :SEEN], chosen[:, SEEN:]
    items = rng.normal(size=(N_ITEMS, DIM)) * np.exp(rng.normal(scale=1.5, size=(N_ITEMS, 1)))
    users = rng.normal(size=(N_USERS, DIM))
    np.savez(d / "model.npz", item_embedding=items.astype(np.float32), user_embedding=users.astype(np.float32))
    user_ids = np.arange(N_USERS)
    pq.write_table(pa.table({"user_id": np.repeat(user_ids, SEEN), "item_id": seen.ravel()}), d / "log.parquet")
    pq.write_table(pa.table({"user_id": np.repeat(user_ids, HELD), "item_id": held.ravel()}), d / "held.parquet")
    return items.astype(np.float32).astype(np.float64), users.astype(np.float32).astype(np.float64), seen, held


def _ndcg_mrr(scores: np.ndarray, seen: np.ndarray, held: np.ndarray) -> tuple[float, float]:
    """Mean NDCG@K and MRR@K of each user's candidates ranked by ``scores`` (RecBole's definitions)."""
    scores = scores.copy()
    np.put_along_axis(scores, seen, -np.inf, axis=1)
    ranked = np.argsort(-scores, axis=1)[:, : N_ITEMS - SEEN]  # every candidate: K=40 >= 32
    hits = (ranked[:, :, None] == held[:, None, :]).any(axis=2)
    gains = 1.0 / np.log2(np.arange(2, ranked.shape[1] + 2))
    ndcg = (hits * gains).sum(axis=1) / gains[:HELD].sum()
    mrr = 1.0 / (hits.argmax(axis=1) + 1.0)  # every user's held-out items are among the candidates
    return float(ndcg.mean()), float(mrr.mean())


def _check(d: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["check", str(d / "model.npz"), "--interactions", str(d / "log.parquet"),
                                    "--holdout", str(d / "held.parquet"), "--bootstrap", "0", "--no-probes",
                                    "-k", "2", "-k", str(K), "--json", str(d / "a.json"), *args])


def test_ndcg_and_mrr_ratios_at_a_saturated_k_evaluate_and_trip(tmp_path: Path) -> None:
    items, users, seen, held = _inputs(tmp_path)
    unit = items / np.linalg.norm(items, axis=1, keepdims=True)
    ndcg_dot, mrr_dot = _ndcg_mrr(users @ items.T, seen, held)
    ndcg_cos, mrr_cos = _ndcg_mrr(users @ unit.T, seen, held)
    ndcg_ratio, mrr_ratio = ndcg_dot / ndcg_cos, mrr_dot / mrr_cos
    assert abs(mrr_ratio - 1) > 0.01 and abs(ndcg_ratio - 1) > 0.01  # the rankings differ: the ratios measure them
    mrr_gate, ndcg_gate = (f"{name}_ratio@{K}{'>' if ratio > 1 else '<'}1"
                           for name, ratio in (("mrr", mrr_ratio), ("ndcg", ndcg_ratio)))
    result = _check(tmp_path, "--fail-on", mrr_gate, "--fail-on", ndcg_gate, "--fail-on", f"ndcg_dot@{K}>0.999")
    assert result.exit_code == 3, result.output  # was 1: "the ratio measures nothing"
    report = json.loads((tmp_path / "a.json").read_text())
    assert report["retrieval"]["saturated"][str(K)] is True
    at = report["accuracy"]["at"][str(K)]
    assert np.isclose(at["dot"]["ndcg"], ndcg_dot, rtol=1e-6) and np.isclose(at["cosine"]["ndcg"], ndcg_cos, rtol=1e-6)
    assert np.isclose(at["dot"]["mrr"], mrr_dot, rtol=1e-6) and np.isclose(at["cosine"]["mrr"], mrr_cos, rtol=1e-6)
    lines = {line.split(":")[0].removeprefix("gate "): line for line in result.output.splitlines()
             if line.startswith("gate ")}
    assert lines[mrr_gate].endswith(f"{mrr_ratio:.4g} (TRIPPED)")
    assert lines[ndcg_gate].endswith(f"{ndcg_ratio:.4g} (TRIPPED)")
    assert lines[f"ndcg_dot@{K}>0.999"].endswith(f"{ndcg_dot:.4g} (ok)")  # was: "…: of the candidates, not of the ranking"
    assert "of the candidates" not in result.output


def test_set_based_figures_at_a_saturated_k_are_still_refused_or_noted(tmp_path: Path) -> None:
    _inputs(tmp_path)
    result = _check(tmp_path, "-q", "--fail-on", f"recall_ratio@{K}>1.5", "--fail-on", f"hit_rate_ratio@{K}>1.5")
    assert result.exit_code == 1, result.output  # recall and hit rate are 1 for both scorings
    said = " ".join(result.output.split())
    assert f"hit_rate_ratio@{K}>1.5: K={K} holds every candidate for 30 of 30 queries: dot and cosine serve the " \
           "same items, the ratio measures nothing; gate hit_rate_ratio@2" in said


def test_the_policy_splits_ranking_from_set_measures() -> None:
    ranking = ["ndcg_ratio@10", "mrr_ratio@10", "ndcg_niche_ratio@10", "ndcg_blockbuster_ratio@10",
               "ndcg_diverse_ratio@10"]
    sets = ["recall_ratio@10", "hit_rate_ratio@10", "head_share_1pct_ratio@10", "gini_ratio@10", "aplt_ratio@10",
            "coverage_ratio@10", "arp_ratio@10", "overlap_dot_cosine@10", "gap_delta_niche_ratio@10"]
    parsed = {name: per_k_name(name) for name in ranking + sets}
    assert all(p is not None and order_dependent(p) and not compares_scorings(p)
               for name, p in parsed.items() if name in ranking)
    assert all(p is not None and not order_dependent(p) and compares_scorings(p)
               for name, p in parsed.items() if name in sets)
    report = {"retrieval": {"saturated": {"100": True}, "n_saturated": {"100": 5}, "n_queries": 5}}
    gates = [Gate("ndcg_ratio@100", ">", 1), Gate("recall_ratio@100", ">", 1), Gate("mrr_dot@100", ">", 0),
             Gate("recall_dot@100", ">", 0)]
    metrics = {"ndcg_ratio@100": 1.2, "recall_ratio@100": 1.0, "mrr_dot@100": 0.3, "recall_dot@100": 1.0}
    assert without_void(gates, metrics, lambda: report) == {**metrics, "recall_ratio@100": None}
    assert list(gate_notes(gates, {}, report)) == [gates[3]]
