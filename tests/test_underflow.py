"""Tiny embedding values (Measures F1): tables whose entries are normal float32 but whose
inner products underflow it (entries near 1e-25 give products near 1e-50) must rank
exactly as the same tables at scale 1, for dot, cosine and every scoring between, and
the audit's figures and severity must not change with the scale.

Known answers: top-K lists by float64 inner products / cosines computed here with numpy
(float64 cannot underflow on these tables), and the head shares counted from them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from auditor.retrieval import approximate_topk, sharded_topk
from auditor.retrieval.dask import search_shard
from auditor.retrieval.scorings import multi_scoring_topk
from auditor.retrieval.search import FLOAT32_SMALL_EXPONENT, merge_topk, overflow_shifts


def _tables(scale: float, n_items: int = 300, n_queries: int = 40, dim: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """Queries and rows (float32) of varied norms, times ``scale``."""
    rng = np.random.default_rng(3)
    table = rng.standard_normal((n_items, dim)) * rng.uniform(0.2, 3.0, n_items)[:, None]
    queries = rng.standard_normal((n_queries, dim))
    return (queries * scale).astype(np.float32), (table * scale).astype(np.float32)


def _reference(queries: np.ndarray, table: np.ndarray, k: int, alpha: float) -> np.ndarray:
    """Top-k rows by float64 |q|^a |k|^a cos(q, k), ties by row."""
    q, t = queries.astype(np.float64), table.astype(np.float64)
    qn, tn = np.linalg.norm(q, axis=1), np.linalg.norm(t, axis=1)
    scores = (q / qn[:, None]) @ (t / tn[:, None]).T * qn[:, None] ** alpha * tn[None, :] ** alpha
    rows = np.broadcast_to(np.arange(t.shape[0]), scores.shape)
    return np.lexsort((rows, -scores), axis=-1)[:, :k]


def test_tiny_bounds_are_lifted_and_ordinary_ones_left_alone() -> None:
    assert overflow_shifts(1.0, 1.0, 64) == (0, 0)
    assert overflow_shifts(1e-8, 1e-8, 64) == (0, 0)  # 6e-15: small, products still normal
    for table_peak, query_peak, dim in [(3e-25, 3e-25, 6), (1e-44, 3.0, 8), (3.0, 1e-40, 512), (1e-20, 1e-20, 8)]:
        t, q = overflow_shifts(table_peak, query_peak, dim)
        assert t <= 0 and q <= 0
        bound = dim * np.ldexp(table_peak, -t) * np.ldexp(query_peak, -q)
        assert 2.0**FLOAT32_SMALL_EXPONENT <= bound < 2.0**2
    # The smaller side is lifted first: ordinary queries stay untouched.
    assert overflow_shifts(1e-44, 3.0, 8)[1] == 0


@pytest.mark.parametrize("scale", [1e-25, 1e-36])
def test_every_scoring_ranks_a_tiny_table_like_float64(scale: float) -> None:
    queries, table = _tables(scale)
    found = multi_scoring_topk(queries, table, 10, (1.0, 0.0, 0.5))
    ordinary = multi_scoring_topk(*_tables(1.0), 10, (1.0, 0.0, 0.5))
    for alpha in (1.0, 0.0, 0.5):
        np.testing.assert_array_equal(found[alpha][1], _reference(queries, table, 10, alpha))
        np.testing.assert_array_equal(found[alpha][1], ordinary[alpha][1])
    # The dot scores are the true (tiny) inner products, kept in float64.
    scores, rows = found[1.0]
    assert scores.dtype == np.float64
    exact = np.take_along_axis(queries.astype(np.float64) @ table.astype(np.float64).T, rows, axis=1)
    np.testing.assert_allclose(scores, exact, rtol=1e-5)


def test_the_tiled_scan_and_faiss_search_rank_a_tiny_table_like_float64() -> None:
    queries, table = _tables(1e-25, n_items=3000)
    reference = _reference(queries, table, 20, 1.0)
    tiled = multi_scoring_topk(queries, table, 20, (1.0, 0.0), item_block=512)
    np.testing.assert_array_equal(tiled[1.0][1], reference)
    np.testing.assert_array_equal(tiled[0.0][1], _reference(queries, table, 20, 0.0))
    _, rows = sharded_topk(queries, [table[:1000], table[1000:]], 20, normalise=False)
    np.testing.assert_array_equal(rows, reference)


@pytest.mark.parametrize("kind", ["ivf", "hnsw"])
@pytest.mark.parametrize("scale", [1e-25, 1e25])
def test_an_approximate_index_ranks_a_tiny_or_huge_table_like_float64(kind: str, scale: float) -> None:
    """QA Measures N2: FAISS searched the table as it was, so at 1e-25 every product was 0
    and dot served the lowest rows (recall@10 0.002, 'the skew is likely understated')."""
    def recall(queries: np.ndarray, table: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        scores, rows, _ = approximate_topk(queries, table, 10, normalise=False, kind=kind)
        expected = _reference(queries, table, 10, 1.0)
        return float(np.mean([np.isin(r, e).mean() for r, e in zip(rows, expected)])), scores, rows

    at_one, _, ordinary = recall(*_tables(1.0, n_items=2000))
    found, scores, rows = recall(*_tables(scale, n_items=2000))
    assert at_one >= 0.75 and found >= at_one - 0.01  # IVF probes 1/8 of its lists: 0.78 at any scale
    assert np.mean(ordinary == rows) >= 0.99
    assert np.all(np.isfinite(scores)) and np.all(scores[:, 0] > 0)  # scaled back, on the table's own scale


def test_tiny_and_ordinary_shards_merge_on_one_scale() -> None:
    # The Dask path shifts each shard on its own: tiny shards' scores must stay in float64.
    queries, table = _tables(1.0, n_items=600)
    table[300:] *= np.float32(1e-40)  # subnormal entries: products far below float32's range
    merged = None
    for start in (300, 0):
        found = search_shard(table[start : start + 300], queries, 310, start, (1.0,), None)[1.0]
        assert found[0].dtype == (np.float64 if start else np.float32)
        merged = merge_topk(merged, found, 310)
    assert merged is not None
    np.testing.assert_array_equal(merged[1], _reference(queries, table, 310, 1.0))


def _write_model(path: Path, users: np.ndarray, items: np.ndarray) -> None:
    import torch

    torch.save({"user_embedding.weight": torch.from_numpy(users), "item_embedding.weight": torch.from_numpy(items)}, path)


@pytest.mark.slow  # two audits, about 8 s
def test_audit_of_a_tiny_model_equals_the_audit_at_scale_one(tmp_path: Path) -> None:
    """The QA's model: norms rising with frequency; at scale 1e-25 the old search scored
    every item 0, so dot served the lowest unseen rows (head share@1 0.40, severity none)."""
    rng = np.random.default_rng(0)
    n_users, n_items, dim = 30, 40, 6
    p = 1 / np.arange(1, n_items + 1)
    p /= p.sum()
    pairs = sorted({(u, int(i)) for u in range(n_users) for i in rng.choice(n_items, size=rng.integers(2, 8), p=p)})
    users_seen, items_seen = (np.array(c) for c in zip(*pairs))
    freq = np.bincount(items_seen, minlength=n_items)
    items = rng.normal(size=(n_items, dim))
    items /= np.linalg.norm(items, axis=1, keepdims=True)
    items *= (1 + np.log1p(freq))[:, None]
    users = rng.normal(size=(n_users, dim))
    log = tmp_path / "log.parquet"
    pq.write_table(pa.table({"user_id": users_seen, "item_id": items_seen}), log)
    # Known answer: the top-1% head is the single most frequent item; share of dot's @1 slots.
    scores = users @ items.T
    scores[users_seen, items_seen] = -np.inf
    head = int(np.argmax(freq))
    expected_dot = float(np.mean(np.argmax(scores, axis=1) == head))
    reports = []
    for scale in (1.0, 1e-25):
        model = tmp_path / f"m{scale}.pt"
        _write_model(model, (users * scale).astype(np.float32), (items * scale).astype(np.float32))
        out = tmp_path / f"r{scale}.json"
        from auditor.cli import cli

        run = CliRunner().invoke(cli, ["check", str(model), "--interactions", str(log), "-k", "1", "--no-probes", "-q",
                                       "--format", "json", "-o", str(out)])
        assert run.exit_code == 0, run.output
        reports.append(json.loads(out.read_text()))
    out = tmp_path / "ivf.json"
    run = CliRunner().invoke(cli, ["check", str(tmp_path / "m1e-25.pt"), "--interactions", str(log), "-k", "1",
                                   "--no-probes", "-q", "--index", "ivf", "--format", "json", "-o", str(out)])
    assert run.exit_code == 0, run.output
    ivf = json.loads(out.read_text())  # 40 items: one IVF list, so the approximate lists are exact ones
    assert ivf["retrieval"]["at"]["1"]["dot"]["head_share_1pct"] == pytest.approx(expected_dot)
    ordinary, tiny = reports
    assert tiny["retrieval"]["at"]["1"]["dot"]["head_share_1pct"] == pytest.approx(expected_dot)
    assert expected_dot == pytest.approx(2 / 30)
    assert tiny["retrieval"]["at"] == ordinary["retrieval"]["at"]
    assert tiny["verdict"]["severity"] == ordinary["verdict"]["severity"] == "high"
