"""``flat_metrics()`` holds every name a ``--fail-on`` gate of the audit's settings accepts,
``None`` for what was not measured (QA Api F3, docs/api.md): before, an audit without a
holdout had no ``ndcg_dot@10`` key at all (KeyError in a notebook gate) and a measure that
gave null (``item_bias_spearman``) was left out, though ``--fail-on`` accepts both."""

from __future__ import annotations


import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy import stats

from auditor import AuditConfig, AuditResult, run_audit
from auditor.flat import flat_entries, flat_metrics_from_report, metric_names


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> tuple[AuditResult, np.ndarray, np.ndarray]:
    folder = tmp_path_factory.mktemp("flat")
    rng = np.random.default_rng(3)
    table = rng.normal(size=(40, 6)).astype(np.float32)
    np.save(folder / "items.npy", table)
    items = np.repeat(np.arange(40), np.arange(1, 41))
    pq.write_table(pa.table({"user_id": np.arange(items.size) % 7, "item_id": items}), folder / "log.parquet")
    config = AuditConfig(model=folder / "items.npy", interactions=folder / "log.parquet", ks=(5, 20),
                         alphas=(0.5,), bootstrap=0, probes=False)
    return run_audit(config), table, np.arange(1, 41)


def test_every_gateable_name_is_a_key(audited: tuple[AuditResult, np.ndarray, np.ndarray]) -> None:
    result, table, counts = audited
    flat = result.flat_metrics()
    names = metric_names((5, 20), [n for n in result.measures], (0.5,))
    assert set(names) <= set(flat)
    for name in ("ndcg_dot@5", "recall_cosine@20", "ndcg_ratio@5", "mrr_alpha_0.5@20",
                 "head_share_1pct_served@5", "training_spearman"):
        assert flat[name] is None
    assert result.measures["item_bias_spearman"] is None  # an audit measure that gave null is a key too
    assert flat["item_bias_spearman"] is None
    rho = stats.spearmanr(np.linalg.norm(table.astype(np.float64), axis=1), counts).statistic
    assert flat["spearman"] == pytest.approx(rho, abs=1e-12)


def test_the_diff_still_compares_only_what_a_report_holds(audited: tuple[AuditResult, np.ndarray, np.ndarray]) -> None:
    result, _table, _counts = audited
    report = result.to_dict()
    entries = flat_entries(report)
    assert "ndcg_dot@5" not in entries  # no row "None -> None" for every accuracy name in a diff
    assert flat_metrics_from_report(report) == result.flat_metrics()
    assert {n: e.value for n, e in entries.items()} == {n: v for n, v in result.flat_metrics().items() if n in entries}
