"""A cut-off K at or past every query's candidate count measures no harm (QA measures F1):
every list then holds every candidate under any scoring, so dot and cosine serve the same
items by construction. Such a K never grades the harm nor clears it ("serving is not
skewed"): where every K is so, severity rests on the correlation, as without retrieval."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy import stats

from auditor.audit import run_audit
from auditor.config import AuditConfig
from auditor.harm import measured_cutoffs, worst_skew
from auditor.report.content import headline
from auditor.report.harms import cutoff_title
from auditor.retrieval.serving import saturated_cutoffs

N_ITEMS = 60


def _model(folder: Path) -> tuple[Path, Path, np.ndarray]:
    """60 items whose norms grow with their training frequency, 40 users."""
    rng = np.random.default_rng(0)
    freqs = np.arange(1, N_ITEMS + 1)
    vectors = rng.normal(size=(N_ITEMS, 8))
    vectors *= (np.log1p(freqs) / np.linalg.norm(vectors, axis=1))[:, None]
    np.save(folder / "items.npy", vectors.astype(np.float32))
    items = np.repeat(np.arange(N_ITEMS), freqs)
    users = rng.integers(0, 40, items.size)
    pq.write_table(pa.table({"user_id": users, "item_id": items}), folder / "log.parquet")
    return folder / "items.npy", folder / "log.parquet", vectors


def test_saturated_cutoffs_count_each_querys_candidates() -> None:
    # 6 items; query 0 excludes 1 row, query 1 excludes 3: the widest has 5 candidates.
    exclude = (np.array([0, 1, 4]), np.array([0, 1, 2, 3]))
    assert saturated_cutoffs([1, 4, 5, 6], 6, exclude) == {1: False, 4: False, 5: True, 6: True}
    assert saturated_cutoffs([5, 6], 6, None) == {5: False, 6: True}  # nothing excluded: the catalogue


def test_a_k_past_the_catalogue_is_not_graded_and_severity_rests_on_the_correlation(tmp_path: Path) -> None:
    model, log, vectors = _model(tmp_path)
    result = run_audit(AuditConfig(model=model, interactions=log, ks=(100,), probes=False, bootstrap=0, seed=1))
    assert result.retrieval is not None
    assert result.retrieval.saturated == {N_ITEMS: True}  # clamped to 60: every list holds every candidate
    cut = result.retrieval.at[N_ITEMS]
    assert cut.dot.get("head_share_10pct") == pytest.approx(cut.cosine.get("head_share_10pct"))
    assert measured_cutoffs(result) == [] and worst_skew(result) is None
    # The correlation rule, computed independently: ρ of norm against frequency >= 0.3 gives moderate.
    rho = stats.spearmanr(np.arange(1, N_ITEMS + 1), np.linalg.norm(vectors, axis=1)).statistic
    assert rho > 0.5
    assert result.verdict.severity == "moderate"  # was "none": "serving is not skewed"
    assert result.verdict.quoted_k is None and result.verdict.assessed
    said = "the harm is not measured at K=60 (K reaches the catalogue: every list holds every candidate)"
    assert said in result.verdict.summary and "not skewed" not in result.verdict.summary
    assert said in headline(result)
    assert "K reaches the catalogue" in cutoff_title(result.retrieval, N_ITEMS)
    assert result.to_dict()["retrieval"]["saturated"] == {"60": True}
    assert result.flat_metrics()["severity_level"] == 2.0


def test_a_smaller_k_beside_it_grades_and_the_saturated_k_is_never_quoted(tmp_path: Path) -> None:
    model, log, _ = _model(tmp_path)
    result = run_audit(AuditConfig(model=model, interactions=log, ks=(5, 100), probes=False, bootstrap=0, seed=1))
    assert result.retrieval is not None and result.retrieval.saturated == {5: False, N_ITEMS: True}
    assert measured_cutoffs(result) == [5]
    assert result.verdict.quoted_k == 5 and result.verdict.first_seen_k is None
    assert "K reaches the catalogue" not in cutoff_title(result.retrieval, 5)


def test_a_k_one_short_of_every_users_candidates_is_saturated_after_seen_items(tmp_path: Path) -> None:
    # Every user trained on at least one item, so K = 59 already holds every unseen item.
    model, log, _ = _model(tmp_path)
    result = run_audit(AuditConfig(model=model, interactions=log, ks=(59,), probes=False, bootstrap=0, seed=1))
    assert result.retrieval is not None and result.retrieval.saturated == {59: True}
    assert result.verdict.quoted_k is None
